//! Redis Cluster under faults, against real processes (3 primaries with a
//! replica each on 127.0.0.1): keys whose braces would split a lock over
//! slots, waiters subscribed on the node that serves the slot, a primary
//! killed while it holds a lock and another manager waits, `CLUSTER
//! FAILOVER` from a replica, a slot migrated while its lock is held and
//! waited for, `min_replicas` per shard, and a cluster that cannot be
//! reached.
//!
//! Tests that fail over or reshard start their own cluster; the others share
//! one, each in a key namespace of its own. Every loop is bounded in count
//! and time; time bounds are generous and only catch hangs.

use crate::support;

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::{LockError, LockGuard, LockManager, LockOptions};
use leasehold_testkit::{key_slot, ExtraPort, RedisCluster, RedisServer, RespValue};
use support::{
    cluster_manager, cluster_namespace, holder_token, lease_still_valid, long, poll_async,
    shared_cluster, within, NO_HANG, PROMPTLY,
};

/// Bound on a manager working again after a failover or a migration.
const FOLLOW: Duration = Duration::from_secs(60);

/// How long a waiter may wait before the holder counts as having kept its
/// lease across a failover.
const KEEP: Duration = Duration::from_secs(20);

/// A manager on `cluster` in the default namespace (`lock`), so that
/// [`lock_name`] names its keys.
async fn manager(cluster: &RedisCluster) -> LockManager {
    cluster_manager(cluster, "lock").await
}

/// The lock key, in namespace `lock`, of a user key whose hash tag is `tag`.
fn lock_name(tag: &str, user: &str) -> String {
    format!("{{{tag}}}lock:{user}")
}

/// A user key `name:{tag}` whose slot `primaries()[index]` serves, and its tag.
fn key_served_by(cluster: &RedisCluster, index: usize, name: &str) -> (String, String) {
    let primary = cluster.primaries()[index].port();
    (0..10_000)
        .map(|i| format!("t{i}"))
        .find(|tag| cluster.primary_for_key(tag).map(RedisServer::port) == Some(primary))
        .map(|tag| (format!("{name}:{{{tag}}}"), tag))
        .expect("some tag hashes to every primary")
}

/// The value of `name` on `server`: the holder's owner token or `Nil`.
fn value(server: &RedisServer, name: &str) -> RespValue {
    server
        .command(&["GET", name])
        .unwrap_or_else(|err| panic!("GET {name} failed: {err}"))
}

/// The value of `name` on the cluster replica `server`, read after
/// `READONLY` (without it a replica redirects reads to its primary).
async fn replica_value(server: &RedisServer, name: &str) -> Option<String> {
    let client = redis::Client::open(server.url()).expect("replica URL");
    let mut connection = within(client.get_multiplexed_async_connection())
        .await
        .expect("connect to the replica");
    let () = within(redis::cmd("READONLY").query_async(&mut connection))
        .await
        .expect("READONLY");
    within(redis::cmd("GET").arg(name).query_async(&mut connection))
        .await
        .expect("GET on the replica")
}

/// Runs a blocking testkit step (a failover waits for the nodes) without
/// stalling the runtime's other tasks.
fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// A lease that renews every second, so a failover falls inside it.
fn short_lease() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(3))
}

