//! Plain locks: one holder of a key at a time.

use std::future::Future;

use crate::acquire::{self, Ask};
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
    pub async fn acquire(&self, key: &str, options: LockOptions) -> Result<LockGuard, LockError> {
        acquire::acquire(self, key, Ask::Lock, &options).await
    }

    /// One attempt, no waiting: `Ok(None)` when someone else holds `key`.
    pub async fn try_acquire(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        acquire::try_acquire(self, key, Ask::Lock, &options).await
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
        acquire::with(self, key, Ask::Lock, options, body).await
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
        acquire::try_with(self, key, Ask::Lock, options, body).await
    }
}
