//! Cancellation safety at every `.await`: each public future is dropped after
//! its k-th poll, for k = 1, 2, … until it completes by itself, with every
//! command delayed by a fault-injection proxy so that each await point is
//! really pending. After each drop no lock may be left behind, and no two
//! bodies may ever run under the same key at once.
//!
//! Runs on one Redis server, on Redlock over three, on a Redis Cluster of
//! three primaries (each announcing its proxy's port, so the cluster client
//! too goes through the proxies) and in memory.

mod support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distributed_lock::{distributed_lock, LockError, LockManager, LockOptions};
use distributed_lock_testkit::{FaultProxy, RedisCluster, RedisServer, RespValue};
use support::{drop_after_polls, is_held, lock_value, long, poll_async, proxied_cluster, PROMPTLY};

/// Latency the proxy adds to every chunk, in each direction.
const LATENCY: Duration = Duration::from_millis(15);
/// Most polls any of the futures needs; a future still pending after this
/// many is a hang, not a cancellation point.
const MAX_POLLS: usize = 40;
const KEY: &str = "cancel:1";

/// One backend seen through delaying proxies, plus a direct view of its keys.
struct Setup {
    delayed: LockManager,
    /// Servers, to check from outside whether a lock key exists.
    servers: Vec<RedisServer>,
    _proxies: Vec<FaultProxy>,
    /// For the in-memory backend, the only way to look at its table.
    memory: Option<LockManager>,
    /// For the cluster backend, its nodes.
    cluster: Option<RedisCluster>,
}

impl Setup {
    async fn redis(nodes: usize) -> Setup {
        let servers: Vec<RedisServer> = (0..nodes).map(|_| RedisServer::start()).collect();
        let proxies: Vec<FaultProxy> = servers
            .iter()
            .map(|server| FaultProxy::start(server.addr()))
            .collect();
        for proxy in &proxies {
            proxy.delay(LATENCY);
        }
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let builder = LockManager::builder().response_timeout(Duration::from_secs(2));
        let delayed = if nodes == 1 {
            builder.connect(&urls[0]).await
        } else {
            builder.redlock(&urls).await
        }
        .expect("connect through the proxies");
        Setup {
            delayed,
            servers,
            _proxies: proxies,
            memory: None,
            cluster: None,
        }
    }

    /// A cluster of 3 primaries, each behind a delaying proxy (see
    /// [`proxied_cluster`]).
    async fn cluster() -> Setup {
        let (cluster, proxies) = proxied_cluster().await;
        for proxy in &proxies {
            proxy.delay(LATENCY);
        }
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let delayed = LockManager::builder()
            .response_timeout(Duration::from_secs(2))
            .cluster(&urls)
            .await
            .expect("connect through the proxies");
        Setup {
            delayed,
            servers: Vec::new(),
            _proxies: proxies,
            memory: None,
            cluster: Some(cluster),
        }
    }

    fn memory() -> Setup {
        let manager = LockManager::in_memory();
        Setup {
            delayed: manager.clone(),
            servers: Vec::new(),
            _proxies: Vec::new(),
            memory: Some(manager),
            cluster: None,
        }
    }

    /// Whether the lock on `KEY`, or a waiter's place in its queue, exists
    /// anywhere, looked at from outside.
    async fn lock_exists(&self) -> bool {
        if let Some(memory) = &self.memory {
            return is_held(memory, KEY).await;
        }
        if let Some(cluster) = &self.cluster {
            // The names start with the key's hash tag: match what follows it.
            return cluster.primaries().iter().any(|node| {
                [format!("*lock:{KEY}"), format!("*lock-queue:{KEY}")]
                    .iter()
                    .any(|pattern| match node.command(&["KEYS", pattern]) {
                        Ok(RespValue::Array(keys)) => !keys.is_empty(),
                        other => panic!("KEYS {pattern} replied {other:?}"),
                    })
            });
        }
        let queue = format!("lock-queue:{KEY}");
        self.servers.iter().any(|server| {
            lock_value(server, KEY) != RespValue::Nil
                || server
                    .command(&["EXISTS", &queue])
                    .expect("EXISTS")
                    .as_integer()
                    == Some(1)
        })
    }

    /// Fails the test unless no lock on `KEY`, and no place in its queue, is
    /// left within [`PROMPTLY`].
    async fn assert_no_lock_left(&self, what: &str, polls: usize) {
        // Commands the dropped future had already handed to the connection
        // (an attempt, then its undo) are still on their way through the
        // proxy: let them land before looking, so the next round starts clean.
        tokio::time::sleep(6 * LATENCY).await;
        let freed = poll_async(PROMPTLY, || async { !self.lock_exists().await }).await;
        assert!(
            freed,
            "{what} dropped after poll {polls} left its lock behind"
        );
    }
}

/// Counts bodies running under `KEY`; two at once is a double grant.
#[derive(Default)]
struct Occupancy(AtomicUsize);

impl Occupancy {
    /// Occupies `KEY` for `hold`, or until this future is dropped.
    async fn occupy(&self, hold: Duration) {
        let before = self.0.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.0);
        assert_eq!(before, 0, "two holders of `{KEY}` at once");
        tokio::time::sleep(hold).await;
    }
}

