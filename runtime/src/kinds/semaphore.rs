//! Counting semaphores: at most N holders of one key at once, each holding a
//! [`Permit`] with its own lease, renewed by the watchdog like a lock's.
//!
//! A permit is a [`Lease`](crate::lease::Lease) on the semaphore's holder
//! set (a key of kind `Semaphore`, see `keys`), so the guard's release, the
//! watchdog's renewal and the undoing of a cancelled attempt all run the
//! semaphore's scripts (`backend/semaphore`) through the same backend steps
//! as a lock's.

use std::future::Future;

use crate::acquire;
use crate::kinds::kind::Kind;
use crate::lease::guard::{derefs_to_held_lease, HeldLease, LockGuard};
use crate::{LockError, LockManager, LockOptions};

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
///   lost ([`HeldLease::is_lost`], [`HeldLease::lost`]) before the server could
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
        let guard = acquire::acquire(&self.manager, &self.key, self.kind(), &options).await?;
        Ok(Permit::new(guard))
    }

    /// One attempt, no waiting: `Ok(None)` when all N permits are held.
    /// Errors as [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, options: LockOptions) -> Result<Option<Permit>, LockError> {
        let guard = acquire::try_acquire(&self.manager, &self.key, self.kind(), &options).await?;
        Ok(guard.map(Permit::new))
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
        acquire::with(&self.manager, &self.key, self.kind(), options, body).await
    }

    /// As [`with_permit`](Self::with_permit), with one attempt: when all N
    /// permits are held, returns `Ok(None)` at once without running `body`
    /// (logged at info), whatever `wait` says.
    pub async fn try_with_permit<F: Future>(
        &self,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError> {
        acquire::try_with(&self.manager, &self.key, self.kind(), options, body).await
    }

    /// The kind of its leases: permits of a semaphore of its permits.
    pub(crate) fn kind(&self) -> Kind {
        Kind::Semaphore {
            permits: self.permits,
        }
    }
}

/// One held permit of a [`Semaphore`], renewed by the watchdog while it
/// lives. What it shows of its lease is [`HeldLease`]'s, to which it
/// dereferences (its token is its member in the semaphore's holder set).
///
/// Given back exactly once: by [`release`](Self::release), or when the permit
/// is dropped on any other exit path (early return, `?`, panic, the future
/// holding it cancelled), as every [`HeldLease`] is.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit {
    held: HeldLease,
}

impl Permit {
    fn new(guard: LockGuard) -> Self {
        Permit {
            held: guard.into_held(),
        }
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
        self.held.release().await
    }
}

derefs_to_held_lease!(Permit);

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.held.debug_as("Permit", f)
    }
}
