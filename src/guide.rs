//! The guide: how to use leasehold, chapter by chapter, published with the
//! API docs. Every Rust snippet in it is compiled as a doctest.
//!
//! | I need … | chapter |
//! | --- | --- |
//! | to connect, check the deployment at start-up, take a lock from code | [`start`] |
//! | a per-order (per-entity) lock on an `async fn` | [`attribute`] |
//! | several keys at once, without deadlock | [`several_keys`] |
//! | a job that runs once per fleet | [`jobs`] |
//! | a leader | [`leader`] |
//! | a limit on concurrent calls | [`semaphores`] |
//! | readers that share and writers that exclude | [`rwlock`] |
//! | a database transaction inside the lock | [`transactions`] |
//! | a lock per HTTP route or gRPC method | [`web`] |
//! | to pick Sentinel, Cluster, Redlock or Valkey | [`deployments`] |
//! | to know what happens under each fault | [`fault_model`] |
//! | storage that refuses a stale holder (fencing tokens, with the SQL) | [`fencing`] |
//! | to run it: `dlock`, metrics, tracing, least privilege, the key layout | [`operating`] |
//! | figures | [`performance`] |

#[doc = include_str!("guide/start.md")]
pub mod start {}

#[doc = include_str!("guide/attribute.md")]
pub mod attribute {}

#[doc = include_str!("guide/several_keys.md")]
pub mod several_keys {}

#[doc = include_str!("guide/jobs.md")]
pub mod jobs {}

#[doc = include_str!("guide/leader.md")]
pub mod leader {}

#[doc = include_str!("guide/semaphores.md")]
pub mod semaphores {}

#[doc = include_str!("guide/rwlock.md")]
pub mod rwlock {}

#[doc = include_str!("guide/transactions.md")]
pub mod transactions {}

#[doc = include_str!("guide/web.md")]
pub mod web {}

#[doc = include_str!("guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("guide/fault_model.md")]
pub mod fault_model {}

#[doc = include_str!("guide/fencing.md")]
pub mod fencing {}

#[doc = include_str!("guide/operating.md")]
pub mod operating {}

#[doc = include_str!("guide/performance.md")]
pub mod performance {}
