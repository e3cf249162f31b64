//! The RAII guards of a read/write lock's leases: [`ReadGuard`] and
//! [`WriteGuard`], each a [`HeldLease`] underneath, so they release exactly
//! once, on `release()` or drop, as a lock's guard does.

use crate::lease::guard::{derefs_to_held_lease, HeldLease};
use crate::LockError;

/// Proof that a read lease on [`key`](HeldLease::key) is held: no writer
/// holds the lock while it lives, unless [`is_lost`](HeldLease::is_lost).
/// What it shows of its lease is [`HeldLease`]'s, to which it dereferences
/// (its token is this reader's member in the lock's readers, or the
/// enclosing writer's when it re-entered a write lease).
///
/// Released exactly once: by [`release`](Self::release), or when dropped on
/// any other exit path, as every [`HeldLease`] is. A guard that re-entered a
/// lease its scope holds (a read inside a read or a write) releases nothing.
#[must_use = "the read lease is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct ReadGuard {
    held: HeldLease,
}

/// Proof that the write lease on [`key`](HeldLease::key) is held: no reader
/// and no other writer hold the lock while it lives, unless
/// [`is_lost`](HeldLease::is_lost). Dereferences to its [`HeldLease`].
///
/// Released as a [`ReadGuard`] is; a guard that re-entered its scope's
/// write lease releases nothing.
#[must_use = "the write lease is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct WriteGuard {
    held: HeldLease,
}

impl ReadGuard {
    pub(crate) fn new(held: HeldLease) -> Self {
        ReadGuard { held }
    }

    /// Gives the read lease back now, waking a waiting writer.
    /// `Err(LockError::LeaseLost)` means it had ended or was removed: what
    /// was read under it may have been written meanwhile. Cancel-safe as
    /// [`LockGuard::release`](crate::LockGuard::release).
    pub async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }
}

impl WriteGuard {
    pub(crate) fn new(held: HeldLease) -> Self {
        WriteGuard { held }
    }

    /// The fencing token: strictly greater than that of every earlier writer
    /// of this key that asked for one. Issued and kept as
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) issues
    /// it, with the same errors.
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        self.held.fencing_token().await
    }

    /// Gives the write lease back now, waking every waiting reader and a
    /// waiting writer. Errors as [`LockGuard::release`](crate::LockGuard::release).
    pub async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }
}

derefs_to_held_lease!(ReadGuard, WriteGuard);
