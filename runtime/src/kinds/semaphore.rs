//! Counting semaphores: at most N holders of one key at once, each holding a
//! [`Permit`] with its own lease, renewed by the watchdog like a lock's.
//!
//! A permit is a [`Lease`](crate::lease::Lease) on the semaphore's holder
//! set (a key of kind `Semaphore`, see `keys`), so the guard's release, the
//! watchdog's renewal and the undoing of a cancelled attempt all run the
//! semaphore's scripts (`backend/semaphore`) through the same backend steps
//! as a lock's.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::pending::PendingAcquire;
use crate::backend::{KeyKind, LockKey, PermitAttempt};
use crate::lease::guard::LockGuard;
use crate::manager::{busy, non_empty, not_busy, until_lost};
use crate::telemetry::MetricLabel;
use crate::token::OwnerToken;
use crate::{LockError, LockManager, LockOptions, OnLost};

/// Longest pause of a waiter between two attempts, whatever the earliest
/// lease reports (any client may have written a huge score).
const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// Pause of a waiter when the backend did not say when the earliest lease ends.
const UNKNOWN_PAUSE: Duration = Duration::from_millis(10);

tokio::task_local! {
    /// The semaphores whose permit the running `with_permit` bodies hold,
    /// by manager and holder-set name.
    static HELD_PERMITS: Arc<Vec<(LockManager, String)>>;
}

/// A counting semaphore on one key: at most [`permits`](Self::permits)
/// holders at once. Made by [`LockManager::semaphore`]; nothing is sent to
/// the lock server before an acquisition.
///
/// ## Behavior
///
/// - **At most N.** A permit is granted only while fewer than N holders have
///   a lease, counted atomically on the server (one script per step), so
///   holders that all pass the same N are never more than N at once.
/// - **Leases.** Every permit has its own lease (`LockOptions::ttl`), renewed
///   by the watchdog every ttl/3 while the [`Permit`] lives, like a lock's.
///   A permit whose renewal is refused, or not granted before its certain
///   validity ends (the ttl less a 6 % + 2 ms safety margin), is reported
///   lost ([`Permit::is_lost`], [`Permit::lost`]) before the server could
///   grant it to anyone else.
/// - **Crashed holders.** The holders are a set of owner token → lease end,
///   not a counter: every step first drops the holders whose lease ended, so
///   the permit of a holder that crashed (and stopped renewing) comes back
///   one ttl after its last renewal, and never before.
/// - **Waiting.** [`acquire`](Self::acquire) waits up to
///   `LockOptions::wait`: every release publishes on the semaphore's channel
///   and wakes a waiter of each process (Redis pub/sub, as for locks), and a
///   waiter also tries again when the earliest lease would end; it does not
///   poll. There is no arrival order: whichever waiter's attempt reaches the
///   server first after a release gets the permit.
/// - **Changing N.** N is not stored: every acquisition passes its own and
///   counts the current holders against it. Lowering N while permits are
///   held revokes nothing: new acquirers wait until the holders have dropped
///   below the new N. Raising it lets new acquirers in at once. Callers
///   passing different N at the same time each get their own bound, so keep
///   one N per key (or accept that the largest one bounds the holders).
/// - **Not re-entrant.** Each [`acquire`](Self::acquire) takes another
///   permit, also in a task that holds one already. Inside a body run by
///   [`with_permit`](Self::with_permit) (or `#[distributed_lock(permits = N)]`),
///   acquiring a permit of the same semaphore fails at once with
///   `LockError::AlreadyHeld` instead of waiting for a permit the caller may
///   itself be keeping from it. `LockOptions::reentrant` is ignored.
/// - **No fencing tokens.** Permits carry none (N holders at once have no
///   order for storage to enforce); `LockOptions::fenced(true)` is refused
///   with `InvalidOptions`, as are `min_replicas` and `hold_at_least`.
/// - **Backends.** A single Redis server, the primary named by Sentinel, a
///   Redis Cluster (all of a semaphore's state in one slot; releases are
///   published on its sharded channel) and memory. Redlock refuses with
///   `InvalidOptions`. As for locks, an asynchronous failover can lose a
///   permit granted just before it, and then admit one holder too many.
/// - **Cancellation.** Dropping [`acquire`](Self::acquire) at any `.await`
///   leaves no permit behind; dropping a [`Permit`] releases it from a task.
#[derive(Debug, Clone)]
pub struct Semaphore {
    manager: LockManager,
    key: String,
    permits: u32,
}

