//! Plain locks: one holder of a key at a time.

use std::future::Future;

use crate::acquire;
use crate::kinds::kind::Kind;
use crate::{LockError, LockGuard, LockManager, LockOptions};

impl LockManager {
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
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use leasehold_runtime::{LockError, LockManager, LockOptions};
    /// # async fn example(locks: LockManager) -> Result<(), LockError> {
    /// let options = LockOptions::new().ttl(Duration::from_secs(30)).wait(Duration::from_secs(5));
    /// let guard = locks.acquire("stock:42", options).await?; // Timeout after 5 s of waiting
    /// let token = guard.fencing_token().await?; // for storage that refuses stale holders
    /// guard.release().await?; // or drop it: released in the background
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        acquire::acquire(self, key, Kind::Lock, &options).await
    }

    /// One attempt, no waiting: `Ok(None)` when someone else holds `key`.
    ///
    /// ```no_run
    /// # use leasehold_runtime::{LockError, LockManager, LockOptions};
    /// # async fn example(locks: LockManager) -> Result<(), LockError> {
    /// match locks.try_acquire("report:daily", LockOptions::new()).await? {
    ///     Some(guard) => guard.release().await?, // ours: do the work, then release
    ///     None => println!("another instance has it"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        acquire::try_acquire(self, key, Kind::Lock, &options).await
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
    ///
    /// ```no_run
    /// # use leasehold_runtime::{LockError, LockManager, LockOptions};
    /// # async fn example(locks: LockManager) -> Result<(), LockError> {
    /// let left = locks
    ///     .with_lock("stock:42", LockOptions::new(), async {
    ///         // read, decide, write: no other holder of stock:42 meanwhile
    ///         41
    ///     })
    ///     .await?; // Err(LeaseLost) if the lease was lost and the body dropped
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F: Future>(
        &self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        acquire::with(self, key, Kind::Lock, options, body).await
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
        acquire::try_with(self, key, Kind::Lock, options, body).await
    }
}
