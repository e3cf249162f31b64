//! Helpers of the integration tests, one file per concern: a crate of its
//! own (`leasehold-test-support`, never published), built once for the
//! suite (`tests/suite/main.rs`), `metrics.rs` and `secrets.rs`, which name
//! it `support` and import from the re-exports below.
//!
//! | module | for |
//! | --- | --- |
//! | [`acl`] | the least-privilege ACL of a service; servers, cluster users and managers under it |
//! | [`harness`] | a [`Harness`] of two managers on one backend; connecting to a server or to Redlock nodes |
//! | [`mod@conformance`] | the `conformance!` macro: one behaviour instantiated on every backend; `on_every_engine!`: on Redis 7.0, Valkey 9.1 and Redis 8.6; `tests_on!`: one module of them |
//! | [`every_kind`] | a holder and a waiter of every kind, for failover tests |
//! | [`failover`] | a holder that keeps or loses its lease across a failover, and its waiter |
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
//!
//! The `#[transactional]` tests' error type and increment race live in the
//! suite (`tests/suite/sql.rs`), the one place that builds with a database.

pub mod acl;
pub mod assertions;
pub mod cancel;
pub mod cluster;
pub mod conformance;
pub mod every_kind;
pub mod failover;
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
pub mod wait;

pub use acl::*;
pub use assertions::*;
pub use cancel::*;
pub use cluster::*;
pub use every_kind::*;
pub use failover::*;
pub use faults::*;
pub use fencing::*;
pub use harness::*;
pub use occupancy::*;
pub use options::*;
pub use probes::*;
pub use restart::*;
pub use sentinel::*;
pub use server_state::*;
pub use wait::*;
