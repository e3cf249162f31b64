//! `LockManager`: the entry point for taking locks.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::acquire::pending::PendingAcquire;
use crate::backend::wait_queue::Wake;
use crate::backend::{Attempt, Backend};
use crate::builder::LockManagerBuilder;
use crate::keys::{KeyKind, KeySpace, LockKey};
use crate::lease::scope;
use crate::lease::shutdown::Leases;
use crate::lease::watchdog::{RenewalTimer, Watchdog, Watched};
use crate::lease::Lease;
use crate::options::MinReplicas;
use crate::telemetry::MetricLabel;
use crate::token::{Identity, OwnerToken};
use crate::{LockError, LockGuard, LockOptions, OnLost};

/// How long a newcomer queued behind local waiters waits for a release
/// message before it tries anyway (the holder may be in another process and
/// the message may have been missed).
const QUEUE_BEHIND_FALLBACK: Duration = Duration::from_millis(50);

/// How long a waiter's place in a key's queue in Redis lasts without being
/// refreshed: a waiter that died holds up the queue at most this long.
const QUEUE_PLACE: Duration = Duration::from_secs(3);

/// Longest pause between two attempts of a queued waiter, each of which
/// refreshes its place.
const QUEUE_REFRESH: Duration = Duration::from_secs(1);

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
    keys: KeySpace,
    renewals: Arc<RenewalTimer>,
    /// Written into every owner token this manager issues.
    identity: Identity,
    /// What it holds, for `shutdown`.
    leases: Arc<Leases>,
    /// The Tokio runtime it was built on, if any: a release whose own
    /// runtime ended before it could be sent is sent from there.
    runtime: Option<tokio::runtime::Handle>,
}

