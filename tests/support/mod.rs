//! Helpers of the integration tests, one file per concern. The suite
//! (`tests/suite/main.rs`), `metrics.rs` and `secrets.rs` include them
//! with `mod support;` and import from the re-exports below.
//!
//! | module | for |
//! | --- | --- |
//! | [`acl`] | the least-privilege ACL of a service; servers, cluster users and managers under it |
//! | [`harness`] | a [`Harness`] of two managers on one backend; connecting to a server or to Redlock nodes |
//! | [`conformance`] | the `conformance!` macro: one behaviour instantiated on every backend; `on_every_engine!`: on Redis 7.0, Valkey 9.1 and Redis 8.6; `tests_on!`: one module of them |
//! | [`every_kind`] | a holder and a waiter of every kind, for failover tests |
//! | [`occupancy`] | who was inside a semaphore or read/write lock at once |
//! | [`options`] | the lock options tests use again and again |
//! | [`wait`] | bounded waits: polling, joining tasks, bounding a step |
//! | [`probes`] | whether a lock is held, seen from outside every lock scope |
//! | [`sentinel`] | a Sentinel topology shared by concurrent tests; managers connected through it |
//! | [`cluster`] | a Redis Cluster shared by concurrent tests; managers connected to it |
//! | [`server_state`] | what a `redis-server` holds: lock keys, fencing counters, subscribers |
//! | [`shim`] | the items a stand-in for the crate provides for the attribute's expansion |
//! | [`assertions`] | lost leases, owner tokens, validity |
//! | [`restart`] | taking a lock again after a server restart |
//! | [`fencing`] | a store that rejects stale fencing tokens |
//! | [`cancel`] | cancelling a future at each of its `.await` points |
//! | `sql` (feature `sqlite` or `postgres`) | the error type and increment race of the `#[transactional]` tests |

// `metrics.rs` and `secrets.rs` compile their own copy of this module and
// use only part of it: without these, it would warn about the helpers (`dead_code`,
// `unused_macros`) and the
// re-exports below (`unused_imports`) that only the suite uses. A helper no
// test uses at all is not caught by them: `grep` under tests/.
#![allow(dead_code, unused_imports, unused_macros)]

pub mod acl;
pub mod assertions;
pub mod cancel;
pub mod cluster;
pub mod conformance;
pub mod every_kind;
pub mod faults;
pub mod fencing;
pub mod harness;
pub mod occupancy;
pub mod options;
pub mod probes;
pub mod restart;
pub mod sentinel;
pub mod server_state;
pub mod shim;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod sql;
pub mod wait;

pub use acl::*;
pub use assertions::*;
pub use cancel::*;
pub use cluster::*;
pub(crate) use conformance::{conformance, on_every_engine, tests_on};
pub use every_kind::*;
pub use faults::*;
pub use fencing::*;
pub use harness::*;
pub use occupancy::*;
pub use options::*;
pub use probes::*;
pub use restart::*;
pub use sentinel::*;
pub use server_state::*;
pub(crate) use shim::shim_private_items;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql::*;
pub use wait::*;
