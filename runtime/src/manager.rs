//! `LockManager`: the entry point for taking locks.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{
    Attempt, Backend, LockKey, MemoryBackend, RedisBackend, RedisConfig, RedlockBackend, TlsConfig,
};
use crate::lease::Lease;
use crate::options::MinReplicas;
use crate::pending::PendingAcquire;
use crate::token::OwnerToken;
use crate::watchdog::Watchdogs;
use crate::{scope, LockError, LockGuard, LockOptions, OnLost};

/// How long a newcomer queued behind local waiters waits for a release
/// message before it tries anyway (the holder may be in another process and
/// the message may have been missed).
const QUEUE_BEHIND_FALLBACK: Duration = Duration::from_millis(50);

/// Longest pause of a waiter between two attempts, whatever TTL the holder
/// reports (any client may have set a key with a huge TTL).
const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// Hands out locks from one backend. Cheap to clone; clones share the
/// backend's multiplexed, auto-reconnecting connections (one per server) and
/// its notification channels.
#[derive(Clone)]
pub struct LockManager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    backend: Arc<Backend>,
    namespace: String,
    fence_namespace: String,
    watchdogs: Arc<Watchdogs>,
}

/// Settings of a [`LockManager`] before it connects.
#[derive(Debug, Clone)]
pub struct LockManagerBuilder {
    namespace: String,
    redis: RedisConfig,
    tls: TlsConfig,
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            namespace: "lock:".to_owned(),
            redis: RedisConfig {
                connect_timeout: Duration::from_secs(1),
                response_timeout: Duration::from_secs(1),
            },
            tls: TlsConfig::default(),
        }
    }
}

impl LockManagerBuilder {
    /// Prefix of every lock key in Redis (default `lock:`). A `:` is added
    /// when the prefix does not end with one (`app` becomes `app:`), and
    /// fencing counters live under the prefix with `-fence` before that `:`
    /// (`app-fence:`). So every lock key starts with `<base>:` and every
    /// internal key with `<base>-fence:`: no user key, whatever characters it
    /// holds, can name an internal key.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Longest time to open a connection to Redis (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.redis.connect_timeout = timeout;
        self
    }

    /// Longest time to wait for one command's answer (default 1 s). Keep it
    /// well below your lock TTLs: a renewal slower than the lease counts as lost.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.redis.response_timeout = timeout;
        self
    }

    /// Trusts the root certificates in `pem` (one or more PEM `CERTIFICATE`
    /// blocks, e.g. a private CA) for `rediss://` servers, *instead of* the
    /// operating system's trust store; without it the system's store is used.
    /// Applies to [`connect`](Self::connect) and [`redlock`](Self::redlock);
    /// a PEM that cannot be parsed makes them fail with
    /// `LockError::InvalidOptions`. A certificate the server presents that
    /// does not chain to these roots makes them fail with
    /// `LockError::Tls`, which names the certificate problem.
    ///
    /// TLS uses rustls. At the first `rediss://` connection this installs
    /// rustls's `ring` provider as the process-wide default crypto provider,
    /// unless the application installed one before (which is then used).
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: Vec<u8>) -> Self {
        self.tls.root_certificates = Some(pem);
        self
    }

    /// Connects to one Redis server: `redis://[user:pass@]host[:port][/db]`,
    /// or `rediss://…` for TLS with the `tls` feature (see
    /// `tls_root_certificate`). Fails with `LockError::Connection` within
    /// about twice the connect timeout when Redis is unreachable,
    /// `LockError::Tls` when the TLS handshake fails, and with
    /// `LockError::InvalidUrl` for a URL it cannot use (including `rediss://`
    /// without the `tls` feature).
    pub async fn connect(self, url: &str) -> Result<LockManager, LockError> {
        let backend = RedisBackend::connect(url, self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redis(Box::new(backend))))
    }

    /// Connects to N independent Redis masters for Redlock: a lock is held
    /// while a majority of them (N / 2 + 1) holds it, so it survives the loss
    /// of up to N − quorum nodes. `N` must be odd (3 or 5 in practice): an
    /// even N is refused with `LockError::InvalidOptions`, because it survives
    /// no more failures than N − 1 nodes would. Connects to all nodes at once
    /// and fails with `LockError::Connection` when fewer than a quorum answer;
    /// the other nodes are connected when they come back.
    ///
    /// Each acquisition costs one round trip to all nodes plus one more to
    /// write the fencing token back (which keeps tokens strictly increasing
    /// across quorums); renewal and release cost one. The lease is valid for
    /// the ttl less a safety margin (6 % of the ttl + 2 ms), counted from
    /// before the first request, and [`LockGuard::valid_until`] reports it.
    /// The nodes must not fail over to replicas, and a node that restarts
    /// without its data must stay down for at least the longest ttl in use,
    /// so that every lock that depended on it has expired or been reported
    /// lost before it rejoins. `LockOptions::min_replicas` is refused with
    /// `InvalidOptions`, and so is a ttl under 10 ms. The reasoning behind
    /// each rule is in the Redlock backend's source (`backend/redlock.rs`).
    ///
    /// [`LockGuard::valid_until`]: crate::LockGuard::valid_until
    pub async fn redlock<I>(self, urls: I) -> Result<LockManager, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls = urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        let backend = RedlockBackend::connect(urls, self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redlock(backend)))
    }

    /// A manager whose locks live in this process's memory.
    pub fn in_memory(self) -> LockManager {
        self.build(Backend::Memory(MemoryBackend::new()))
    }

    fn build(self, backend: Backend) -> LockManager {
        let (namespace, fence_namespace) = key_prefixes(self.namespace);
        LockManager {
            inner: Arc::new(ManagerInner {
                backend: Arc::new(backend),
                namespace,
                fence_namespace,
                watchdogs: Arc::default(),
            }),
        }
    }
}