impl LockManager {
    /// A manager over `backend` whose keys live under `namespace` (a `:` is
    /// added when missing; see `LockManagerBuilder::namespace`).
    pub(crate) fn new(backend: Backend, namespace: String, identity: Identity) -> LockManager {
        crate::describe_metrics();
        let keys = if backend.needs_hash_tags() {
            KeySpace::hash_tagged(namespace)
        } else {
            KeySpace::new(namespace)
        };
        LockManager {
            inner: Arc::new(ManagerInner {
                backend: Arc::new(backend),
                keys,
                renewals: Arc::default(),
                identity,
                leases: Arc::default(),
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    /// Connects to one Redis server with default settings; see [`LockManagerBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// Connects to independent Redis masters for Redlock with default
    /// settings; see [`LockManagerBuilder::redlock`].
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
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

    /// Connects to the primary that Redis Sentinel names for `service_name`,
    /// with default settings, and follows it across failovers; see
    /// [`LockManagerBuilder::sentinel`], including what an asynchronous
    /// failover can do to a lock and how `LockOptions::min_replicas` prevents it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
    ///
    /// let locks = LockManager::sentinel(
    ///     "mymaster",
    ///     [
    ///         "redis://127.0.0.1:26379",
    ///         "redis://127.0.0.1:26380",
    ///         "redis://127.0.0.1:26381",
    ///     ],
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sentinel<I>(service_name: &str, sentinel_urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().sentinel(service_name, sentinel_urls).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with default
    /// settings; see [`LockManagerBuilder::cluster`], including how keys map
    /// to slots and what a failover can do to a lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
    ///
    /// let locks = LockManager::cluster([
    ///     "redis://127.0.0.1:7000",
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    /// ])
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cluster<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().cluster(urls).await
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
        self.inner.keys.namespace()
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.inner.backend
    }

    /// The Tokio runtime this manager was built on, if it was built on one.
    pub(crate) fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.inner.runtime.as_ref()
    }

    /// The leases this manager and its clones hold, and whether it is shut down.
    pub(crate) fn leases(&self) -> &Arc<Leases> {
        &self.inner.leases
    }

    pub(crate) fn same_as(&self, other: &LockManager) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The key space of this manager's locks.
    pub(crate) fn key_space(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// Who this manager is, as its owner tokens say.
    pub(crate) fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    pub(crate) fn lock_key(&self, key: &str) -> LockKey {
        self.inner.keys.key(key)
    }

    /// The names of the semaphore on `key` (see `keys`).
    pub(crate) fn semaphore_key(&self, key: &str) -> LockKey {
        self.inner.keys.semaphore(key)
    }

    /// Takes the lock on `key`, waiting up to `options.wait` while someone else
    /// holds it. Waiting is woken by the holder's release (or by its TTL
    /// running out), never by polling.
    ///
    /// Inside a lock scope that already holds `key` this re-enters (or fails
    /// with `AlreadyHeld` for non-re-entrant options, and with `LeaseLost`
    /// when the scope's lease on `key` is already lost). Fails with `Busy`
    /// when the lock is held elsewhere and `wait` is zero (one attempt),
    /// `Timeout` when it stayed busy for all of a non-zero `wait`,
    /// `Connection` when Redis is unreachable
    /// (for Redlock: when fewer than a quorum of nodes answer), and
    /// `NotReplicated` when [`LockOptions::min_replicas`] was not met.
    pub async fn acquire(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        let wait = options.wait;
        match self.acquire_within(key, &options, wait).await {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(LockError::Timeout {
                key: key.to_owned(),
                waited: wait,
            }),
            Err(LockError::Busy {
                remaining: None, ..
            }) => Err(busy(key, self.holder_remaining(key).await)),
            Err(err) => Err(err),
        }
    }

    /// How long the holder of `key` has left, asked for separately where the
    /// attempt did not say (a single server's first attempt is a plain
    /// `SET NX`, which does not tell); `None` when that fails too.
    async fn holder_remaining(&self, key: &str) -> Option<Duration> {
        let state = self.backend().inspect(&self.lock_key(key)).await;
        state.ok().and_then(|state| state.remaining)
    }

    /// One attempt, no waiting: `Ok(None)` when someone else holds `key`.
    pub async fn try_acquire(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        not_busy(self.acquire_within(key, &options, Duration::ZERO).await)
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
        Self::run_locked(key, guard, on_lost, body).await
    }

    /// As [`with_lock`](Self::with_lock), but with one attempt: when someone
    /// else holds `key`, returns `Ok(None)` at once without running `body`
    /// (logged at info), whatever `wait` says. For jobs that every instance
    /// of a fleet schedules and that one of them should run (see
    /// [`LockOptions::hold_at_least`]).
    pub async fn try_with_lock<F: Future>(
        &self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError> {
        let on_lost = options.on_lost;
        let Some(guard) = self.try_acquire(key, options).await? else {
            tracing::info!(key, "lock held elsewhere: skipped");
            return Ok(None);
        };
        Self::run_locked(key, guard, on_lost, body).await.map(Some)
    }

    /// Runs `body` in the lock scope of `guard`'s lease, cancelled when the
    /// lease is lost unless `on_lost` says otherwise, then releases.
    async fn run_locked<F: Future>(
        key: &str,
        guard: LockGuard,
        on_lost: OnLost,
        body: F,
    ) -> Result<F::Output, LockError> {
        let lease = Arc::clone(guard.lease());
        // Boxed: a body that nests more locked calls would otherwise grow
        // this future (and the stack of whoever polls it) with every level.
        let scoped = Box::pin(scope::enter(Arc::clone(&lease), body).instrument(lease.span()));
        let Some(output) = until_lost(scoped, lease.lost(), on_lost).await else {
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

    /// [`take`](Self::take), counted in the metrics and traced in a
    /// `lock.acquire` span.
    async fn acquire_within(
        &self,
        key: &str,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        let label = MetricLabel::new(options, KeyKind::Lock);
        let acquisition = self.take(key, options, wait, &label);
        label.observe(key, wait, acquisition).await
    }

    async fn take(
        &self,
        key: &str,
        options: &LockOptions,
        wait: Duration,
        label: &MetricLabel,
    ) -> Result<Option<LockGuard>, LockError> {
        self.leases().ensure_open()?;
        non_empty(key)?;
        let ttl_ms = options.ttl_millis()?;
        let replicas = options.replication()?;
        options.hold()?;
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
        let token = OwnerToken::issue(&self.inner.identity, ttl_ms, options.label.as_deref());
        let request = Request {
            key: &lock_key,
            token: &token,
            ttl_ms,
            replicas,
            label,
        };
        let started = Instant::now();
        // A newcomer that finds this process's waiters on the key does not
        // race them with a plain attempt. Where waiters are only woken (not
        // handed the lock), it queues behind them locally: a task that just
        // released would otherwise win its own lock back before the waiter
        // woken by that release reaches the server. Where the backend queues
        // waiters itself, it joins that queue at once: a plain `SET NX` would
        // overtake a waiter still between its first attempt and its place in
        // the queue, whenever a release finds the queue empty.
        let behind_local_waiters = !wait.is_zero() && self.backend().local_waiters(&lock_key) > 0;
        let queue_behind = behind_local_waiters && !self.backend().hands_off();
        let mut fence_with_lock = None;
        let (attempt, sent) = if behind_local_waiters {
            (Attempt::Busy { remaining: None }, started)
        } else if options.fenced {
            let (attempt, fence) = self.attempt_with_fence(&request).await;
            fence_with_lock = fence;
            attempt?
        } else {
            self.attempt(&request, Duration::ZERO).await?
        };
        let granted = match attempt {
            Attempt::Acquired => Some(sent),
            Attempt::Busy { remaining } if wait.is_zero() => {
                tracing::debug!(key, holder_remaining = ?remaining, "lock busy");
                return Err(busy(key, remaining));
            }
            Attempt::Busy { remaining } => {
                self.wait_for_release(&request, remaining, started, wait, queue_behind)
                    .await?
            }
        };
        let Some(sent) = granted else {
            return Ok(None);
        };
        tracing::debug!(key, waited = ?started.elapsed(), "lock acquired");
        let lease = self.start_lease(lock_key, token, options, sent);
        // The guard first: dropped while its token is being asked for, it
        // releases the lock.
        let guard = LockGuard::owner(lease);
        match fence_with_lock {
            Some((fence, issued_at)) => guard.lease().keep_fence(fence, issued_at),
            None if options.fenced => {
                if let Err(err) = guard.fencing_token().await {
                    tracing::debug!(key, error = %err, "fencing token not issued with the lock; asked for again on request");
                }
            }
            None => {}
        }
        Ok(Some(guard))
    }

    /// The first attempt of a [`fenced`](LockOptions::fenced) acquisition:
    /// the fencing token's request goes out right behind the attempt, on the
    /// same connection, so the server runs it just after and both answers
    /// come back in one round trip. The token (with when it was answered)
    /// only if the attempt took the lock and the backend issued it to us; a
    /// busy lock or an error leaves `None`.
    async fn attempt_with_fence(
        &self,
        request: &Request<'_>,
    ) -> (
        Result<(Attempt, Instant), LockError>,
        Option<(u64, Instant)>,
    ) {
        let fence = async {
            let issued = self
                .backend()
                .fence(request.key, request.token, request.ttl_ms)
                .await;
            (issued, Instant::now())
        };
        // The attempt settles as soon as its own answer is in, but the lock
        // has no guard until both are: a caller that goes away while the
        // token's answer is on its way must give the lock back too.
        let pending = PendingAcquire::new(self.backend(), request.key, request.token);
        let (attempt, (issued, issued_at)) =
            tokio::join!(self.attempt(request, Duration::ZERO), fence);
        pending.settled();
        let fence = match (&attempt, issued) {
            (Ok((Attempt::Acquired, _)), Ok(Some(fence))) => Some((fence, issued_at)),
            _ => None,
        };
        (attempt, fence)
    }

    /// Waits up to `wait` (from `started`) for the busy lock of `request`:
    /// joins the key's local wait queue and subscribes to its releases, then
    /// retries when a release wakes it or the holder's TTL (`remaining`) runs
    /// out; a newcomer that `queue_behind` this process's waiters first gives
    /// them a head start. On a single Redis server the waiter also takes a
    /// place in the key's queue in Redis, refreshed at every retry, and the
    /// release hands it the lock directly, in arrival order. Returns the send
    /// time of the granted attempt, or `None` when the wait ran out.
    async fn wait_for_release(
        &self,
        request: &Request<'_>,
        remaining: Option<Duration>,
        started: Instant,
        wait: Duration,
        queue_behind: bool,
    ) -> Result<Option<Instant>, LockError> {
        let _waiting = request.label.waiting();
        // A wait too long to represent (e.g. `Duration::MAX`) has no deadline.
        let deadline = started.checked_add(wait);
        // Subscribing is bounded by the wait too: past the deadline, one
        // last attempt decides.
        let watching = self.backend().watch(request.key);
        let mut ticket = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), watching)
                .await
                .ok(),
            None => Some(watching.await),
        };
        let queue_for = if self.backend().hands_off() {
            QUEUE_PLACE
        } else {
            Duration::ZERO
        };
        // From the first queued attempt on, leaving without the lock (give
        // up, error, cancellation) leaves the queue and gives back a grant
        // that may be on its way.
        let queued = (!queue_for.is_zero())
            .then(|| PendingAcquire::new(self.backend(), request.key, request.token));
        if let Some(ticket) = ticket.as_mut() {
            ticket.expect_grant(request.token.as_str());
        }
        let key = &request.key.user;
        tracing::debug!(key, holder_remaining = ?remaining, queue_behind, "waiting for lock");
        let mut retry_at = queue_behind.then(|| Instant::now() + QUEUE_BEHIND_FALLBACK);
        loop {
            if let (Some(retry_at), Some(ticket)) = (retry_at, &mut ticket) {
                let retry_at = deadline.map_or(retry_at, |deadline| retry_at.min(deadline));
                let woke = tokio::select! {
                    wake = ticket.next() => Some(wake),
                    () = tokio::time::sleep_until(retry_at.into()) => None,
                };
                if let Some(Wake::Granted) = woke {
                    if let Some(granted) = self.confirm_grant(request, queue_for).await? {
                        if let Some(queued) = queued {
                            queued.settled();
                        }
                        request.label.handoff();
                        tracing::debug!(key, "lock handed over by its releaser");
                        return Ok(Some(granted));
                    }
                    ticket.expect_grant(request.token.as_str());
                }
            }
            let (attempt, sent) = self.attempt(request, queue_for).await?;
            if let Some(ticket) = ticket.as_mut() {
                ticket.wake_used();
            }
            let remaining = match attempt {
                Attempt::Acquired => {
                    if let Some(queued) = queued {
                        queued.settled();
                    }
                    return Ok(Some(sent));
                }
                Attempt::Busy { remaining } => remaining,
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                tracing::debug!(key, waited = ?now - started, "gave up waiting for lock");
                return Ok(None);
            }
            let pause = remaining.unwrap_or(Duration::from_millis(10));
            let pause = if queue_for.is_zero() {
                pause.min(LONGEST_PAUSE) + Duration::from_millis(1)
            } else {
                pause.min(QUEUE_REFRESH)
            };
            retry_at = Some(now + pause);
        }
    }

    /// Confirms a lock that a release handed to this waiter, by extending it
    /// to the waiter's own ttl: returns when the confirmation was sent (the
    /// lease counts from then), or `None` when the grant had already run out.
    /// A replicated request confirms with a replicated attempt (`acquire.lua`
    /// sees the lock is ours and extends it, then `WAIT`), so the lock it
    /// keeps has reached its replicas like any other it takes.
    async fn confirm_grant(
        &self,
        request: &Request<'_>,
        queue_for: Duration,
    ) -> Result<Option<Instant>, LockError> {
        if request.replicas.is_some() {
            let (attempt, sent) = self.attempt(request, queue_for).await?;
            return Ok((attempt == Attempt::Acquired).then_some(sent));
        }
        let sent = Instant::now();
        let confirmed = self
            .backend()
            .renew(request.key, request.token, request.ttl_ms)
            .await?;
        Ok(confirmed.then_some(sent))
    }

    /// One attempt (queueing for `queue_for` if the lock is busy and that is
    /// not zero), undone if the caller goes away while it is in flight;
    /// returns its outcome and when it was sent.
    async fn attempt(
        &self,
        request: &Request<'_>,
        queue_for: Duration,
    ) -> Result<(Attempt, Instant), LockError> {
        let backend = self.backend();
        let pending = PendingAcquire::new(backend, request.key, request.token);
        let sent = Instant::now();
        let attempt = backend
            .try_lock(
                request.key,
                request.token,
                request.ttl_ms,
                request.replicas,
                queue_for,
            )
            .await;
        pending.settled();
        Ok((attempt?, sent))
    }

    /// Renews the leases `guards` own (not re-entered ones) together, in one
    /// cycle; see [`RenewalTimer::renew_together`]. The returned watchdog is
    /// to be stopped when the guards are released.
    pub(crate) fn renew_together(&self, guards: &[LockGuard]) -> Option<Arc<Watchdog>> {
        let watchdogs: Vec<&Arc<Watchdog>> = guards
            .iter()
            .filter(|guard| !guard.is_reentered())
            .filter_map(|guard| guard.lease().watchdog())
            .collect();
        self.inner.renewals.renew_together(&watchdogs)
    }

    /// A lease on `key` (a lock or a semaphore's permit) granted by an
    /// attempt sent at `requested_at`, watched by this manager's watchdog.
    pub(crate) fn start_lease(
        &self,
        key: LockKey,
        token: OwnerToken,
        options: &LockOptions,
        requested_at: Instant,
    ) -> Arc<Lease> {
        let key = Arc::new(key);
        let label = MetricLabel::new(options, key.kind);
        let id = self.leases().next_id();
        let mut lease = Lease::new(
            id,
            self.clone(),
            Arc::clone(&key),
            token.clone(),
            options.ttl,
            requested_at,
            label.clone(),
        );
        let watchdog = self.inner.renewals.watch(
            Arc::clone(self.backend()),
            Watched {
                key,
                token,
                ttl: options.ttl,
                renew: options.renew,
                status: lease.status.clone(),
                sent: requested_at,
                label,
            },
        );
        lease.set_watchdog(watchdog);
        if let Some(hold) = options.hold_at_least {
            lease.hold_until(Instant::now() + hold);
        }
        let lease = Arc::new(lease);
        self.leases().record(id, &lease);
        lease
    }
}

/// What every attempt of one acquisition sends.
struct Request<'a> {
    key: &'a LockKey,
    token: &'a OwnerToken,
    ttl_ms: u64,
    replicas: Option<MinReplicas>,
    label: &'a MetricLabel,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("namespace", &self.inner.keys.namespace())
            .finish_non_exhaustive()
    }
}

/// Runs `body` to completion or, with `OnLost::Cancel`, until `lost`
/// resolves first: then `None`, and the body is dropped at its current
/// `.await`.
pub(crate) async fn until_lost<F: Future>(
    body: F,
    lost: impl Future<Output = ()>,
    on_lost: OnLost,
) -> Option<F::Output> {
    match on_lost {
        OnLost::Cancel => tokio::select! {
            biased;
            () = lost => None,
            output = body => Some(output),
        },
        OnLost::Continue => Some(body.await),
    }
}

/// `Err(InvalidOptions)` for an empty key: a lock on "" is almost always a
/// placeholder that rendered empty, which would make unrelated calls share
/// one lock.
pub(crate) fn non_empty(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidOptions(
            "the lock key is empty: check the values its placeholders render (an empty string makes unrelated calls share one lock)".into(),
        ));
    }
    Ok(())
}

/// The error of one attempt, made without waiting, on a lock held elsewhere
/// whose lease has about `remaining` left.
pub(crate) fn busy(key: &str, remaining: Option<Duration>) -> LockError {
    LockError::Busy {
        key: key.to_owned(),
        remaining,
    }
}

/// `Ok(None)` for [`LockError::Busy`]: what a `try_` method returns for a
/// held lock.
pub(crate) fn not_busy<T>(result: Result<Option<T>, LockError>) -> Result<Option<T>, LockError> {
    match result {
        Err(LockError::Busy { .. }) => Ok(None),
        other => other,
    }
}
