//! The process-wide default manager used by `#[distributed_lock]`.

use std::sync::{PoisonError, RwLock};

use crate::LockManager;

static DEFAULT: RwLock<Option<LockManager>> = RwLock::new(None);

/// Makes `manager` the default for `#[distributed_lock]` functions that name no
/// `manager`. Call it once at start-up; a later call replaces the default for
/// calls that start afterwards and returns the previous one.
///
/// One per process: the default is a global, shared by every thread and
/// runtime. It is therefore not for tests that run in parallel in one
/// binary, which would replace each other's manager: give each its own
/// through the attribute's `manager = ...` instead.
///
/// At the end, call [`LockManager::shutdown`] on it (or any clone): a guard
/// dropped as `main` or a `#[tokio::test]` returns cannot send its release
/// once the runtime ends, and its lock would stay until its TTL.
pub fn install(manager: LockManager) -> Option<LockManager> {
    DEFAULT
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(manager)
}

/// The installed default manager, if any.
pub fn installed() -> Option<LockManager> {
    DEFAULT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}
