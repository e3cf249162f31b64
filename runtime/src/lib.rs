//! Runtime of `leasehold`: Redis lock backends, guards, watchdog and lock
//! scopes. Depend on the `leasehold` crate, which re-exports all of this
//! together with the `#[distributed_lock]` attribute.
//!
//! # Map
//!
//! A call flows through these parts, each its own module:
//!
//! 1. **Attribute** (`leasehold-macros`): rewrites an annotated `async fn`
//!    into one call of `__private::locked::<OnBusy, ..>(manager, target, options, body)`.
//! 2. **`LockManager`** (`manager`): `acquire`, `try_acquire` and `with_lock`.
//!    It looks for a re-entry first (`scope`), then makes attempts; a busy lock
//!    joins a **wait queue** (`wait_queue`) and retries when a release wakes it
//!    or the holder's TTL runs out. An attempt in flight whose caller goes away
//!    is undone (`pending`).
//! 3. **Backend** (`backend`): where locks live: one Redis server or a Redis
//!    Cluster (every name of a lock in one hash slot, see `keys`), the
//!    primary Redis Sentinel names (followed across failovers), Redlock over
//!    N masters, or process memory. Each offers try-lock, unlock, renew, fence
//!    and watch; the Redis ones run a plain `SET NX PX` for an uncontended
//!    attempt and one Lua script for every other step (`backend/scripts`), and
//!    publish hand-offs and releases that `backend/notify` turns into wake-ups.
//! 4. **Lease** (`lease`): one granted acquisition: key, owner token (128
//!    random bits and who holds the lock, see `token`), its
//!    fencing token once asked for, and its status (held until an instant, or
//!    lost). Its validity is counted from when the acquisition was sent, less
//!    a safety margin.
//! 5. **Watchdog** (`watchdog`): one timer per manager renews every lease at
//!    ttl/3 and reports a lease lost when renewal is refused or no renewal was
//!    granted before its validity ends.
//! 6. **Guard** (`guard`): the RAII handle of a lease; releases exactly once,
//!    on `release()` or drop.
//! 7. **Lock scope** (`scope`): the body run under a lock and everything it
//!    awaits; it owns the lock for re-entrancy and knows its fencing tokens.
//!
//! Built on these parts: leader election (`leader`), counting semaphores
//! (`semaphore`), whose permits are leases on a set of holders, each renewed
//! by the watchdog and given back by the guard like a lock, read/write
//! locks (`rwlock`, guards in `rw_guard`), whose readers hold leases in a set
//! like permits and whose writer holds a lock's key, and what operators ask
//! of a lock, a semaphore or a read/write lock (`operations`: inspect, list,
//! force release).
//!
//! No password leaves the crate: every URL kept for an error, a `Debug`
//! output or a log line is redacted first (`redact`).

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
pub mod admin;
mod backend;
mod builder;
mod computed;
mod error;
mod install;
mod keys;
mod kinds;
mod lease;
mod manager;
mod options;
mod private;
mod redact;
mod telemetry;
mod token;
mod validity;

#[doc(hidden)]
pub mod __private {
    pub use crate::computed::{permits, refused, Computed};
    pub use crate::private::{locked, KeyPart, OnBusy, Skip, Skipped, Target, Wait};
}

pub use builder::LockManagerBuilder;
pub use error::LockError;
pub use install::{install, installed};
pub use kinds::leader::{Leadership, Term};
pub use kinds::multi::MultiGuard;
pub use kinds::rw_guard::{ReadGuard, WriteGuard};
pub use kinds::rwlock::RwLock;
pub use kinds::semaphore::{Permit, Semaphore};
pub use lease::guard::{HeldLease, LockGuard};
pub use lease::scope::{fencing_token, fencing_token_for, held_locks, lease_lost};
pub use manager::LockManager;
pub use options::{LockOptions, OnLost};
pub use redact::redact_url;
pub use telemetry::describe_metrics;
pub use token::Holder;
