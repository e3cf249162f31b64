//! Shared helpers of the behaviour tests: a [`Harness`] of two lock managers on
//! one backend, probes that look at a lock from outside every lock scope, and
//! bounded waits.
//!
//! Included with `mod support;` by several test binaries, each of which uses a
//! different part of it.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use distributed_lock::{LockError, LockManager, LockOptions};
use distributed_lock_testkit::RedisServer;

/// A TTL so long that it cannot run out during a test: when a lock held with it
/// becomes free, a release freed it, not expiry.
pub const LONG_TTL: Duration = Duration::from_secs(30);

/// How soon a lock must be free after its holder went away.
pub const PROMPTLY: Duration = Duration::from_secs(2);

/// Pause between two looks at a lock in the bounded polling loops.
const POLL: Duration = Duration::from_millis(10);

/// Options with [`LONG_TTL`] and no waiting.
pub fn long() -> LockOptions {
    LockOptions::new().ttl(LONG_TTL)
}

/// Options with [`LONG_TTL`] that wait up to `wait` for a busy lock.
pub fn waiting(wait: Duration) -> LockOptions {
    long().wait(wait)
}

/// Options of a lease of `ttl` that is never renewed.
pub fn fixed_lease(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl).renew(false)
}

/// Two lock managers on one backend, as two processes would have.
///
/// For Redis they are two separate connections to a server owned by this
/// test; in memory the second is a clone of the first (the only way to share
/// an in-memory lock table).
pub struct Harness {
    /// The first manager.
    pub a: LockManager,
    /// The other "process".
    pub b: LockManager,
    server: Option<RedisServer>,
}

impl Harness {
    /// Starts a fresh `redis-server` for this test alone and connects twice.
    pub async fn redis() -> Harness {
        Harness::on_server(RedisServer::start()).await
    }

    /// Connects two managers to `server`, which the harness then owns.
    pub async fn on_server(server: RedisServer) -> Harness {
        let a = connect(&server.url()).await;
        let b = connect(&server.url()).await;
        Harness {
            a,
            b,
            server: Some(server),
        }
    }

    /// An in-memory manager and a clone of it.
    pub fn memory() -> Harness {
        let a = LockManager::in_memory();
        Harness {
            b: a.clone(),
            a,
            server: None,
        }
    }

    /// The Redis server of this test; panics for the in-memory harness.
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

    /// Whether someone holds `key`, as seen by one attempt of manager `b` from
    /// a freshly spawned task, i.e. from outside every lock scope of the test
    /// (so it never re-enters). If the attempt gets the lock it gives it back
    /// before returning.
    pub async fn held_elsewhere(&self, key: &str) -> bool {
        try_from_outside(&self.b, key).await
    }

    /// Asserts that `key` becomes free within [`PROMPTLY`], polling with
    /// bounded attempts; with locks taken with [`LONG_TTL`], that proves a
    /// release (not expiry) freed it.
    pub async fn assert_freed_promptly(&self, key: &str) {
        let started = Instant::now();
        let freed = poll_async(PROMPTLY, || async { !self.held_elsewhere(key).await }).await;
        assert!(
            freed,
            "lock `{key}` still held {:?} after its holder went away; only its 30 s TTL would free it now",
            started.elapsed()
        );
    }
}

/// One `try_acquire` of `key` by `manager` from a new task (outside every lock
/// scope). Returns `true` when the lock was busy; a lock it got is released
/// again before this returns.
pub async fn try_from_outside(manager: &LockManager, key: &str) -> bool {
    let manager = manager.clone();
    let key = key.to_owned();
    tokio::spawn(async move {
        match manager.try_acquire(&key, long()).await {
            Ok(None) => true,
            Ok(Some(guard)) => {
                guard
                    .release()
                    .await
                    .expect("a probe releases the lock it just took");
                false
            }
            Err(err) => panic!("probe of `{key}` failed: {err}"),
        }
    })
    .await
    .expect("probe task panicked")
}

/// Connects a manager with default settings, panicking with the cause on failure.
pub async fn connect(url: &str) -> LockManager {
    LockManager::connect(url)
        .await
        .unwrap_or_else(|err| panic!("cannot connect to {url}: {err}"))
}

/// Awaits `condition()` every 10 ms until it yields `true`, at most for
/// `timeout` (and so a bounded number of times). Returns whether it did.
pub async fn poll_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    let max_polls = timeout.as_millis() / POLL.as_millis() + 1;
    for _ in 0..max_polls {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    false
}

/// Whether `token` looks like an owner token: 32 lowercase hex digits.
pub fn is_owner_token(token: &str) -> bool {
    token.len() == 32
        && token
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Asserts that `result` is `Err(LockError::LeaseLost)` for `key`.
#[track_caller]
pub fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T, LockError>, key: &str) {
    match result {
        Err(LockError::LeaseLost { key: lost }) => assert_eq!(lost, key),
        other => panic!("expected LeaseLost for `{key}`, got {other:?}"),
    }
}

/// Awaits every spawned task, failing the test if they are not all done
/// within `limit`.
pub async fn join_within(tasks: Vec<tokio::task::JoinHandle<()>>, limit: Duration, what: &str) {
    let all = async {
        for task in tasks {
            task.await.expect("spawned task");
        }
    };
    tokio::time::timeout(limit, all)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"));
}