/// Leaves the occupancy when the body ends, also by cancellation.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[distributed_lock(key = "cancel:{id}", ttl = "30s", wait = "5s", manager = manager)]
async fn annotated(manager: &LockManager, id: u32, occupancy: &Occupancy) -> Result<(), LockError> {
    occupancy.occupy(Duration::from_millis(20)).await;
    let _ = id;
    Ok(())
}

/// Drops every public future after each of its polls, in turn.
async fn every_future_at_every_await(setup: Setup) {
    let locks = &setup.delayed;
    let occupancy = Arc::new(Occupancy::default());
    let mut covered = Vec::new();

    let polls = cancel_at_each_poll(&setup, "try_acquire", || async {
        if let Ok(Some(guard)) = locks.try_acquire(KEY, long()).await {
            guard.release().await.expect("release");
        }
    })
    .await;
    covered.push(("try_acquire", polls));

    let polls = cancel_at_each_poll(&setup, "acquire behind a holder", || {
        acquire_behind_a_holder(locks, long())
    })
    .await;
    covered.push(("acquire behind a holder", polls));

    let polls = cancel_at_each_poll(&setup, "fenced try_acquire", || async {
        if let Ok(Some(guard)) = locks.try_acquire(KEY, long().fenced(true)).await {
            guard.release().await.expect("release");
        }
    })
    .await;
    covered.push(("fenced try_acquire", polls));

    let polls = cancel_at_each_poll(&setup, "fenced acquire behind a holder", || {
        acquire_behind_a_holder(locks, long().fenced(true))
    })
    .await;
    covered.push(("fenced acquire behind a holder", polls));

    let polls = cancel_at_each_poll(&setup, "acquire_all", || async {
        if let Ok(both) = locks.acquire_all(["cancel:0", KEY], long()).await {
            both.release().await.expect("release");
        }
    })
    .await;
    covered.push(("acquire_all", polls));

    let polls = cancel_at_each_poll(&setup, "release", || async {
        let guard = locks
            .try_acquire(KEY, long())
            .await
            .expect("acquire")
            .expect("free");
        guard.release().await.expect("release");
    })
    .await;
    covered.push(("release (with its acquire)", polls));

    let polls = cancel_at_each_poll(&setup, "with_lock", || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            let body = occupancy.occupy(Duration::from_millis(20));
            locks
                .with_lock(KEY, long().wait(Duration::from_secs(5)), body)
                .await
                .expect("with_lock");
        }
    })
    .await;
    covered.push(("with_lock", polls));

    let polls = cancel_at_each_poll(&setup, "annotated call", || {
        let occupancy = Arc::clone(&occupancy);
        async move {
            annotated(locks, 1, &occupancy).await.expect("annotated");
        }
    })
    .await;
    covered.push(("annotated call", polls));

    for (what, polls) in covered {
        assert!(
            polls >= 1,
            "{what} completed on its first poll: nothing was cancelled"
        );
    }
}

/// Takes `KEY`, releases it 30 ms later from a task, and meanwhile waits for
/// it with `options` (up to 5 s), releasing it once granted.
async fn acquire_behind_a_holder(locks: &LockManager, options: LockOptions) {
    let holder = locks
        .try_acquire(KEY, long())
        .await
        .expect("holder")
        .expect("the key is free between rounds");
    let release_soon = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        holder.release().await.expect("holder releases");
    });
    let waiting = options.wait(Duration::from_secs(5));
    let inner = drop_after_polls(locks.acquire(KEY, waiting), usize::MAX);
    if let Some(Ok(guard)) = inner.await {
        guard.release().await.expect("release");
    }
    release_soon.await.expect("release task");
}

/// Runs `make()` dropped after poll 1, 2, … until one run completes by
/// itself; after each, checks that no lock is left. Returns how many
/// cancellation points it found.
async fn cancel_at_each_poll<F, Fut>(setup: &Setup, what: &str, make: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    for polls in 1..=MAX_POLLS {
        let completed = drop_after_polls(make(), polls).await.is_some();
        setup.assert_no_lock_left(what, polls).await;
        if completed {
            return polls - 1;
        }
    }
    panic!("{what} was still pending after {MAX_POLLS} polls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_redis_leaves_no_lock_when_any_future_is_dropped_at_any_await() {
    every_future_at_every_await(Setup::redis(1).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_leaves_no_lock_when_any_future_is_dropped_at_any_await() {
    every_future_at_every_await(Setup::redis(3).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_leaves_no_lock_when_any_future_is_dropped_at_any_await() {
    every_future_at_every_await(Setup::cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_leaves_no_lock_when_any_future_is_dropped_at_any_await() {
    let setup = Setup::memory();
    let locks = &setup.delayed;
    let polls = cancel_at_each_poll(&setup, "with_lock", || async {
        locks
            .with_lock(KEY, long(), tokio::time::sleep(Duration::from_millis(5)))
            .await
            .expect("with_lock");
    })
    .await;
    assert!(polls >= 1, "the body's sleep is a cancellation point");
}
