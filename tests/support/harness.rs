//! Lock managers for the tests: a [`Harness`] of two managers on one backend
//! (one server of Redis 7.0, Valkey 9.1 or Redis 8.6, a Sentinel-managed
//! primary, a Redis Cluster, or memory), and connecting to one server or to
//! Redlock nodes.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::{Engine, RedisServer};

use super::acl::{acl_server, cluster_acl_manager, cluster_acl_user, ACL_PASSWORD};
use super::cluster::{cluster_manager, cluster_namespace, shared_cluster};
use super::options::waiting;
use super::probes::{
    becomes_free, is_held, permit_held, permits_come_back, rw_becomes_free, rw_held,
};
use super::sentinel::{sentinel_manager, sentinel_namespace, shared_sentinel};
use super::wait::{join_within, PROMPTLY};

/// Tasks of [`Harness::locked_increments`].
const INCREMENT_TASKS: usize = 32;
/// Rounds of each task of [`Harness::locked_increments`].
const INCREMENT_ROUNDS: usize = 50;

/// Two lock managers on one backend, as two processes would have.
///
/// For Redis they are two separate connections to a server owned by this
/// test; for Sentinel and Cluster, two managers on a topology shared with
/// concurrent tests, in a key namespace of this test alone; in
/// memory the second is a clone of the first (the only way to share an
/// in-memory lock table).
#[derive(Debug)]
pub struct Harness {
    /// The first manager.
    pub a: LockManager,
    /// The other "process".
    pub b: LockManager,
    server: Option<RedisServer>,
    /// Held so that the shared topology lives as long as this test.
    _shared: Option<Arc<dyn Any + Send + Sync>>,
}

impl Harness {
    /// Starts a fresh `redis-server` for this test alone and connects twice.
    pub async fn redis() -> Harness {
        Harness::on_server(RedisServer::start()).await
    }

    /// As [`redis`](Self::redis), both managers keeping no lock-delay: for
    /// the tests that restart the server empty and take a lock on it at once
    /// (with the delay, managers that knew the server before would wait it
    /// out: see `lock_delay.rs`).
    pub async fn redis_without_lock_delay() -> Harness {
        let server = RedisServer::start();
        let a = connect_without_lock_delay(&server.url()).await;
        let b = connect_without_lock_delay(&server.url()).await;
        Harness {
            a,
            b,
            server: Some(server),
            _shared: None,
        }
    }

    /// As [`redis`](Self::redis), on a fresh server of `engine` (a
    /// `valkey-server` 9.1 or a `redis-server` 8.6 needs its variable, see
    /// [`Engine`]: without it this panics with what to run).
    pub async fn on_engine(engine: Engine) -> Harness {
        Harness::on_server(RedisServer::builder().engine(engine).start()).await
    }

    /// As [`redis`](Self::redis), both managers logged in as a user granted
    /// only the service ACL of the README (see [`acl_server`]).
    pub async fn redis_acl() -> Harness {
        let server = acl_server();
        let a = connect(&server.url_as("svc", ACL_PASSWORD)).await;
        let b = connect(&server.url_as("svc", ACL_PASSWORD)).await;
        Harness {
            a,
            b,
            server: Some(server),
            _shared: None,
        }
    }

    /// As [`cluster`](Self::cluster), both managers logged in as a user of
    /// this test alone granted only the service ACL of its namespace (see
    /// [`cluster_acl_user`]).
    pub async fn cluster_acl() -> Harness {
        let cluster = shared_cluster();
        let user = cluster_acl_user(&cluster);
        let a = cluster_acl_manager(&cluster, &user).await;
        let b = cluster_acl_manager(&cluster, &user).await;
        Harness {
            a,
            b,
            server: None,
            _shared: Some(cluster),
        }
    }

    /// Connects two managers to `server`, which the harness then owns.
    pub async fn on_server(server: RedisServer) -> Harness {
        let a = connect(&server.url()).await;
        let b = connect(&server.url()).await;
        Harness {
            a,
            b,
            server: Some(server),
            _shared: None,
        }
    }

    /// Two managers connected through the Sentinels of the shared topology
    /// (see [`shared_sentinel`]), with keys in a namespace of their own.
    pub async fn sentinel() -> Harness {
        let topology = shared_sentinel();
        let namespace = sentinel_namespace();
        let a = sentinel_manager(&topology, &namespace).await;
        let b = sentinel_manager(&topology, &namespace).await;
        Harness {
            a,
            b,
            server: None,
            _shared: Some(topology),
        }
    }

    /// Two managers connected to the shared cluster (see
    /// [`shared_cluster`]), with keys in a namespace of their own.
    pub async fn cluster() -> Harness {
        let cluster = shared_cluster();
        let namespace = cluster_namespace();
        let a = cluster_manager(&cluster, &namespace).await;
        let b = cluster_manager(&cluster, &namespace).await;
        Harness {
            a,
            b,
            server: None,
            _shared: Some(cluster),
        }
    }

    /// An in-memory manager and a clone of it.
    pub fn memory() -> Harness {
        let a = LockManager::in_memory();
        Harness {
            b: a.clone(),
            a,
            server: None,
            _shared: None,
        }
    }

