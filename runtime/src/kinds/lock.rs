//! Plain locks: one holder of a key at a time.

use std::future::Future;
use std::time::Duration;

use crate::acquire::{self, not_busy, timeout, Ask};
use crate::lease::body;
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
        let wait = options.wait;
        match acquire::take(self, key, Ask::Lock, &options, wait).await {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(timeout(key, wait)),
            Err(LockError::Busy {
                remaining: None, ..
            }) => Err(acquire::busy(key, self.holder_remaining(key).await)),
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
        not_busy(acquire::take(self, key, Ask::Lock, &options, Duration::ZERO).await)
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
        body::run(guard, on_lost, body).await
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
        body::run(guard, on_lost, body).await.map(Some)
    }
}
