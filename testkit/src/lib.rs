//! Test harness for `leasehold`: starts and stops real `redis-server`
//! processes on free `127.0.0.1` ports, and talks to them with a tiny blocking
//! RESP2 client.
//!
//! Servers run without persistence (`--save "" --appendonly no`), accept
//! `DEBUG` from loopback clients (`--enable-debug-command local`), feed new
//! replicas without delay (`--repl-diskless-sync-delay 0`), and are killed
//! when dropped, also when a test panics. The binary is `redis-server` from
//! `PATH`, or the path in the `REDIS_SERVER_BIN` environment variable. A
//! server started with [`Engine::Valkey`] is a `valkey-server` 9.1 from the
//! path in `LEASEHOLD_VALKEY_SERVER` (`scripts/ensure-valkey` builds it and
//! prints its path), one started with [`Engine::Redis8`] a `redis-server`
//! 8.6 from the path in `LEASEHOLD_REDIS8_SERVER` (`scripts/ensure-redis8`),
//! with the same options.
//!
//! A [`PostgresServer`] is a real PostgreSQL server of the same kind, for
//! the `#[transactional]` tests: `initdb` into a temporary directory,
//! `pg_ctl` on a free loopback port, stopped on drop.
//!
//! A [`FaultProxy`] in front of a server injects network faults for the
//! connections made through it: cut, silent partition (blackhole) and delay.
//! A [`TempDir`] is a scratch directory deleted on drop. A server or a
//! cluster can have a least-privilege ACL user besides the default one
//! ([`RedisServerBuilder::acl_user`], [`RedisCluster::set_acl_user`]).
//!
//! Whole topologies start the same way: a [`RedisCluster`] (by default 3
//! primaries with a replica each, formed and checked healthy) and a
//! [`RedisSentinel`] (a primary, 2 replicas, 3 Sentinels), each with methods
//! that kill or fail over a primary and return once the topology agrees on
//! the new one.
//!
//! ```
//! use leasehold_testkit::{RedisServer, RespValue};
//!
//! let mut server = RedisServer::start();
//! server.command(&["SET", "k", "v"]).unwrap();
//! assert_eq!(server.command(&["GET", "k"]).unwrap().as_str(), Some("v"));
//! server.restart_empty();
//! assert_eq!(server.command(&["GET", "k"]).unwrap(), RespValue::Nil);
//! ```

#![warn(missing_docs)]

mod acl;
mod cluster;
mod engine;
mod ports;
mod postgres;
mod process;
mod proxy;
mod resp;
mod sentinel;
mod server;
mod tempdir;
mod topology;

use std::time::Duration;

pub use cluster::{key_slot, RedisCluster, RedisClusterBuilder, CLUSTER_SLOTS};
pub use engine::{Engine, REDIS8_BIN_ENV, VALKEY_BIN_ENV};
pub use postgres::{PostgresServer, POSTGRES_BIN_ENV};
pub use proxy::FaultProxy;
pub use resp::RespValue;
pub use sentinel::RedisSentinel;
pub use server::{RedisServer, RedisServerBuilder};
pub use tempdir::TempDir;

/// A free loopback port, reserved among this process's servers until dropped,
/// for a second listener of one server (e.g. `--tls-port`): the server's own
/// port stays plain, so [`RedisServerBuilder::start`] can still wait for `PING`
/// on it.
#[must_use = "the port is free for other servers again once dropped"]
#[derive(Debug)]
pub struct ExtraPort(ports::PortReservation);

impl ExtraPort {
    /// Reserves a port that the OS reports free and no server of this process
    /// holds. Panics if none is found.
    #[track_caller]
    pub fn reserve() -> ExtraPort {
        match ports::PortReservation::free() {
            Ok(reservation) => ExtraPort(reservation),
            Err(err) => panic!("cannot reserve a loopback port: {err:?}"),
        }
    }

    /// The reserved port.
    pub fn port(&self) -> u16 {
        self.0.port()
    }
}

/// Evaluates `condition` every 10 ms until it returns true, for at most
/// `timeout` (and a matching bounded number of calls). Returns whether it
/// became true, e.g. for waiting on asynchronous replication.
pub fn poll_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    process::poll(timeout, || condition().then_some(())).is_some()
}
