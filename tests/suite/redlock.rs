//! Redlock across independent masters, against real `redis-server` processes:
//! quorum, nodes killed, slowed and restarted empty, mutual exclusion under
//! load, fencing tokens across quorums, and wake-ups from any node.
//!
//! Each test starts its own servers on free 127.0.0.1 ports. Every loop is
//! bounded in count and time.

use crate::support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::{RedisServer, RespValue};
use support::{
    acquire_after_restart, fence_counter, join_within, lease_still_valid, lock_value, redlock, urls,
};

/// The safety margin of every lease: 6 % of the ttl plus 2 ms (1 % for clock
/// drift, 5 % for the body to stop in time).
fn margin(ttl: Duration) -> Duration {
    ttl / 100 * 6 + Duration::from_millis(2)
}

/// How many of `nodes` hold `key` for `token`.
fn held_on(nodes: &[RedisServer], key: &str, token: &str) -> usize {
    nodes
        .iter()
        .filter(|node| lock_value(node, key).as_str() == Some(token))
        .count()
}

fn options(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_masters_lock_while_a_quorum_survives_and_fail_cleanly_without_one() {
    let mut nodes = RedisServer::start_independent(5);
    let first = redlock(&nodes).await;
    let second = redlock(&nodes).await;
    let opts = options(Duration::from_secs(5));

    let guard = first.acquire("five", opts.clone()).await.expect("all up");
    assert!(held_on(&nodes, "five", guard.token()) >= 3);
    assert!(second
        .try_acquire("five", opts.clone())
        .await
        .unwrap()
        .is_none());
    guard.release().await.expect("release with all nodes up");

    nodes[0].kill();
    nodes[1].kill();
    let guard = first
        .acquire("five", opts.clone())
        .await
        .expect("3 of 5 nodes are still a quorum");
    assert_eq!(held_on(&nodes[2..], "five", guard.token()), 3);
    assert!(
        second
            .try_acquire("five", opts.clone())
            .await
            .unwrap()
            .is_none(),
        "with 2 nodes down the lock still excludes a second owner"
    );
    guard
        .release()
        .await
        .expect("release: 3 nodes had it, a quorum");

    nodes[2].kill();
    let started = Instant::now();
    let err = first
        .acquire("five-gone", opts.clone().wait(Duration::from_secs(1)))
        .await
        .expect_err("2 of 5 nodes are no quorum");
    assert!(
        matches!(
            err,
            LockError::Connection { .. } | LockError::Timeout { .. }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    for survivor in &nodes[3..] {
        assert_eq!(
            lock_value(survivor, "five-gone"),
            RespValue::Nil,
            "the failed acquisition must not leave the lock on the survivors"
        );
    }
    let err = first
        .try_acquire("five-gone", opts)
        .await
        .expect_err("no quorum");
    assert!(
        matches!(&err, LockError::Connection { detail: message, .. } if message.contains("3 of 5") || message.contains("2 of 5")),
        "{err}"
    );
}

/// Sets up 3 nodes where the holder's quorum is exactly nodes 1 and 2: node 0
/// holds an old owner's leftover while the holder acquires.
async fn holder_on_nodes_1_and_2(
    nodes: &[RedisServer],
    key: &str,
    opts: LockOptions,
) -> leasehold::LockGuard {
    let lock_key = format!("lock:{key}");
    nodes[0]
        .command(&["SET", &lock_key, "old-owner", "PX", "60000"])
        .unwrap();
    let holder = redlock(nodes).await;
    let guard = holder
        .acquire(key, opts)
        .await
        .expect("nodes 1 and 2 grant");
    assert_eq!(lock_value(&nodes[0], key).as_str(), Some("old-owner"));
    assert_eq!(held_on(&nodes[1..], key, guard.token()), 2);
    // The old owner goes away: node 0 is free again.
    nodes[0].command(&["DEL", &lock_key]).unwrap();
    guard
}

/// The counterexample to the delayed-restart rule: a node of the holder's
/// quorum restarts empty at once, and a rival assembles a quorum with it while
/// the holder's lease is still valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_restarted_empty_at_once_can_grant_the_lock_twice() {
    let mut nodes = RedisServer::start_independent(3);
    let ttl = Duration::from_secs(3);
    let guard = holder_on_nodes_1_and_2(&nodes, "restart", options(ttl).renew(false)).await;

    nodes[2].restart_empty();
    let rival = redlock(&nodes).await;
    let second = rival.try_acquire("restart", options(ttl)).await.unwrap();

    assert!(second.is_some(), "nodes 0 and 2 (now empty) form a quorum");
    assert!(
        lease_still_valid(&guard),
        "the first holder's lease is still valid: two holders at once"
    );
}

/// The delayed-restart rule: a node that restarts empty only after the ttl
/// has passed cannot break mutual exclusion, because without it the holder's
/// lease could not be renewed by a quorum and was reported lost first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_restarted_empty_after_the_ttl_keeps_mutual_exclusion() {
    let mut nodes = RedisServer::start_independent(3);
    let ttl = Duration::from_secs(1);
    let guard = holder_on_nodes_1_and_2(&nodes, "restart", options(ttl)).await;

    nodes[2].kill();
    tokio::time::sleep(ttl + Duration::from_millis(400)).await;
    assert!(
        guard.is_lost(),
        "renewals reached only node 1, no quorum: the lease must be lost before node 2 returns"
    );
    nodes[2].restart_empty();

    let rival = redlock(&nodes).await;
    let second = rival.try_acquire("restart", options(ttl)).await.unwrap();
    assert!(second.is_some(), "nodes 0 and 2 form a quorum");
    assert!(
        guard.is_lost() && !lease_still_valid(&guard),
        "never two valid holders"
    );
}

/// `DEBUG SLEEP` on one node, sent from a thread of its own. The thread is
/// joined on drop, also when the test fails, so it never keeps the servers
/// alive past the test process.
struct Sleeper(Option<std::thread::JoinHandle<Result<RespValue, String>>>);

impl Sleeper {
    fn start(nodes: &Arc<Vec<RedisServer>>, node: usize, seconds: &str) -> Sleeper {
        let (nodes, seconds) = (Arc::clone(nodes), seconds.to_owned());
        Sleeper(Some(std::thread::spawn(move || {
            nodes[node].command(&["DEBUG", "SLEEP", &seconds])
        })))
    }

    /// Waits for the sleep to end; the reply to `DEBUG SLEEP`.
    fn join(mut self) -> Result<RespValue, String> {
        let thread = self.0.take().expect("joined once");
        thread.join().expect("sleeper thread")
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_node_does_not_break_acquisition_and_validity_keeps_a_safety_margin() {
    let nodes: Arc<Vec<RedisServer>> = Arc::new(
        (0..3)
            .map(|_| {
                RedisServer::builder()
                    .arg("--enable-debug-command")
                    .arg("yes")
                    .start()
            })
            .collect(),
    );
    let first = redlock(&nodes).await;
    let second = redlock(&nodes).await;
    let ttl = Duration::from_secs(2);

    let sleeper = Sleeper::start(&nodes, 2, "0.3");
    tokio::time::sleep(Duration::from_millis(50)).await;

    let start = Instant::now();
    let guard = first
        .acquire("slow", options(ttl))
        .await
        .expect("nodes 0 and 1 are a quorum");
    let now = Instant::now();
    let until = guard.valid_until().expect("held");
    // The lease counts from before the first request, which lies between
    // `start` and `now`, and is shortened by the safety margin.
    assert!(
        until >= start + ttl - margin(ttl),
        "counted from the first request"
    );
    assert!(
        until <= now + ttl - margin(ttl),
        "shortened by the safety margin"
    );
    assert!(until < start + ttl, "never the naive start + ttl");
    assert!(until > now);
    assert!(
        second
            .try_acquire("slow", options(ttl))
            .await
            .unwrap()
            .is_none(),
        "nodes 0 and 1 exclude a second owner while node 2 sleeps"
    );

    let slept = tokio::task::spawn_blocking(move || sleeper.join())
        .await
        .unwrap();
    assert!(slept.is_ok(), "{slept:?}");
    guard.release().await.expect("release");
    for node in nodes.iter() {
        assert_eq!(
            lock_value(node, "slow"),
            RespValue::Nil,
            "released on every node, the slow one too"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn three_managers_of_sixteen_tasks_lose_no_update() {
    const TASKS: u64 = 16;
    const ROUNDS: u64 = 4;
    let nodes = RedisServer::start_independent(3);
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let manager = redlock(&nodes).await;
        for _ in 0..TASKS {
            let (manager, counter, inside) =
                (manager.clone(), Arc::clone(&counter), Arc::clone(&inside));
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let opts = options(Duration::from_secs(5)).wait(Duration::from_secs(30));
                    let guard = manager.acquire("counter", opts).await.expect("acquire");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    join_within(tasks, Duration::from_secs(60), "all rounds").await;
    assert_eq!(counter.load(Ordering::SeqCst), 3 * TASKS * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_increase_across_quorums_when_the_highest_counter_dies() {
    let mut nodes = RedisServer::start_independent(3);
    let first = redlock(&nodes).await;
    let second = redlock(&nodes).await;
    let opts = options(Duration::from_secs(5));

    // Node 0's counter runs far ahead of the others', and node 2 is held by
    // an old owner, so the first quorum is nodes 0 and 1.
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let ahead = (now_us + 1_000_000_000_000).to_string();
    nodes[0]
        .command(&["SET", "lock-fence:fenced", &ahead])
        .unwrap();
    nodes[2]
        .command(&["SET", "lock:fenced", "old-owner", "PX", "60000"])
        .unwrap();
    let guard = first
        .acquire("fenced", opts.clone())
        .await
        .expect("nodes 0 and 1");
    let mut last = guard.fencing_token().await.unwrap();
    assert!(
        last > ahead.parse().unwrap(),
        "the quorum's maximum is node 0's"
    );
    assert_eq!(
        fence_counter(&nodes[1], "fenced"),
        Some(last),
        "the token was written back to node 1"
    );
    guard.release().await.unwrap();
    nodes[2].command(&["DEL", "lock:fenced"]).unwrap();

    nodes[0].kill();
    for round in 0..6 {
        let manager = if round % 2 == 0 { &second } else { &first };
        let guard = manager
            .acquire("fenced", opts.clone())
            .await
            .expect("nodes 1 and 2");
        assert!(
            guard.fencing_token().await.unwrap() > last,
            "round {round}: {} after {last}",
            guard.fencing_token().await.unwrap()
        );
        last = guard.fencing_token().await.unwrap();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiter_is_woken_by_a_release_on_the_surviving_nodes() {
    let mut nodes = RedisServer::start_independent(3);
    let holder = redlock(&nodes).await;
    let waiter = redlock(&nodes).await;
    let ttl = Duration::from_secs(10);
    let guard = holder.acquire("wake", options(ttl)).await.unwrap();

    let waiting = tokio::spawn(async move {
        waiter
            .acquire("wake", options(ttl).wait(Duration::from_secs(5)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    nodes[0].kill();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());

    let released = Instant::now();
    guard.release().await.expect("nodes 1 and 2 had it");
    let woken = tokio::time::timeout(Duration::from_secs(8), waiting)
        .await
        .expect("waiter returns")
        .unwrap();
    assert!(woken.is_ok(), "{woken:?}");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the release, not by the 10 s ttl: {:?}",
        released.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn starts_with_a_node_down_and_uses_it_once_it_is_back() {
    let mut nodes = RedisServer::start_independent(3);
    nodes[2].kill();
    let manager = redlock(&nodes).await;
    let guard = manager
        .acquire("late", options(Duration::from_secs(5)))
        .await
        .expect("2 of 3 nodes");
    guard.release().await.unwrap();

    nodes[2].restart_empty();
    let mut reached = false;
    for _ in 0..20 {
        let guard = manager
            .acquire("late", options(Duration::from_secs(5)))
            .await
            .expect("acquire");
        reached = lock_value(&nodes[2], "late").as_str() == Some(guard.token());
        guard.release().await.unwrap();
        if reached {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reached, "the node that came back takes part again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_increase_after_every_node_restarts_empty() {
    let mut nodes = RedisServer::start_independent(3);
    let manager = redlock(&nodes).await;
    // A long ttl gives each node a long timeout (ttl / 10), so a loaded
    // machine cannot fail the token's issue. The lock is released before the
    // crash, so the delayed-restart rule asks for no wait here.
    let ttl = Duration::from_secs(5);
    let guard = manager.acquire("restart", options(ttl)).await.unwrap();
    let before = guard.fencing_token().await.unwrap();
    guard.release().await.unwrap();

    for node in &mut nodes {
        node.kill();
    }
    for node in &mut nodes {
        node.restart_empty();
    }

    let guard = acquire_after_restart(&manager, "restart", options(ttl)).await;
    let after = guard.fencing_token().await.unwrap();
    guard.release().await.unwrap();
    assert!(
        after > before,
        "fencing token went back from {before} to {after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_refuses_what_it_cannot_honour() {
    let nodes = RedisServer::start_independent(3);
    let invalid = |result: Result<LockManager, LockError>| match result {
        Err(LockError::InvalidOptions(message)) => message,
        other => panic!("expected InvalidOptions, got {other:?}"),
    };
    let message = invalid(LockManager::redlock(urls(&nodes[..2])).await);
    assert!(message.contains("odd"), "{message}");
    invalid(LockManager::redlock(Vec::<String>::new()).await);
    let twice = [nodes[0].url(), nodes[1].url(), nodes[0].url()];
    let message = invalid(LockManager::redlock(twice).await);
    assert!(message.contains("twice"), "{message}");

    let manager = redlock(&nodes).await;
    let replicated = options(Duration::from_secs(5)).min_replicas(1, Duration::from_millis(100));
    assert!(matches!(
        manager.acquire("refused", replicated).await,
        Err(LockError::InvalidOptions(_))
    ));
    assert!(matches!(
        manager
            .acquire("refused", options(Duration::from_millis(5)))
            .await,
        Err(LockError::InvalidOptions(_))
    ));
    for node in &nodes {
        assert_eq!(lock_value(node, "refused"), RespValue::Nil);
    }
}