/// Calls `attempt` every 100 ms until it returns `Some`, for at most `limit`;
/// each call must return within [`NO_HANG`]. Every error on the way must be
/// `LockError::Connection`, the error of a cluster in flux.
async fn until_some<T, F, Fut>(limit: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    let deadline = Instant::now() + limit;
    for _ in 0..limit.as_millis() / 100 + 1 {
        match within(attempt()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(LockError::Connection { .. }) => {}
            Err(other) => panic!("{what}: unexpected error while the cluster changes: {other:?}"),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not done within {limit:?}");
}

/// A task that waits for `key` on `locks` until it gets it, riding out the
/// errors of a cluster in flux, and then takes its fencing token, riding
/// them out again.
fn waiter(locks: LockManager, key: String) -> tokio::task::JoinHandle<(LockGuard, u64)> {
    tokio::spawn(async move {
        let guard: LockGuard = until_some(KEEP + FOLLOW, "the waiter", || async {
            locks
                .acquire(&key, short_lease().wait(Duration::from_secs(5)))
                .await
                .map(Some)
                .or_else(|err| match err {
                    LockError::Timeout { .. } => Ok(None),
                    err => Err(err),
                })
        })
        .await;
        // The cluster may still be settling: a token request that times out
        // issues nothing (see `LockGuard::fencing_token`) and is asked again.
        let token = until_some(FOLLOW, "the waiter's fencing token", || async {
            guard.fencing_token().await.map(Some)
        })
        .await;
        (guard, token)
    })
}

/// After a failover: either the holder kept its lease (the lock had reached
/// the promoted replica and renewals followed) and the waiter gets the lock
/// once it is released, or the holder learns it lost the lease and the
/// waiter takes the lock. Either way the waiter's fencing token is above
/// `before`, and the primary now serving the key has the waiter's lock.
async fn holder_keeps_or_loses_and_the_waiter_follows(
    cluster: &RedisCluster,
    guard: LockGuard,
    before: u64,
    waiting: tokio::task::JoinHandle<(LockGuard, u64)>,
    name: &str,
) {
    let (rival, after) = support::holder_keeps_or_loses_and_the_waiter_follows(
        guard,
        waiting,
        (KEEP, FOLLOW),
        |_| {},
    )
    .await;
    assert!(
        after > before,
        "token {after} of the new holder is not above {before}: a stale holder's writes would pass"
    );
    let serving = cluster
        .primary_for_key(name)
        .expect("a primary serves the key");
    assert_eq!(
        value(serving, name).as_str(),
        Some(rival.token()),
        "the primary serving the key has the waiter's lock"
    );
    within(rival.release()).await.expect("the waiter releases");
}

/// Acquires `key` with a short lease on `locks`, takes its fencing token and
/// waits until the lock has reached every replica of the primary serving it.
async fn hold_replicated(
    cluster: &RedisCluster,
    locks: &LockManager,
    key: &str,
    name: &str,
) -> (LockGuard, u64) {
    let guard = within(locks.acquire(key, short_lease()))
        .await
        .expect("free lock");
    let before = guard.fencing_token().await.expect("token while held");
    let primary = cluster.primary_for_key(name).expect("a primary serves it");
    let replicas = cluster.replicas_of(primary);
    assert!(!replicas.is_empty(), "the shard has a replica");
    let replicated = poll_async(NO_HANG, || async {
        for replica in &replicas {
            if replica_value(replica, name).await.as_deref() != Some(guard.token()) {
                return false;
            }
        }
        true
    })
    .await;
    assert!(replicated, "the lock reached the replicas");
    (guard, before)
}

/// Keys full of braces: the lock, its fencing counter and its waiter queue
/// must share a slot (a script touching several slots fails with CROSSSLOT),
/// so acquiring fenced, queueing a waiter and handing the lock over to it
/// all work, and the waiter's token is above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_braces_keep_every_name_of_a_lock_in_one_slot() {
    let cluster = shared_cluster();
    let namespace = cluster_namespace();
    let a = cluster_manager(&cluster, &namespace).await;
    let b = cluster_manager(&cluster, &namespace).await;
    for key in [
        "{", "}", "{}", "}{", "{{}}", "a{b}c", "a{}b{c}", "x{", "{}x{y}",
    ] {
        let holder = within(a.acquire(key, long().fenced(true)))
            .await
            .unwrap_or_else(|err| panic!("key {key:?}: {err}"));
        let first = within(holder.fencing_token()).await.expect("token");
        let waiting = {
            let (b, key) = (b.clone(), key.to_owned());
            tokio::spawn(async move {
                let guard = b
                    .acquire(&key, long().wait(NO_HANG))
                    .await
                    .unwrap_or_else(|err| panic!("waiter on {key:?}: {err}"));
                let token = guard.fencing_token().await.expect("token");
                guard.release().await.expect("waiter releases");
                token
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released_at = Instant::now();
        within(holder.release()).await.expect("holder releases");
        let second = within(waiting).await.expect("waiter did not panic");
        assert!(
            released_at.elapsed() < PROMPTLY,
            "key {key:?}: the waiter got the lock {:?} after the release, not at once",
            released_at.elapsed()
        );
        assert!(second > first, "key {key:?}: token {second} after {first}");
    }
}

/// A waiter subscribes to the lock's sharded channel on the primary that
/// serves the key's slot (where the release script SPUBLISHes), and nowhere
/// else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_subscribe_to_the_sharded_channel_on_the_slots_primary() {
    let cluster = shared_cluster();
    let namespace = cluster_namespace();
    let a = cluster_manager(&cluster, &namespace).await;
    let b = cluster_manager(&cluster, &namespace).await;
    let (key, tag) = key_served_by(&cluster, 1, "sub");
    let channel = format!("{{{tag}}}{namespace}:{key}");
    let holder = within(a.acquire(&key, long())).await.expect("free lock");
    let waiting = {
        let (b, key) = (b.clone(), key.clone());
        tokio::spawn(async move { b.acquire(&key, long().wait(NO_HANG)).await })
    };
    let shard_channels = |server: &RedisServer| match server.command(&["PUBSUB", "SHARDCHANNELS"]) {
        Ok(RespValue::Array(channels)) => channels
            .iter()
            .filter_map(|channel| channel.as_str().map(str::to_owned))
            .filter(|channel| channel.contains(&namespace))
            .collect::<Vec<_>>(),
        other => panic!("PUBSUB SHARDCHANNELS replied {other:?}"),
    };
    let serving = cluster.primaries()[1];
    let subscribed = poll_async(PROMPTLY, || async {
        shard_channels(serving) == [channel.clone()]
    })
    .await;
    assert!(
        subscribed,
        "no sharded subscriber for {channel} on the slot's primary: {:?}",
        shard_channels(serving)
    );
    for other in [cluster.primaries()[0], cluster.primaries()[2]] {
        assert!(shard_channels(other).is_empty(), "subscribed elsewhere too");
    }
    within(holder.release()).await.expect("release");
    let guard = within(waiting)
        .await
        .expect("waiter did not panic")
        .expect("waiter gets the lock");
    within(guard.release()).await.expect("release");
}

/// `min_replicas` on a cluster counts the replicas of the key's shard: one
/// (each shard has one) is granted, two are refused with `NotReplicated` and
/// the lock is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_counts_the_replicas_of_the_keys_shard() {
    let cluster = shared_cluster();
    let namespace = cluster_namespace();
    let locks = cluster_manager(&cluster, &namespace).await;
    let replicated = long().min_replicas(1, Duration::from_secs(2));
    let guard = within(locks.acquire("order", replicated))
        .await
        .expect("one replica acknowledges");
    within(guard.release()).await.expect("release");
    let too_many = long().min_replicas(2, Duration::from_millis(200));
    match within(locks.acquire("order", too_many)).await {
        Err(LockError::NotReplicated {
            key,
            acknowledged: 1,
            required: 2,
        }) => assert_eq!(key, "order"),
        other => panic!(
            "expected NotReplicated (1 of 2), got {:?}",
            other.map(|_| ())
        ),
    }
    let again = within(locks.try_acquire("order", long())).await.unwrap();
    assert!(again.is_some(), "the unreplicated lock was given back");
}

/// A primary holding a lock is killed while another manager waits for it:
/// its replica takes over, nothing hangs, the holder keeps its lease or
/// learns it lost it, the waiter gets the lock with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_primary_keeps_or_reports_the_lease_and_the_waiter_gets_the_lock() {
    let mut cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let other = manager(&cluster).await;
    let (key, tag) = key_served_by(&cluster, 0, "job");
    let name = lock_name(&tag, &key);
    let (guard, before) = hold_replicated(&cluster, &holder, &key, &name).await;
    let waiting = waiter(other, key.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    blocking(|| cluster.kill_primary(0));

    holder_keeps_or_loses_and_the_waiter_follows(&cluster, guard, before, waiting, &name).await;
}

/// `CLUSTER FAILOVER` from the replica of the primary holding a lock, while
/// another manager waits: the same guarantees as a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_failover_keeps_or_reports_the_lease_and_the_waiter_gets_the_lock() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let other = manager(&cluster).await;
    let (key, tag) = key_served_by(&cluster, 2, "report");
    let name = lock_name(&tag, &key);
    let (guard, before) = hold_replicated(&cluster, &holder, &key, &name).await;
    let waiting = waiter(other, key.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let primary = cluster.primaries()[2].addr();
    blocking(|| cluster.failover(cluster.replicas_of(cluster.primaries()[2])[0]));
    assert_ne!(cluster.primary_for_key(&name).unwrap().addr(), primary);

    holder_keeps_or_loses_and_the_waiter_follows(&cluster, guard, before, waiting, &name).await;
}

/// The slot of a held lock moves to another primary while a manager waits
/// for it: renewals follow the slot (the lease is kept over two renewal
/// periods), the release on the new primary reaches the waiter, which gets
/// the lock with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrating_the_slot_of_a_held_lock_keeps_the_lease_and_wakes_the_waiter() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let other = manager(&cluster).await;
    let (key, tag) = key_served_by(&cluster, 0, "stock");
    let name = lock_name(&tag, &key);
    let guard = within(holder.acquire(&key, short_lease()))
        .await
        .expect("free lock");
    let before = guard.fencing_token().await.expect("token while held");
    let waiting = waiter(other, key.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (from, to) = (cluster.primaries()[0], cluster.primaries()[1]);
    let moved = blocking(|| cluster.migrate_slot(key_slot(&tag), from, to));
    assert!(moved >= 1, "the lock's keys moved with the slot");
    assert_eq!(holder_token(&value(to, &name)), Some(guard.token()));

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !guard.is_lost() && lease_still_valid(&guard),
        "the holder's renewals did not follow the slot"
    );
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    within(guard.release()).await.expect("the holder releases");
    let (rival, after) = tokio::time::timeout(FOLLOW, waiting)
        .await
        .expect("the waiter gets the released lock")
        .expect("the waiter did not panic");
    assert!(after > before, "token {after} after {before}");
    assert_eq!(value(to, &name).as_str(), Some(rival.token()));
    within(rival.release()).await.expect("the waiter releases");
}

/// No node answers: connecting fails with `Connection` in bounded time, and
/// an empty list of nodes with `InvalidUrl`.
#[tokio::test]
async fn unreachable_or_empty_cluster_fails_with_a_typed_error() {
    let port = ExtraPort::reserve();
    let started = Instant::now();
    let result = LockManager::builder()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .cluster([format!("redis://127.0.0.1:{}", port.port())])
        .await;
    assert!(
        matches!(result, Err(LockError::Connection { .. })),
        "{:?}",
        result.map(|_| ())
    );
    assert!(started.elapsed() < NO_HANG, "took {:?}", started.elapsed());
    let empty = LockManager::cluster(Vec::<String>::new()).await;
    assert!(
        matches!(empty, Err(LockError::InvalidUrl { .. })),
        "{:?}",
        empty.map(|_| ())
    );
}

/// Resharding under load: tasks on two managers keep taking and releasing
/// locks on three keys of one slot until the slot has moved to another
/// primary and back. No key ever has two holders at once, every error on
/// the way is a retryable `Connection`, cycles complete while the slot
/// moves, and every task finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locks_stay_exclusive_and_waiters_finish_while_their_slot_moves_back_and_forth() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    const TASKS: usize = 6;
    /// Bound on the cycles of one task, however long the migrations take.
    const MAX_CYCLES: usize = 20_000;
    let cluster = RedisCluster::start();
    let managers = [manager(&cluster).await, manager(&cluster).await];
    let (_, tag) = key_served_by(&cluster, 0, "busy");
    let keys: Vec<String> = (0..3).map(|i| format!("busy:{i}:{{{tag}}}")).collect();
    let holders: Arc<Vec<AtomicUsize>> =
        Arc::new(keys.iter().map(|_| AtomicUsize::new(0)).collect());
    let overlap = Arc::new(AtomicBool::new(false));
    let moving = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let cycles_while_moving = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let locks = managers[task % 2].clone();
        let (keys, holders, overlap) = (keys.clone(), Arc::clone(&holders), Arc::clone(&overlap));
        let (moving, done) = (Arc::clone(&moving), Arc::clone(&done));
        let cycles_while_moving = Arc::clone(&cycles_while_moving);
        tasks.push(tokio::spawn(async move {
            for cycle in 0..MAX_CYCLES {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let which = (task + cycle) % keys.len();
                let guard: LockGuard = until_some(FOLLOW, "a cycle", || async {
                    locks
                        .acquire(&keys[which], short_lease().wait(Duration::from_secs(5)))
                        .await
                        .map(Some)
                        .or_else(|err| match err {
                            LockError::Timeout { .. } => Ok(None),
                            err => Err(err),
                        })
                })
                .await;
                if holders[which].fetch_add(1, Ordering::SeqCst) != 0 {
                    overlap.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                holders[which].fetch_sub(1, Ordering::SeqCst);
                match within(guard.release()).await {
                    Ok(()) | Err(LockError::Connection { .. }) => {}
                    Err(other) => panic!("release during resharding: {other:?}"),
                }
                if moving.load(Ordering::SeqCst) {
                    cycles_while_moving.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let slot = key_slot(&tag);
    let (first, second) = (cluster.primaries()[0].port(), cluster.primaries()[1].port());
    for (from, to) in [(first, second), (second, first)] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        moving.store(true, Ordering::SeqCst);
        blocking(|| {
            let primaries = cluster.primaries();
            let node = |port: u16| {
                *primaries
                    .iter()
                    .find(|node| node.port() == port)
                    .expect("a running primary")
            };
            cluster.migrate_slot(slot, node(from), node(to));
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::SeqCst);
    assert!(
        cycles_while_moving.load(Ordering::SeqCst) > 0,
        "no cycle ran while the slot moved: the test proved nothing"
    );
    for task in tasks {
        tokio::time::timeout(FOLLOW, task)
            .await
            .expect("every task completes its cycles")
            .expect("no task panicked");
    }
    assert!(
        !overlap.load(Ordering::SeqCst),
        "a key had two holders at once"
    );
}

/// How soon a release on the new primary must reach a waiter after a
/// failover (see the Sentinel test of the same name).
const WOKEN: Duration = Duration::from_secs(1);

/// Waits until `locks` is granted a lock in slot tag `tag` again: the
/// promoted primary's lock-delay there (as long as the holder's 20 s
/// lease) is over.
async fn until_granting(locks: &LockManager, tag: &str) {
    let probe = format!("probe:{{{tag}}}");
    let granting = poll_async(FOLLOW, || async {
        let Ok(Some(guard)) = within(locks.try_acquire(&probe, short_lease())).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return false;
        };
        within(guard.release()).await.is_ok()
    })
    .await;
    assert!(granting, "the promoted primary never granted again");
}

/// After `CLUSTER FAILOVER` of the shard holding them, the waiters of every
/// kind (a permit, a read of a write-locked key, a plain lock) listen where
/// the slot now lives: once the promoted primary's lock-delay is over, the
/// releases there wake them at once, not when the holder's 20 s lease would
/// have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_every_kind_hear_releases_on_the_new_primary_after_a_failover() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let other = manager(&cluster).await;
    let (_, tag) = key_served_by(&cluster, 1, "any");
    let [sem, doc, plain] = ["sem", "doc", "plain"].map(|name| format!("{name}:{{{tag}}}"));
    let waiting = support::EveryKindWaiting::start(&holder, &other, [&sem, &doc, &plain]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let primary = cluster.primaries()[1];
    let old = primary.addr();
    blocking(|| cluster.failover(cluster.replicas_of(primary)[0]));
    let promoted = cluster
        .primary_for_key(&tag)
        .expect("a primary serves the tag");
    assert_ne!(promoted.addr(), old);
    until_granting(&other, &tag).await;
    waiting.release_and_assert_woken_within(WOKEN).await;
}