impl LockManager {
    /// The counting semaphore on `key` with `permits` holders at most; see
    /// [`Semaphore`] for what it guarantees. A semaphore and a lock on the same
    /// key are independent. `permits` of 0 makes every acquisition fail with
    /// `InvalidOptions`.
    ///
    /// ```no_run
    /// # async fn run(locks: leasehold_runtime::LockManager) -> Result<(), leasehold_runtime::LockError> {
    /// use std::time::Duration;
    /// use leasehold_runtime::LockOptions;
    ///
    /// let payments = locks.semaphore("api:payments", 8);
    /// let permit = payments
    ///     .acquire(LockOptions::new().wait(Duration::from_secs(5)))
    ///     .await?;
    /// // at most 8 callers, in every process, are here at once
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, key: &str, permits: u32) -> Semaphore {
        Semaphore {
            manager: self.clone(),
            key: key.to_owned(),
            permits,
        }
    }
}

impl Semaphore {
    /// The manager this semaphore's permits are taken through.
    pub(crate) fn manager(&self) -> &LockManager {
        &self.manager
    }

    /// The key, without namespace.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// N: how many holders this semaphore admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit, waiting up to `options.wait` while all N are held;
    /// woken by a release or when the earliest lease would end, never by
    /// polling.
    ///
    /// Fails with `Busy` when all N are held and `wait` is zero (with the
    /// time left on the earliest lease), `Timeout` when no permit came free
    /// within a non-zero `wait`, `InvalidOptions`
    /// for N = 0, a zero ttl, `fenced`, `min_replicas`, `hold_at_least` or a
    /// Redlock manager, `AlreadyHeld` inside a [`with_permit`](Self::with_permit)
    /// body of this semaphore, and `Connection` when Redis is unreachable.
    /// Cancel-safe: dropped at any `.await`, it leaves no permit behind.
    pub async fn acquire(&self, options: LockOptions) -> Result<Permit, LockError> {
        let wait = options.wait;
        self.acquire_within(&options, wait)
            .await?
            .ok_or_else(|| LockError::Timeout {
                key: self.key.clone(),
                waited: wait,
            })
    }

