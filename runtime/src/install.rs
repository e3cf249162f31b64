//! The process-wide default manager used by `#[distributed_lock]`.

use std::sync::{PoisonError, RwLock};

use crate::LockManager;

static DEFAULT: RwLock<Option<LockManager>> = RwLock::new(None);

/// Makes `manager` the default for `#[distributed_lock]` functions that name no
/// `client`. Call it once at start-up; a later call replaces the default for
/// calls that start afterwards and returns the previous one.
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