    /// The Redis (or Valkey) server of this test; panics for the harnesses
    /// without one of their own.
    pub fn server(&self) -> &RedisServer {
        self.server
            .as_ref()
            .expect("this test needs the Redis harness")
    }

    /// The Redis server of this test, mutably (to kill or restart it).
    pub fn server_mut(&mut self) -> &mut RedisServer {
        self.server
            .as_mut()
            .expect("this test needs the Redis harness")
    }

    /// Manager `a` for even `i`, `b` for odd: spreads numbered tasks over
    /// both "processes".
    pub fn alternate(&self, i: usize) -> &LockManager {
        if i.is_multiple_of(2) {
            &self.a
        } else {
            &self.b
        }
    }

    /// Runs `increment` 1600 times, each time under the lock `counter`: 32
    /// tasks, spread over both managers, of 50 rounds that each wait up to
    /// 30 s for the lock and release it after `increment`. Fails the test
    /// unless all are done within 60 s. Returns how many increments ran.
    ///
    /// `increment` should read, yield and write back: not atomic, so that
    /// only the lock keeps the count right.
    pub async fn locked_increments<F, Fut>(&self, increment: F) -> usize
    where
        F: Fn() -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let tasks = (0..INCREMENT_TASKS)
            .map(|task| {
                let (manager, increment) = (self.alternate(task).clone(), increment.clone());
                tokio::spawn(async move {
                    for _ in 0..INCREMENT_ROUNDS {
                        let guard = manager
                            .acquire("counter", waiting(Duration::from_secs(30)))
                            .await
                            .expect("lock within 30 s");
                        increment().await;
                        guard.release().await.expect("still our lock");
                    }
                })
            })
            .collect();
        join_within(tasks, Duration::from_secs(60), "1600 locked increments").await;
        INCREMENT_TASKS * INCREMENT_ROUNDS
    }

    /// Whether someone holds `key`, as seen by one attempt of manager `b`
    /// from outside every lock scope of the test; see [`is_held`].
    pub async fn held_elsewhere(&self, key: &str) -> bool {
        is_held(&self.b, key).await
    }

    /// Asserts that `key` becomes free within [`PROMPTLY`]; with locks taken
    /// with [`LONG_TTL`](super::LONG_TTL), that proves a release (not
    /// expiry) freed it.
    pub async fn assert_freed_promptly(&self, key: &str) {
        assert!(
            becomes_free(&self.b, key).await,
            "lock `{key}` still held {PROMPTLY:?} after its holder went away; only its 30 s TTL would free it now",
        );
    }

    /// Whether some permit of the semaphore `key` is held, as seen by one
    /// attempt of manager `b` from outside every `with_permit` body; see
    /// [`permit_held`].
    pub async fn permit_held_elsewhere(&self, key: &str) -> bool {
        permit_held(&self.b, key).await
    }

    /// Asserts that every permit of the semaphore `key` is back within
    /// [`PROMPTLY`]; with permits taken with [`LONG_TTL`](super::LONG_TTL),
    /// that proves releases (not expiry) gave them back.
    pub async fn assert_permits_back_promptly(&self, key: &str) {
        assert!(
            permits_come_back(&self.b, key).await,
            "a permit of `{key}` still held {PROMPTLY:?} after its holder went away; only its 30 s TTL would free it now",
        );
    }

    /// Whether a reader or a writer holds the read/write lock `key`, as seen
    /// by one write attempt of manager `b` from outside every lock scope;
    /// see [`rw_held`].
    pub async fn rw_held_elsewhere(&self, key: &str) -> bool {
        rw_held(&self.b, key).await
    }

    /// Asserts that the read/write lock `key` is free for a writer within
    /// [`PROMPTLY`]; with leases taken with [`LONG_TTL`](super::LONG_TTL),
    /// that proves releases (not expiry) freed it.
    pub async fn assert_rw_freed_promptly(&self, key: &str) {
        assert!(
            rw_becomes_free(&self.b, key).await,
            "read/write lock `{key}` still held {PROMPTLY:?} after its holders went away; only their 30 s TTL would free it now",
        );
    }
}

/// Connects a manager with default settings, panicking with the cause on failure.
pub async fn connect(url: &str) -> LockManager {
    LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {url}: {err}"))
}

/// A manager on the server at `url` that keeps no lock-delay
/// (`risk_two_holders_after_failover`): for the tests of what the
/// uncontended path sends, and of what fencing tokens or following a
/// failover do on their own.
pub async fn connect_without_lock_delay(url: &str) -> LockManager {
    LockManager::builder()
        .risk_two_holders_after_failover()
        .connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {url}: {err}"))
}

/// The URLs of `nodes`, in order.
pub fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

/// A Redlock manager over `nodes`, with 500 ms connect and response timeouts
/// so that dead nodes cost little.
pub async fn redlock(nodes: &[RedisServer]) -> LockManager {
    LockManager::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .redlock(urls(nodes))
        .await
        .unwrap_or_else(|err| panic!("cannot connect to the Redlock nodes: {err}"))
}