    /// One attempt, no waiting: `Ok(None)` when all N permits are held.
    /// Errors as [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, options: LockOptions) -> Result<Option<Permit>, LockError> {
        not_busy(self.acquire_within(&options, Duration::ZERO).await)
    }

    /// Runs `body` while holding a permit: acquires first (as
    /// [`acquire`](Self::acquire)), releases after the body's future
    /// completes, and also when it panics or is dropped.
    ///
    /// With `OnLost::Cancel` (the default) the body is dropped at its next
    /// `.await` once the permit's lease is lost and this returns
    /// `LockError::LeaseLost`. Inside `body`, acquiring a permit of this same
    /// semaphore fails at once with `AlreadyHeld`. Cancel-safe: dropping this
    /// future at any `.await` leaves no permit behind.
    pub async fn with_permit<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        let on_lost = options.on_lost;
        let permit = self.acquire(options).await?;
        let held = HELD_PERMITS
            .try_with(|held| held.as_ref().clone())
            .unwrap_or_default();
        let mut held_here = held;
        held_here.push((self.manager.clone(), permit.lease_name().to_owned()));
        // Boxed as `with_lock` boxes its body: nested calls would otherwise
        // grow this future with every level.
        let scoped = Box::pin(HELD_PERMITS.scope(Arc::new(held_here), body));
        let Some(output) = until_lost(scoped, permit.lost(), on_lost).await else {
            drop(permit);
            return Err(LockError::LeaseLost {
                key: self.key.clone(),
            });
        };
        match permit.release().await {
            Err(lost @ LockError::LeaseLost { .. }) if on_lost == OnLost::Cancel => Err(lost),
            _ => Ok(output),
        }
    }

    /// The ttl in ms, once the options and N are known to be usable.
    fn checked_ttl(&self, options: &LockOptions) -> Result<u64, LockError> {
        let refuse = |why: &str| {
            Err(LockError::InvalidOptions(format!(
                "semaphore `{}`: {why}",
                self.key
            )))
        };
        if self.permits == 0 {
            return refuse("permits must be at least 1: a semaphore of 0 permits admits nobody");
        }
        if options.fenced {
            return refuse("permits carry no fencing token; leave `fenced` off");
        }
        if options.min_replicas.is_some() {
            return refuse("`min_replicas` is not supported for permits; leave it off");
        }
        if options.hold_at_least.is_some() {
            return refuse("`hold_at_least` is not supported for permits; leave it off");
        }
        options.ttl_millis()
    }

    /// [`take`](Self::take), counted in the metrics and traced in a
    /// `lock.acquire` span.
    async fn acquire_within(
        &self,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<Option<Permit>, LockError> {
        let label = MetricLabel::new(options, KeyKind::Semaphore);
        let acquisition = self.take(options, wait, &label);
        label.observe(&self.key, wait, acquisition).await
    }

    async fn take(
        &self,
        options: &LockOptions,
        wait: Duration,
        label: &MetricLabel,
    ) -> Result<Option<Permit>, LockError> {
        self.manager.leases().ensure_open()?;
        non_empty(&self.key)?;
        let ttl_ms = self.checked_ttl(options)?;
        let key = self.manager.semaphore_key(&self.key);
        let in_own_body = HELD_PERMITS
            .try_with(|held| {
                held.iter()
                    .any(|(manager, name)| manager.same_as(&self.manager) && *name == key.lock)
            })
            .unwrap_or(false);
        if in_own_body {
            return Err(LockError::AlreadyHeld {
                key: self.key.clone(),
            });
        }
        let token = OwnerToken::issue(self.manager.identity(), ttl_ms, options.label.as_deref());
        let request = Request {
            key: &key,
            token: &token,
            ttl_ms,
            permits: self.permits,
        };
        let started = Instant::now();
        let (attempt, sent) = self.attempt(&request).await?;
        let granted = match attempt {
            PermitAttempt::Acquired { .. } => Some(sent),
            PermitAttempt::Full { retry_in } if wait.is_zero() => {
                tracing::debug!(key = self.key, earliest_lease_ends_in = ?retry_in, "semaphore full");
                return Err(busy(&self.key, retry_in));
            }
            PermitAttempt::Full { retry_in } => {
                tracing::debug!(key = self.key, earliest_lease_ends_in = ?retry_in, "semaphore full; waiting for a permit");
                let _waiting = label.waiting();
                self.wait_for_permit(&request, started, wait).await?
            }
        };
        let Some(sent) = granted else {
            tracing::debug!(key = self.key, "semaphore full");
            return Ok(None);
        };
        tracing::debug!(key = self.key, waited = ?started.elapsed(), "permit acquired");
        let lease = self.manager.start_lease(key, token, options, sent);
        Ok(Some(Permit {
            guard: LockGuard::owner(lease),
        }))
    }

    /// Waits up to `wait` (from `started`) for a permit of the full
    /// semaphore: subscribes to its releases, then tries at once (a release
    /// may have come before the subscription) and again whenever a release
    /// wakes it or the earliest lease would end. Returns the send time of the
    /// granting attempt, or `None` when the wait ran out.
    async fn wait_for_permit(
        &self,
        request: &Request<'_>,
        started: Instant,
        wait: Duration,
    ) -> Result<Option<Instant>, LockError> {
        // A wait too long to represent (e.g. `Duration::MAX`) has no deadline.
        let deadline = started.checked_add(wait);
        let watching = self.manager.backend().watch(request.key);
        let mut ticket = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), watching)
                .await
                .ok(),
            None => Some(watching.await),
        };
        loop {
            let (attempt, sent) = self.attempt(request).await?;
            let retry_in = match attempt {
                PermitAttempt::Acquired { free } => {
                    // A wake-up this waiter holds is passed on to the next
                    // local waiter when the ticket is dropped unused: with
                    // permits still free, that waiter should try too (two
                    // releases close together may have left it one wake-up).
                    if let (Some(ticket), 0) = (ticket.as_mut(), free) {
                        ticket.wake_used();
                    }
                    return Ok(Some(sent));
                }
                PermitAttempt::Full { retry_in } => retry_in,
            };
            if let Some(ticket) = ticket.as_mut() {
                ticket.wake_used();
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                tracing::debug!(key = self.key, waited = ?now - started, "gave up waiting for a permit");
                return Ok(None);
            }
            let pause =
                retry_in.unwrap_or(UNKNOWN_PAUSE).min(LONGEST_PAUSE) + Duration::from_millis(1);
            let retry_at = deadline.map_or(now + pause, |deadline| (now + pause).min(deadline));
            match ticket.as_mut() {
                Some(ticket) => {
                    tokio::select! {
                        _ = ticket.next() => {}
                        () = tokio::time::sleep_until(retry_at.into()) => {}
                    }
                }
                None => tokio::time::sleep_until(retry_at.into()).await,
            }
        }
    }

    /// One attempt, undone if the caller goes away while it is in flight;
    /// returns its outcome and when it was sent.
    async fn attempt(&self, request: &Request<'_>) -> Result<(PermitAttempt, Instant), LockError> {
        let backend = self.manager.backend();
        let pending = PendingAcquire::new(backend, request.key, request.token);
        let sent = Instant::now();
        let attempt = backend
            .try_permit(request.key, request.token, request.ttl_ms, request.permits)
            .await;
        pending.settled();
        Ok((attempt?, sent))
    }
}

