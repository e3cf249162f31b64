//! The RAII guards of a read/write lock's leases: [`ReadGuard`] and
//! [`WriteGuard`], each a [`LockGuard`] underneath, so they release exactly
//! once, on `release()` or drop, as a lock's guard does.

use std::time::Instant;

use crate::lease::guard::LockGuard;
use crate::LockError;

/// Proof that a read lease on [`key`](Self::key) is held: no writer holds
/// the lock while it lives, unless [`is_lost`](Self::is_lost).
///
/// Released exactly once: by [`release`](Self::release), or when dropped on
/// any other exit path (early return, `?`, panic, a cancelled future), from
/// a task on the current Tokio runtime, as a [`LockGuard`] is. Dropped
/// outside any runtime, the lease ends with its TTL. A guard that re-entered
/// a lease its scope holds (a read inside a read or a write) releases
/// nothing.
#[must_use = "the read lease is released as soon as the guard is dropped"]
pub struct ReadGuard {
    guard: LockGuard,
}

/// Proof that the write lease on [`key`](Self::key) is held: no reader and
/// no other writer hold the lock while it lives, unless
/// [`is_lost`](Self::is_lost).
///
/// Released as a [`ReadGuard`] is; a guard that re-entered its scope's
/// write lease releases nothing.
#[must_use = "the write lease is released as soon as the guard is dropped"]
pub struct WriteGuard {
    guard: LockGuard,
}

impl ReadGuard {
    pub(crate) fn new(guard: LockGuard) -> Self {
        ReadGuard { guard }
    }

    pub(crate) fn into_inner(self) -> LockGuard {
        self.guard
    }

    /// The key as given to `acquire_read`, without namespace.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// This reader's owner token (its member in the lock's readers), or the
    /// enclosing writer's when this guard re-entered a write lease.
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// Whether this guard re-entered a lease its scope already held.
    pub fn is_reentered(&self) -> bool {
        self.guard.is_reentered()
    }

    /// Whether the lease has been lost (expired before renewal, or its
    /// member removed). Once `true`, it stays so.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves as soon as the lease is lost, and no later than the end of
    /// its certain validity; pending forever while it is held.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Until when the lease is certainly valid (monotonic clock), `None` once lost.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Gives the read lease back now, waking a waiting writer.
    /// `Err(LockError::LeaseLost)` means it had ended or was removed: what
    /// was read under it may have been written meanwhile. Cancel-safe as
    /// [`LockGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

impl WriteGuard {
    pub(crate) fn new(guard: LockGuard) -> Self {
        WriteGuard { guard }
    }

    pub(crate) fn into_inner(self) -> LockGuard {
        self.guard
    }

    /// The key as given to `acquire_write`, without namespace.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// This writer's owner token, as stored in the lock's writer key.
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// The fencing token: strictly greater than that of every earlier writer
    /// of this key that asked for one. Issued and kept as
    /// [`LockGuard::fencing_token`] issues it, with the same errors.
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        self.guard.fencing_token().await
    }

    /// Whether this guard re-entered a write lease its scope already held.
    pub fn is_reentered(&self) -> bool {
        self.guard.is_reentered()
    }

    /// Whether the lease has been lost (expired before renewal, or taken
    /// over). Once `true`, it stays so.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves as soon as the lease is lost, and no later than the end of
    /// its certain validity; pending forever while it is held.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Until when the lease is certainly valid (monotonic clock), `None` once lost.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// Gives the write lease back now, waking every waiting reader and a
    /// waiting writer. Errors as [`LockGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

impl std::fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGuard")
            .field("key", &self.key())
            .field("reentered", &self.is_reentered())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl std::fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteGuard")
            .field("key", &self.key())
            .field("reentered", &self.is_reentered())
            .field("lost", &self.is_lost())
            .finish()
    }
}
