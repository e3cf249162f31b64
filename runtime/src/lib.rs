//! Runtime of `leasehold`: Redis lock backends, guards, watchdog and lock
//! scopes. Depend on the `leasehold` crate, which re-exports all of this
//! together with the `#[distributed_lock]` attribute.
//!
//! # Map
//!
//! The modules are layered, from the foundation to the façade. The backend
//! depends on the foundation only; a lease keeps what the leases of its
//! manager share (`lease::Leasing`: backend, renewal timer, the record
//! `shutdown` releases from, runtime), never the façade.
//!
//! - **Foundation**: `error`, `options` (and `settings`, how a file writes
//!   them, with `duration`'s parser), `keys` (every Redis name of a lock,
//!   and why none collide), `token` (owner tokens and who holds them),
//!   `validity` (how long a lease is certainly ours), `redact`, `telemetry`.
//! - **`backend/`**: where locks live: one Redis server or a Redis Cluster
//!   (`backend/redis`: transport, commands, the Lua in a folder per kind,
//!   notifications; every name of a lock in one hash slot on a cluster),
//!   the primary Redis Sentinel names (followed across failovers,
//!   `backend/sentinel`), Redlock over N masters, or process memory
//!   (`backend/memory`). Each offers the same kind-neutral steps (take,
//!   release, renew, fence, inspect, force, watch), dispatched in one
//!   place; each maps a kind to its scripts or its model in one file
//!   (`redis/kinds.rs`, `memory/kinds.rs`). The Redis ones run one Lua
//!   script a step (a plain `SET NX PX` for an uncontended attempt when no
//!   lock-delay is kept, and the granting scripts under `redis/session`s
//!   that spare their check `INFO`), and publish hand-offs and releases
//!   that `redis/notify` turns into wake-ups of local wait queues
//!   (`backend/wait_queue`).
//! - **`lease/`**: one granted acquisition (key, owner token, fencing token
//!   once asked for, held-until or lost), and how it starts
//!   (`Lease::start`); the `registry` of a manager's leases and the
//!   `shutdown` that releases them; the `watchdog`, one timer per
//!   manager, renewing every lease at ttl/3 and reporting it lost when
//!   renewal is refused or late; the `guard` core every guard holds
//!   (`HeldLease`, released exactly once, on `release()` or drop); the lock
//!   `scope` (the body under a lock, which owns it for re-entrancy); the
//!   `seats` that let one task of a manager hold a key at a time, whatever
//!   a server that lost a grant answers; and the `body` runner behind every
//!   `with_*` call.
//! - **`acquire/`**: the one attempt→wait→retry engine of every kind: a
//!   re-entry first, then attempts; a busy key is watched for releases,
//!   retried when one wakes it, the blocking lease would end or its place on
//!   the server needs refreshing; an attempt in flight whose caller goes away
//!   is undone (`acquire/pending`).
//! - **`kinds/`**: what each kind of lease is, described once (`kind`: its
//!   names' roles, how it waits, how its lease is held; `rules`: the
//!   options it takes, how it shares its key and re-enters), which the
//!   engine and the backends read instead of asking which kind they run;
//!   and the API and guards of each: `lock`, several keys (`multi`),
//!   read/write locks (`rwlock`, guards in `rw_guard`), semaphores, leader
//!   election, jobs once per `period`.
//! - **`manager`**: the façade users hold; `builder` and `install` make it.
//! - **`check`**: the start-up and readiness report of
//!   `LockManager::check` (each node asked by `backend/redis/probe`, and the
//!   risks its settings carry).
//! - **`admin`**: what operators ask (inspect, list, force release) and the
//!   answers' types.
//! - **`private`**: the one entry point the attribute's expansion calls,
//!   `__private::locked::<OnBusy, ..>(manager, target, options, body)`.
//!
//! No password leaves the crate: every URL kept for an error, a `Debug`
//! output or a log line is redacted first (`redact`).

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
pub mod admin;
mod backend;
mod builder;
mod check;
mod computed;
mod duration;
mod error;
mod hashing;
mod install;
mod keys;
mod kinds;
mod lease;
mod manager;
mod options;
mod private;
mod redact;
#[cfg(feature = "serde")]
mod settings;
mod slots;
mod telemetry;
mod token;
mod validity;

#[doc(hidden)]
pub mod __private {
    pub use crate::computed::{permits, refused, Computed};
    pub use crate::private::{locked, rendered, KeyPart, OnBusy, Skip, Skipped, Target, Wait};
}

pub use builder::LockManagerBuilder;
pub use check::{CheckReport, LockDelayState, NodeReport, NodeRole, Risk, Verdict};
pub use duration::{parse_duration, DurationError, ACCEPTED_DURATIONS};
pub use error::{Cause, LockError};
pub use install::{install, installed};
pub use kinds::leader::{LeaderWatch, Leadership, Term};
pub use kinds::multi::MultiGuard;
pub use kinds::rw_guard::{ReadGuard, WriteGuard};
pub use kinds::rwlock::RwLock;
pub use kinds::semaphore::{Permit, Semaphore};
pub use lease::guard::{HeldLease, LockGuard};
pub use lease::scope::{fencing_token, fencing_token_for, held_locks, lease_lost};
pub use manager::LockManager;
pub use options::{LockOptions, OnLost};
pub use redact::redact_url;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::{LeaderSettings, SemaphoreSettings};
pub use telemetry::describe_metrics;
pub use token::Holder;