/// What every attempt of one acquisition sends.
struct Request<'a> {
    key: &'a LockKey,
    token: &'a OwnerToken,
    ttl_ms: u64,
    permits: u32,
}

/// One held permit of a [`Semaphore`], renewed by the watchdog while it
/// lives.
///
/// Given back exactly once: by [`release`](Self::release), or when the permit
/// is dropped on any other exit path (early return, `?`, panic, the future
/// holding it cancelled), from a task on the current Tokio runtime, as a
/// [`LockGuard`] is. Dropped outside any runtime, the permit comes back when
/// its lease ends.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit {
    guard: LockGuard,
}

impl Permit {
    /// The semaphore's key, without namespace.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// This holder's owner token: 128 random bits, as 32 hex digits; its
    /// member in the semaphore's holder set.
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// Whether the permit's lease has been lost (expired before renewal, or
    /// its member removed). Once `true`, it stays so.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves as soon as the permit is lost, and no later than the end of
    /// its lease's certain validity; pending forever while it is held.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Until when the lease is certainly valid (monotonic clock), `None` once lost.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Gives the permit back now, waking a waiter.
    ///
    /// `Err(LockError::LeaseLost)` means the lease had ended or the member was
    /// removed: the permit was no longer ours, and the work done under it was
    /// not bounded by the semaphore. A connection error means the release did
    /// not arrive; the permit then comes back when its lease ends. Cancel-safe
    /// as [`LockGuard::release`]: dropped before its answer, the release is
    /// sent again from a task.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }

    /// The name of the semaphore's holder set, which identifies it.
    fn lease_name(&self) -> &str {
        &self.guard.lease().key.lock
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.key())
            .field("lost", &self.is_lost())
            .finish()
    }
}
