//! Runtime of `distributed-lock`: Redis lock backends, guards, watchdog and lock
//! scopes. Depend on the `distributed-lock` crate, which re-exports all of this
//! together with the `#[distributed_lock]` attribute.

#![warn(missing_docs)]

mod backend;
mod error;
mod guard;
mod install;
mod lease;
mod manager;
mod options;
mod pending;
mod scope;
mod scripts;
mod token;
mod wait_queue;
mod watchdog;

#[doc(hidden)]
pub mod __private {
    pub use crate::private::locked;
}
mod private;

pub use error::LockError;
pub use guard::LockGuard;
pub use install::{install, installed};
pub use manager::{LockManager, LockManagerBuilder};
pub use options::{LockOptions, OnLost};
pub use scope::{fencing_token, fencing_token_for, held_locks, lease_lost};
pub use token::OwnerToken;