/// The prefixes of lock keys and of fencing counters for a namespace: `base:`
/// and `base-fence:`. They differ at the character after `base` (`:` and
/// `-`), so no key under one can be a key under the other.
fn key_prefixes(mut namespace: String) -> (String, String) {
    if !namespace.ends_with(':') {
        namespace.push(':');
    }
    let base = &namespace[..namespace.len() - 1];
    let fence = format!("{base}-fence:");
    (namespace, fence)
}

impl LockManager {
    /// Connects to one Redis server with default settings; see [`LockManagerBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// Connects to independent Redis masters for Redlock with default
    /// settings; see [`LockManagerBuilder::redlock`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), distributed_lock_runtime::LockError> {
    /// use distributed_lock_runtime::LockManager;
    ///
    /// let locks = LockManager::redlock([
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    ///     "redis://127.0.0.1:7003",
    /// ])
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn redlock<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().redlock(urls).await
    }

    /// Settings for a new manager: namespace and time limits.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }

    /// A manager whose locks live in this process: same semantics as Redis
    /// (TTL, owner tokens, fencing, waiting without polling), no server needed.
    /// For unit tests and single-process services.
    pub fn in_memory() -> Self {
        Self::builder().in_memory()
    }

    /// The prefix of every lock key in the backend.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.inner.backend
    }

    pub(crate) fn same_as(&self, other: &LockManager) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn lock_key(&self, key: &str) -> LockKey {
        LockKey {
            user: key.to_owned(),
            lock: format!("{}{}", self.inner.namespace, key),
            fence: format!("{}{}", self.inner.fence_namespace, key),
        }
    }

    /// Takes the lock on `key`, waiting up to `options.wait` while someone else
    /// holds it. Waiting is woken by the holder's release (or by its TTL
    /// running out), never by polling.
    ///
    /// Inside a lock scope that already holds `key` this re-enters (or fails
    /// with `AlreadyHeld` for non-re-entrant options, and with `LeaseLost`
    /// when the scope's lease on `key` is already lost). Fails with `Timeout`
    /// when the lock stayed busy, `Connection` when Redis is unreachable
    /// (for Redlock: when fewer than a quorum of nodes answer), and
    /// `NotReplicated` when [`LockOptions::min_replicas`] was not met.
    pub async fn acquire(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        let wait = options.wait;
        self.acquire_within(key, &options, wait)
            .await?
            .ok_or(LockError::Timeout {
                key: key.to_owned(),
                waited: wait,
            })
    }

    /// One attempt, no waiting: `Ok(None)` when someone else holds `key`.
    pub async fn try_acquire(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.acquire_within(key, &options, Duration::ZERO).await
    }

    /// Runs `body` while holding the lock on `key`: acquires first (as
    /// [`acquire`](Self::acquire)), releases after the body's future completes,
    /// and also when it panics or is dropped.
    ///
    /// `body` runs in a lock scope: nested acquisitions of `key` inside it
    /// re-enter, and [`fencing_token`](crate::fencing_token) returns its token.
    /// With `OnLost::Cancel` (the default) the body is dropped at its next
    /// `.await` once the lease is lost and this returns `LockError::LeaseLost`.
    /// A re-entered call watches the shared lease with its own `on_lost`, and
    /// a call that re-enters a lease already lost fails with `LeaseLost`.
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves no lock
    /// behind (an acquisition in flight is undone, a held lock released).
    pub async fn with_lock<F: Future>(
        &self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        let on_lost = options.on_lost;
        let guard = self.acquire(key, options).await?;
        let lease = Arc::clone(guard.lease());
        let scoped = scope::enter(Arc::clone(&lease), body);
        let output = match on_lost {
            OnLost::Cancel => tokio::select! {
                biased;
                () = lease.lost() => None,
                output = scoped => Some(output),
            },
            OnLost::Continue => Some(scoped.await),
        };
        let Some(output) = output else {
            drop(guard);
            return Err(LockError::LeaseLost {
                key: key.to_owned(),
            });
        };
        match guard.release().await {
            Err(lost @ LockError::LeaseLost { .. }) if on_lost == OnLost::Cancel => Err(lost),
            _ => Ok(output),
        }
    }

    async fn acquire_within(
        &self,
        key: &str,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        let ttl_ms = options.ttl_millis()?;
        let replicas = options.replication()?;
        let lock_key = self.lock_key(key);
        if let Some(lease) = scope::find(self, &lock_key.lock) {
            if !options.reentrant {
                return Err(LockError::AlreadyHeld {
                    key: key.to_owned(),
                });
            }
            if lease.is_lost() {
                tracing::warn!(
                    key,
                    "re-entry refused: the enclosing scope's lease on this key is lost"
                );
                return Err(LockError::LeaseLost {
                    key: key.to_owned(),
                });
            }
            tracing::debug!(key, "lock re-entered by its own scope");
            return Ok(Some(LockGuard::reentered(lease)));
        }
        let token = OwnerToken::generate();
        let started = Instant::now();
        let backend = self.backend();
        // Newcomers queue behind this process's waiters instead of racing them:
        // a task that just released would otherwise win its own lock back
        // before the waiter woken by that release reaches the server.
        let queue_behind = !wait.is_zero() && backend.local_waiters(&lock_key) > 0;
        let mut requested_at = Instant::now();
        let mut attempt = Attempt::Busy { remaining: None };
        if !queue_behind {
            attempt = self.attempt(&lock_key, &token, ttl_ms, replicas).await?;
        }
        if let Attempt::Busy { remaining } = attempt {
            if wait.is_zero() {
                tracing::debug!(key, "lock busy");
                return Ok(None);
            }
            // A wait too long to represent (e.g. `Duration::MAX`) has no deadline.
            let deadline = started.checked_add(wait);
            // Subscribing is bounded by the wait too: past the deadline, one
            // last attempt decides.
            let watching = backend.watch(&lock_key);
            let mut ticket = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), watching)
                    .await
                    .ok(),
                None => Some(watching.await),
            };
            tracing::debug!(key, holder_remaining = ?remaining, queue_behind, "waiting for lock");
            let mut retry_at = queue_behind.then(|| Instant::now() + QUEUE_BEHIND_FALLBACK);
            loop {
                if let (Some(retry_at), Some(ticket)) = (retry_at, &mut ticket) {
                    let retry_at = deadline.map_or(retry_at, |deadline| retry_at.min(deadline));
                    tokio::select! {
                        () = ticket.woken() => {}
                        () = tokio::time::sleep_until(retry_at.into()) => {}
                    }
                }
                requested_at = Instant::now();
                attempt = self.attempt(&lock_key, &token, ttl_ms, replicas).await?;
                if let Some(ticket) = ticket.as_mut() {
                    ticket.wake_used();
                }
                let Attempt::Busy { remaining } = attempt else {
                    break;
                };
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    tracing::debug!(key, waited = ?now - started, "gave up waiting for lock");
                    return Ok(None);
                }
                retry_at = Some(match remaining {
                    Some(remaining) => {
                        now + remaining.min(LONGEST_PAUSE) + Duration::from_millis(1)
                    }
                    None => now + Duration::from_millis(10),
                });
            }
        }
        let Attempt::Acquired { fence } = attempt else {
            unreachable!("the wait loop only ends on acquisition");
        };
        tracing::debug!(key, fence, waited = ?started.elapsed(), "lock acquired");
        let lease = self.start_lease(lock_key, token, fence, options, requested_at);
        Ok(Some(LockGuard::owner(lease)))
    }

    /// One attempt, undone if the caller goes away while it is in flight.
    async fn attempt(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        ttl_ms: u64,
        replicas: Option<MinReplicas>,
    ) -> Result<Attempt, LockError> {
        let backend = self.backend();
        let pending = PendingAcquire::new(backend, key, token);
        let attempt = backend.try_lock(key, token, ttl_ms, replicas).await;
        pending.settled();
        attempt
    }

    fn start_lease(
        &self,
        key: LockKey,
        token: OwnerToken,
        fence: u64,
        options: &LockOptions,
        requested_at: Instant,
    ) -> Arc<Lease> {
        let key = Arc::new(key);
        let mut lease = Lease::new(
            self.clone(),
            Arc::clone(&key),
            token.clone(),
            fence,
            options.ttl,
            requested_at,
        );
        let watchdog = self.inner.watchdogs.watch(
            Arc::clone(self.backend()),
            key,
            token,
            options.ttl,
            options.renew,
            lease.status.clone(),
            requested_at,
        );
        lease.set_watchdog(watchdog);
        Arc::new(lease)
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_a_trailing_separator() {
        assert_eq!(
            key_prefixes("app".into()),
            ("app:".into(), "app-fence:".into())
        );
        assert_eq!(
            key_prefixes("lock:".into()),
            ("lock:".into(), "lock-fence:".into())
        );
        assert_eq!(key_prefixes(String::new()), (":".into(), "-fence:".into()));
    }

    #[test]
    fn no_user_key_can_name_an_internal_key() {
        let namespaces = ["lock", "lock:", "", ":", "lock-fence", "a:b", "x-fence:"];
        let keys = [
            "",
            "x",
            "-fence:x",
            ":x",
            "fence:x",
            "lock-fence:x",
            "-fence:",
            "{x}",
            "\u{0}",
        ];
        for namespace in namespaces {
            let manager = LockManager::builder().namespace(namespace).in_memory();
            let locks: Vec<LockKey> = keys.iter().map(|key| manager.lock_key(key)).collect();
            for lock in &locks {
                for other in &locks {
                    assert_ne!(
                        lock.lock, other.fence,
                        "namespace {namespace:?}: user key {:?} names the fencing counter of {:?}",
                        lock.user, other.user
                    );
                }
            }
        }
    }
}
