//! Sentinel-managed Redis under faults, against real processes (a primary, 2
//! replicas and 3 Sentinels on 127.0.0.1): a forced failover while a lock is
//! held and another manager waits, a crashed primary (and waiting on the
//! promoted one), a primary turned replica answering `READONLY`, the double
//! grants that asynchronous failover allows (a crash before replication, a
//! replaced primary still granting) and `min_replicas` refusing them, and
//! Sentinels that cannot be reached or do not know the service.
//!
//! Each test that fails over starts its own topology. Every loop is bounded
//! in count and time; time bounds are generous and only catch hangs.

use crate::support;

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::{
    LockDelayState, LockError, LockGuard, LockManager, LockManagerBuilder, LockOptions,
};
use leasehold_testkit::{
    poll_until, Engine, ExtraPort, FaultProxy, RedisSentinel, RedisServer, RespValue,
};
use support::{
    assert_not_replicated, assert_subscribed_soon, holder_token, lease_still_valid, lock_value,
    long, poll_async, sentinel_manager, shared_sentinel, within, NO_HANG,
};

/// Connect and response timeouts of the managers of these tests, so that a
/// dead node costs little.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Bound on a manager finding the promoted primary after a failover.
const FOLLOW: Duration = Duration::from_secs(60);

/// The lease (and so the lock-delay) of the tests that wait for a lock-delay
/// to end: short, to keep them quick.
const SHORT_TTL: Duration = Duration::from_secs(4);

/// How long a waiter may wait before the holder counts as having kept its
/// lease across a failover: Sentinel demotes the old primary, which cuts its
/// clients off, 8 to 20 s after the failover.
const KEEP: Duration = Duration::from_secs(40);

/// A manager on `topology`'s primary with the default namespace (so that
/// [`lock_value`] finds its keys) and the support layer's 500 ms timeouts.
async fn manager(topology: &RedisSentinel) -> LockManager {
    sentinel_manager(topology, "lock").await
}

/// As [`manager`], keeping no lock-delay: for the tests that see which
/// primary a manager follows by taking a lock there at once.
async fn following_manager(topology: &RedisSentinel) -> LockManager {
    LockManager::builder()
        .namespace("lock")
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .risk_two_holders_after_failover()
        .sentinel(topology.service_name(), topology.sentinel_urls())
        .await
        .unwrap_or_else(|err| panic!("cannot connect through the Sentinels: {err}"))
}

/// Runs a blocking testkit step (a failover waits for the Sentinels) without
/// stalling the runtime's other tasks.
fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// Calls `attempt` every 100 ms until it returns `Some`, for at most `limit`;
/// each call must return within [`NO_HANG`]. Every error on the way must be
/// `LockError::Connection`, the error of a failover under way.
async fn until_some<T, F, Fut>(limit: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    let deadline = Instant::now() + limit;
    let rounds = limit.as_millis() / 100 + 1;
    for _ in 0..rounds {
        match within(attempt()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(LockError::Connection { .. }) => {}
            Err(other) => panic!("{what}: unexpected error during failover: {other:?}"),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not done within {limit:?}");
}

/// A lease that renews every second, so a failover falls inside it.
fn short_lease() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(3))
}

/// `SENTINEL FAILOVER` while a lock is held (and renewed) and another
/// manager waits for it: no hang, the waiter gets the lock, and its fencing
/// token is above the first holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forced_failover_keeps_or_reports_the_lease_and_the_waiter_gets_the_lock() {
    let topology = RedisSentinel::start();
    let holder = manager(&topology).await;
    let other = manager(&topology).await;
    let guard = holder
        .acquire("job", short_lease())
        .await
        .expect("free lock");
    let before = guard.fencing_token().await.expect("token while held");
    let token = guard.token().to_owned();
    assert!(
        poll_async(NO_HANG, || async {
            topology
                .replicas()
                .iter()
                .all(|replica| lock_value(replica, "job").as_str() == Some(token.as_str()))
        })
        .await,
        "the lock reached the replicas"
    );
    let waiter = tokio::spawn(async move {
        let guard: LockGuard = until_some(KEEP + FOLLOW, "the waiter", || async {
            other
                .acquire("job", short_lease().wait(Duration::from_secs(5)))
                .await
                .map(Some)
                .or_else(|err| match err {
                    LockError::Timeout { .. } => Ok(None),
                    err => Err(err),
                })
        })
        .await;
        let after = guard.fencing_token().await.expect("token while held");
        (guard, after)
    });

    let old = topology.primary().addr();
    let new = blocking(|| topology.failover());
    assert_ne!(old, new);

    // Either the old primary keeps the holder's renewals until Sentinel
    // demotes it, the copy on the new primary expires and the waiter takes
    // the lock there (the holder must then learn it lost its lease), or the
    // holder's renewals reach the new primary in time and it keeps its lease
    // (the waiter then gets the lock once it is released).
    let (rival, after) = support::holder_keeps_or_loses_and_the_waiter_follows(
        guard,
        waiter,
        (KEEP, FOLLOW),
        |_| {
            assert_eq!(
                holder_token(&lock_value(topology.primary(), "job")),
                Some(token.as_str()),
                "the holder kept its lease on the new primary"
            );
        },
    )
    .await;
    assert!(
        after > before,
        "token {after} of the new holder is not above {before}: a stale holder's writes would pass"
    );
    assert_eq!(
        lock_value(topology.primary(), "job").as_str(),
        Some(rival.token()),
        "the new primary has the waiter's lock"
    );
    within(rival.release()).await.expect("the waiter releases");
}

/// How soon a manager must be on the new primary after a failover that
/// Sentinel announced: far less than the 8 to 20 s before Sentinel demotes a
/// replaced primary that is still up, which a failed call would need.
const ANNOUNCED: Duration = Duration::from_secs(3);

/// A forced failover leaves the old primary up and taking writes until
/// Sentinel demotes it, seconds later. The manager hears the Sentinels'
/// `+switch-master` and locks on the new primary long before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manager_follows_an_announced_failover_before_the_old_primary_is_demoted() {
    let topology = RedisSentinel::start();
    let locks = following_manager(&topology).await;
    locks
        .try_acquire("switch", long())
        .await
        .unwrap()
        .expect("free lock")
        .release()
        .await
        .unwrap();
    let old = topology.primary().addr();
    let new = blocking(|| topology.failover());
    assert_ne!(old, new);
    let promoted = topology.primary();
    assert_eq!(promoted.addr(), new);

    let deadline = Instant::now() + ANNOUNCED;
    let mut on_new_primary = false;
    for _ in 0..ANNOUNCED.as_millis() / 50 {
        if let Ok(Some(guard)) = within(locks.try_acquire("switch", long())).await {
            on_new_primary = lock_value(promoted, "switch").as_str() == Some(guard.token());
            within(guard.release()).await.ok();
        }
        if on_new_primary || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        on_new_primary,
        "the manager still locks on the replaced primary {old} {ANNOUNCED:?} after the failover to {new}"
    );
}

/// A crashed primary: typed errors within the timeouts while it is down,
/// then the same manager locks and waits on the promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_primary_gives_typed_errors_then_the_promoted_replica_serves() {
    let mut topology = RedisSentinel::start();
    let follower = following_manager(&topology).await;
    follower
        .acquire("before", long())
        .await
        .expect("lock before the crash")
        .release()
        .await
        .expect("release before the crash");

    let old = topology.primary().addr();
    let killer = std::thread::spawn(move || {
        let new = topology.kill_primary();
        (topology, new)
    });
    let mut errors = 0;
    let mut answered = 0;
    for round in 0..300 {
        if killer.is_finished() {
            break;
        }
        let started = Instant::now();
        let outcome = within(follower.try_acquire(&format!("during-{round}"), long())).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a call during the outage took {:?}",
            started.elapsed()
        );
        match outcome {
            Ok(Some(guard)) => {
                answered += 1;
                drop(guard);
            }
            Ok(None) => panic!("nobody else holds `during-{round}`"),
            Err(LockError::Connection { .. }) => errors += 1,
            Err(other) => panic!("an untyped failure during the outage: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (topology, new) = killer.join().expect("the primary was killed and replaced");
    assert_ne!(old, new);
    assert!(
        errors > 0,
        "no call failed while the primary was down ({answered} answered)"
    );

    let guard = until_some(FOLLOW, "the first lock after the failover", || {
        follower.try_acquire("after", long())
    })
    .await;
    assert_eq!(
        lock_value(topology.primary(), "after").as_str(),
        Some(guard.token()),
        "the same manager, not rebuilt, locks on the promoted replica"
    );
    within(guard.release())
        .await
        .expect("release on the new primary");

    // Waiting works on the new primary: the waiter subscribes to the
    // release there, and the release hands it the lock.
    let other = following_manager(&topology).await;
    let held = other.acquire("handoff", long()).await.expect("free lock");
    let waiter = tokio::spawn(async move {
        follower
            .acquire("handoff", long().wait(Duration::from_secs(10)))
            .await
    });
    assert_subscribed_soon(topology.primary(), "lock:handoff").await;
    within(held.release()).await.expect("the holder releases");
    let handed = within(waiter)
        .await
        .expect("the waiter did not panic")
        .expect("the waiter gets the released lock");
    within(handed.release()).await.expect("the waiter releases");
}

/// A primary that turns replica under the manager while keeping its
/// connection (an operator's `REPLICAOF`, or a demotion that does not
/// disconnect clients) refuses writes with `READONLY`: the caller gets a
/// retryable `Connection` error naming the cause, never a server error, and
/// the watchdog retries instead of reporting the lease lost, so a holder
/// keeps its lease once the node is primary again within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_reply_of_a_demoted_primary_is_a_retryable_connection_error() {
    let topology = RedisSentinel::start();
    let manager = manager(&topology).await;
    let held = within(manager.acquire("held", LockOptions::new().ttl(Duration::from_secs(6))))
        .await
        .expect("free lock");
    let primary = topology.primary();
    let nowhere = ExtraPort::reserve();
    primary
        .command(&["REPLICAOF", "127.0.0.1", &nowhere.port().to_string()])
        .expect("REPLICAOF");
    let refused = within(manager.try_acquire("k", long())).await;
    // Spans the holder's first renewal (2 s into its 6 s lease).
    tokio::time::sleep(Duration::from_secs(3)).await;
    primary
        .command(&["REPLICAOF", "NO", "ONE"])
        .expect("REPLICAOF NO ONE");

    match refused {
        Err(err @ LockError::Connection { .. }) => {
            assert!(err.to_string().contains("no longer the primary"), "{err}");
            assert!(err.is_retryable());
        }
        other => panic!("expected a Connection error, got {other:?}"),
    }
    // Past the ttl: only renewals granted after the refusals keep it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !held.is_lost(),
        "a READONLY renewal counted as a lost lease"
    );
    assert_eq!(lock_value(primary, "held").as_str(), Some(held.token()));
    let guard = until_some(FOLLOW, "a lock once the node is primary again", || {
        manager.try_acquire("k", long())
    })
    .await;
    within(guard.release()).await.expect("release");
    within(held.release())
        .await
        .expect("the holder kept its lease");
}

/// Cuts every replica off from the primary and keeps it off (a `masterauth`
/// the primary rejects, so each reconnection fails its handshake): from now
/// on the primary's writes reach no replica, while Sentinel still sees the
/// replicas as healthy and may promote one. A congested or broken
/// replication link does the same in production.
fn cut_replication(topology: &RedisSentinel) {
    for replica in topology.replicas() {
        replica
            .command(&["CONFIG", "SET", "masterauth", "not-the-password"])
            .expect("CONFIG SET masterauth");
        replica
            .command(&["CLIENT", "KILL", "TYPE", "master"])
            .expect("CLIENT KILL TYPE master");
    }
    let primary = topology.primary();
    assert!(
        poll_until(NO_HANG, || primary
            .command(&["INFO", "replication"])
            .ok()
            .and_then(|info| info
                .as_str()
                .map(|info| info.contains("connected_slaves:0")))
            .unwrap_or(false)),
        "the primary still has replicas"
    );
}

/// The pitfall: the primary grants the lock, crashes before the grant
/// reaches a replica, Sentinel promotes that replica, and it would grant the
/// same lock again. Its lock-delay (the marker of the identity it granted
/// under never reached it, and it was promoted) refuses every grant, also to
/// a manager started after the promotion, until the first lease has ended;
/// a waiter gets the lock then.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_a_replica_that_missed_the_grant_grants_no_lock_until_the_first_lease_ended() {
    let mut topology = RedisSentinel::start();
    let first = manager(&topology).await;
    cut_replication(&topology);
    // A short lease, so that the lock-delay (the longest ttl asked for)
    // is short too.
    let unrenewed = || LockOptions::new().ttl(SHORT_TTL).renew(false);
    let guard = within(first.acquire("order-42", unrenewed()))
        .await
        .expect("the primary grants");
    let first_lease_ends = guard.valid_until().expect("held");

    blocking(|| topology.kill_primary());
    assert_eq!(
        lock_value(topology.primary(), "order-42"),
        RespValue::Nil,
        "the grant never reached the promoted replica"
    );
    let second = manager(&topology).await;
    let rival = until_answered(FOLLOW, "the second manager", || {
        second.try_acquire("order-42", unrenewed())
    })
    .await;
    assert!(
        rival.is_none() || !lease_still_valid(&guard),
        "the promoted replica granted the lock again while the first lease is valid"
    );
    assert!(rival.is_none(), "granted during the lock-delay");

    let wait = FOLLOW;
    let waiter = tokio::time::timeout(
        wait + NO_HANG,
        second.acquire("order-42", unrenewed().wait(wait)),
    )
    .await
    .expect("the waiter returns within its wait")
    .expect("the waiter gets the lock once the lock-delay ended");
    assert!(
        Instant::now() >= first_lease_ends,
        "the waiter got the lock while the first lease was valid"
    );
    assert!(lease_still_valid(&waiter));
}

/// The same crash seen by one manager that keeps no lock-delay: a second
/// task's attempt reaches the promoted replica, which grants the lock again,
/// but the manager gives it back while its first task's lease is valid; the
/// second task waiting for the lock gets it once the first task released it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_a_replica_that_missed_the_grant_gives_a_second_task_of_the_manager_no_lock() {
    let mut topology = RedisSentinel::start();
    let locks = following_manager(&topology).await;
    cut_replication(&topology);
    let unrenewed = || long().renew(false);
    let first = within(locks.acquire("order-42", unrenewed()))
        .await
        .expect("the primary grants");

    blocking(|| topology.kill_primary());
    let second = until_answered(FOLLOW, "the second task", || {
        locks.try_acquire("order-42", unrenewed())
    })
    .await;
    assert!(
        second.is_none(),
        "two tasks of one manager hold the lock at once"
    );
    assert!(lease_still_valid(&first), "the first task's lease is valid");

    let mut waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire("order-42", unrenewed().wait(FOLLOW)).await }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiter)
            .await
            .is_err(),
        "a waiting task got the lock while the first task holds it"
    );
    // The promoted replica never had the first lease: not ours there.
    let _ = first.release().await;
    let waiter = within(waiter)
        .await
        .expect("the waiting task")
        .expect("the waiting task gets the lock once the first released it");
    assert!(lease_still_valid(&waiter));
}

/// Calls `attempt` every 100 ms, for at most `limit`, until it answers
/// anything but `LockError::Connection` (the error of a failover under way).
async fn until_answered<T, F, Fut>(limit: Duration, what: &str, mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    let deadline = Instant::now() + limit;
    for _ in 0..limit.as_millis() / 100 + 1 {
        match within(attempt()).await {
            Ok(answer) => return answer,
            Err(LockError::Connection { .. }) if Instant::now() < deadline => {}
            Err(other) => panic!("{what}: unexpected error during failover: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: no answer within {limit:?}");
}

/// The same crash with replicated acquire: no replica acknowledged, so the
/// grant was refused and released, and the promoted replica's holder is the
/// only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_refuses_a_lock_no_replica_received() {
    let mut topology = RedisSentinel::start();
    let first = manager(&topology).await;
    cut_replication(&topology);
    let refused = within(first.acquire(
        "order-42",
        long().min_replicas(1, Duration::from_millis(200)),
    ))
    .await;
    assert_not_replicated(refused, "order-42");
    assert_eq!(
        lock_value(topology.primary(), "order-42"),
        RespValue::Nil,
        "released again"
    );

    blocking(|| topology.kill_primary());
    // No lock-delay needed: no grant was kept that the replica could lack.
    let second = following_manager(&topology).await;
    let only = within(second.try_acquire("order-42", long()))
        .await
        .expect("the promoted replica answers");
    assert!(only.is_some(), "the one and only holder");
}

/// A manager whose Sentinels fall silent once it is connected (each reached
/// through a proxy that is then blackholed): it hears no failover
/// announcement and cannot ask where the primary went, as when its network
/// to the Sentinels fails.
async fn deaf_manager(topology: &RedisSentinel) -> (LockManager, Vec<FaultProxy>) {
    let (locks, proxies) = manager_through(topology).await;
    for proxy in &proxies {
        proxy.blackhole();
    }
    (locks, proxies)
}

/// The other way a grant misses the new primary: a former primary that
/// Sentinel has replaced but not yet turned into a replica (it does so 8 to
/// 20 s later) still grants locks to a manager that did not hear of the
/// failover. The new primary was promoted, so it keeps its lock-delay and
/// does not grant them again while those grants may be held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plain_lock_granted_by_a_replaced_primary_is_not_granted_again_during_the_lock_delay() {
    let topology = RedisSentinel::start();
    let (stale, _silenced) = deaf_manager(&topology).await;
    let old_primary = topology.primary().addr();
    blocking(|| topology.failover());

    let first = within(stale.try_acquire("order-42", long()))
        .await
        .expect("the replaced primary still answers")
        .expect("and grants the lock");
    assert!(
        topology.replicas().iter().any(
            |node| node.addr() == old_primary && lock_value(node, "order-42") != RespValue::Nil
        ),
        "the grant came from the replaced primary"
    );
    let fresh = manager(&topology).await;
    let rival = within(fresh.try_acquire("order-42", long()))
        .await
        .expect("the new primary answers");

    assert!(
        rival.is_none(),
        "the new primary granted the lock again while the replaced primary's grant is valid"
    );
    assert!(lease_still_valid(&first));
}

/// The lease of the deposition test, and so its lock-delay: long enough
/// that a holder renewing every third of it learns of the deposition well
/// before a delay as long, counted from later, ends.
const DEPOSED_TTL: Duration = Duration::from_secs(12);

/// Issue 40: a replaced primary that is still up stops renewing as soon as
/// a manager learns of the failover. Sentinel cannot make the old primary a
/// replica here (its ACL refuses `SLAVEOF` and `REPLICAOF`, which Sentinel
/// sends to demote it: a deterministic stand-in for a reconfiguration that
/// is late or cannot reach it), so it stays a primary for the whole test.
/// A holder whose manager never hears of the failover renews there; a
/// second manager hears the announcement, follows it, and deposes the old
/// primary. The holder learns that it lost its lease while the new
/// primary's lock-delay still runs, and the old primary grants its manager
/// nothing more; without the deposition its renewals would go on succeeding
/// for as long as the old primary stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaced_primary_still_up_is_deposed_and_its_holders_learn_they_lost_the_lease() {
    deposed_primary_stops_renewing(Engine::Redis).await;
}

/// The same on Valkey 9.1, which has `SET … IFEQ`: a native renewal would
/// bypass the deposition, so a Sentinel primary's leases are renewed by the
/// scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaced_valkey_primary_still_up_is_deposed_though_it_renews_natively_elsewhere() {
    deposed_primary_stops_renewing(Engine::Valkey).await;
}

/// The deposition test on a set-up of `engine`.
async fn deposed_primary_stops_renewing(engine: Engine) {
    let topology = RedisSentinel::start_on(engine);
    let old_primary = topology.primary().addr();
    topology
        .primary()
        .command(&["ACL", "SETUSER", "default", "-slaveof", "-replicaof"])
        .expect("ACL SETUSER");
    let (holder, silenced) = built_through(&topology, LockManager::builder()).await;
    for proxy in &silenced {
        proxy.blackhole();
    }
    let learner = manager(&topology).await;
    let lease = || LockOptions::new().ttl(DEPOSED_TTL);
    let guard = within(holder.acquire("order-42", lease()))
        .await
        .expect("the primary grants");
    // The learner's lock-delay is the longest ttl it asked for: this one.
    within(learner.acquire("unrelated", lease()))
        .await
        .expect("free")
        .release()
        .await
        .expect("released");

    blocking(|| topology.failover());
    let deadline = Instant::now() + FOLLOW;
    let mut in_delay = false;
    for _ in 0..FOLLOW.as_millis() / 100 {
        match within(learner.acquire("order-42", lease())).await {
            Err(LockError::Busy {
                lock_delay: Some(_),
                ..
            }) => in_delay = true,
            Err(LockError::Busy { .. } | LockError::Connection { .. }) => {}
            Ok(_) => panic!("the learner was granted the held lock"),
            Err(other) => panic!("unexpected error during the failover: {other:?}"),
        }
        if in_delay || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        in_delay,
        "the learner never reached the new primary in its lock-delay"
    );

    tokio::time::timeout(DEPOSED_TTL, guard.lost())
        .await
        .expect("the holder learns that it lost its lease on the replaced primary");
    let state = within(learner.lock_delay_state())
        .await
        .expect("the new primary answers");
    assert!(
        matches!(state, Some(LockDelayState::Running { .. })),
        "the holder learned it lost its lease only after the new primary's lock-delay ended: {state:?}"
    );
    // Nor does the deposed primary grant: its refusal reads as a node that
    // is no longer the primary.
    let stale = within(holder.try_acquire("another", lease())).await;
    assert!(
        matches!(&stale, Err(LockError::Connection { detail, .. }) if detail.contains("DEPOSED")),
        "the deposed primary still grants: {stale:?}"
    );
    let old = topology
        .replicas()
        .into_iter()
        .find(|node| node.addr() == old_primary)
        .expect("the old primary is listed");
    let info = old.command(&["INFO", "replication"]).expect("INFO");
    assert!(
        info.as_str()
            .is_some_and(|info| info.contains("role:master")),
        "the old primary was demoted after all, so the test proves nothing: {info:?}"
    );
}

/// The deposition spares the primary itself: when the Sentinels come to
/// name the same primary under another address (here a fault proxy in
/// front of it, as a changed announce address would), a manager follows
/// it there, and its deposition of the "replaced" address finds the run_id
/// of the primary it now follows, so it deposes nothing: the primary goes
/// on granting. Deposing it would stop every grant for the lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn primary_the_sentinels_name_under_another_address_is_followed_not_deposed() {
    let topology = RedisSentinel::start();
    let locks = manager(&topology).await;
    within(locks.acquire("warm", long()))
        .await
        .expect("the primary grants")
        .release()
        .await
        .expect("released");
    let primary = topology.primary();
    let proxy = FaultProxy::start(primary.addr());
    let (service, port) = (topology.service_name(), proxy.port().to_string());
    for sentinel in topology.sentinels() {
        sentinel
            .command(&["SENTINEL", "REMOVE", service])
            .expect("SENTINEL REMOVE");
        sentinel
            .command(&["SENTINEL", "MONITOR", service, "127.0.0.1", &port, "2"])
            .expect("SENTINEL MONITOR");
    }
    // The manager's connection breaks; its next calls fail, and it asks the
    // Sentinels where the primary is.
    primary
        .command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        .expect("CLIENT KILL");
    let proxied = proxy.addr().to_string();
    let followed = poll_async(FOLLOW, || async {
        let _ = within(locks.try_acquire("probe", long())).await;
        let report = within(locks.check()).await;
        report.is_ok_and(|report| report.nodes.first().is_some_and(|node| node.address == proxied))
    })
    .await;
    assert!(followed, "the manager never followed the primary to {proxied}");
    // The deposition runs right after the switch, within the 500 ms response
    // timeout: the primary must not be deposed at any point after it.
    let deposed = poll_async(Duration::from_secs(2), || async {
        matches!(
            within(locks.lock_delay_state()).await,
            Ok(Some(LockDelayState::Deposed { .. }))
        )
    })
    .await;
    assert!(!deposed, "the primary was deposed in its own place");
    let guard = within(locks.try_acquire("after", long()))
        .await
        .expect("the primary answers");
    assert!(guard.is_some(), "the primary followed under its new address grants");
}

/// The same failover with replicated acquire: the replaced primary has no
/// replica left to acknowledge the grant, so it is refused, and the new
/// primary's holder is the only one. Once its Sentinels answer again, the
/// refused manager follows the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_is_refused_by_a_replaced_primary() {
    let topology = RedisSentinel::start();
    let (stale, silenced) = deaf_manager(&topology).await;
    blocking(|| topology.failover());

    let refused = within(stale.acquire(
        "order-42",
        long().min_replicas(1, Duration::from_millis(200)),
    ))
    .await;
    assert_not_replicated(refused, "order-42");
    for proxy in &silenced {
        proxy.restore();
    }
    // A lock the manager takes lands on the new primary once it followed
    // (one taken before is dropped, released or left to expire on the old
    // primary); each refusal makes it ask the Sentinels again.
    let on_new_primary =
        |guard: &LockGuard| lock_value(topology.primary(), "moved").as_str() == Some(guard.token());
    let moved = until_some(
        FOLLOW,
        "the refused manager follows the failover",
        || async {
            let guard = stale
                .try_acquire("moved", long().min_replicas(1, Duration::from_millis(200)))
                .await
                .or_else(|err| match err {
                    LockError::NotReplicated { .. } => Ok(None),
                    err => Err(err),
                })?;
            Ok(guard.filter(on_new_primary))
        },
    )
    .await;
    within(moved.release())
        .await
        .expect("release on the new primary");
    let fresh = following_manager(&topology).await;
    let only =
        within(fresh.try_acquire("order-42", long().min_replicas(1, Duration::from_secs(2))))
            .await
            .expect("the new primary replicates to the remaining replica");
    assert!(only.is_some(), "the one and only holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reachable_sentinel_fails_with_a_connection_error_promptly() {
    let refusing = ExtraPort::reserve();
    let silent_node = RedisServer::start();
    let silent = FaultProxy::start(silent_node.addr());
    silent.blackhole();
    let urls = [
        format!("redis://127.0.0.1:{}", refusing.port()),
        silent.url(),
    ];
    let started = Instant::now();
    let result = within(
        LockManager::builder()
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .sentinel("testkit-primary", &urls),
    )
    .await;
    match result {
        Err(LockError::Connection {
            detail: message, ..
        }) => assert!(
            message.contains("testkit-primary"),
            "the error names the service: {message}"
        ),
        other => panic!("expected Connection, got {other:?}"),
    }
    // The README's bound, twice the connect plus response timeouts (2 s),
    // which the runtime enforces with a timer; 1 s more for a busy machine.
    let promised = (TIMEOUT + TIMEOUT) * 2;
    let took = started.elapsed();
    println!("no reachable Sentinel: failed after {took:?}");
    assert!(
        took < promised + Duration::from_secs(1),
        "took {took:?} with 500 ms timeouts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_service_name_fails_with_an_error_naming_it() {
    let topology = shared_sentinel();
    let result = within(LockManager::sentinel(
        "no-such-service",
        topology.sentinel_urls(),
    ))
    .await;
    match result {
        Err(err @ LockError::UnknownService { .. }) => {
            assert!(err.to_string().contains("`no-such-service`"), "{err}");
            assert!(!err.is_retryable());
        }
        other => panic!("expected UnknownService, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_sentinel_list_is_rejected() {
    let result = LockManager::sentinel("testkit-primary", Vec::<String>::new()).await;
    assert!(
        matches!(result, Err(LockError::InvalidOptions(_))),
        "{result:?}"
    );
}

/// Sentinels that ask for a password (here the `default` user's, set with
/// `ACL SETUSER` once the topology is up): without credentials, or with
/// wrong ones, `sentinel` fails with `Auth` naming the Sentinel and
/// `sentinel_credentials`; a wrong password for the primary (the first URL's)
/// fails with `Auth` naming the primary; with the right credentials, the
/// manager finds the primary and locks on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_asking_for_a_password_are_reached_with_sentinel_credentials() {
    const PASSWORD: &str = "sentinel-secret";
    let topology = RedisSentinel::start();
    // Found before the Sentinels ask for a password: the testkit's own
    // queries send none.
    let primary = topology.primary();
    topology.require_password(PASSWORD);
    let builder = || {
        LockManager::builder()
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
    };

    for (credentials, what) in [
        (None, "no credentials"),
        (Some("wrong"), "a wrong password"),
    ] {
        let mut refused = builder();
        if let Some(password) = credentials {
            refused = refused.sentinel_credentials(None, password);
        }
        let result =
            within(refused.sentinel(topology.service_name(), topology.sentinel_urls())).await;
        match result {
            Err(err @ LockError::Auth { .. }) => {
                let message = err.to_string();
                assert!(message.contains("sentinel_credentials"), "{what}: {err}");
                assert!(message.contains("Sentinel 127.0.0.1:"), "{what}: {err}");
                assert!(
                    !message.contains("wrong"),
                    "{what}: the password shows: {err}"
                );
                assert!(!err.is_retryable(), "{what}");
            }
            other => panic!("{what}: expected Auth, got {other:?}"),
        }
    }

    // The primary's own credentials are the first URL's: a wrong password
    // there is refused as the primary's, not the Sentinels'.
    primary.set_acl_user("svc", PASSWORD, &["+@all", "~*", "&*"]);
    let mut urls = topology.sentinel_urls();
    urls[0] = urls[0].replacen("redis://", "redis://svc:wrong@", 1);
    let result = within(
        builder()
            .sentinel_credentials(Some("default"), PASSWORD)
            .sentinel(topology.service_name(), &urls),
    )
    .await;
    match result {
        Err(err @ LockError::Auth { .. }) => {
            let message = err.to_string();
            assert!(message.contains("the primary 127.0.0.1:"), "{err}");
            assert!(!message.contains("wrong"), "the password shows: {err}");
        }
        other => panic!("the primary's wrong password: expected Auth, got {other:?}"),
    }

    let locks = within(
        builder()
            .sentinel_credentials(Some("default"), PASSWORD)
            .sentinel(topology.service_name(), topology.sentinel_urls()),
    )
    .await
    .expect("the Sentinels answer with the password");
    let guard = within(locks.acquire("sentinel:auth", long()))
        .await
        .unwrap();
    assert!(lock_value(primary, "sentinel:auth").as_str().is_some());
    guard.release().await.unwrap();
}

/// The ids of `sentinel`'s clients subscribed to a channel (`CLIENT
/// LIST`): the managers' failover listeners. An id is never reused, so a
/// subscription opened again shows up under a new one.
fn subscriber_ids(sentinel: &RedisServer) -> Vec<u64> {
    let list = sentinel.command(&["CLIENT", "LIST"]).unwrap();
    let text = list.as_str().expect("CLIENT LIST is text");
    let mut ids: Vec<u64> = text
        .lines()
        .filter(|client| client.split(' ').any(|field| field == "sub=1"))
        .filter_map(|client| {
            let id = client
                .split(' ')
                .find_map(|field| field.strip_prefix("id="))?;
            id.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// A manager reaching `topology`'s Sentinels through one proxy each,
/// keeping no lock-delay: the tests that use it find where it locks by
/// taking a lock on the new primary at once.
async fn manager_through(topology: &RedisSentinel) -> (LockManager, Vec<FaultProxy>) {
    let builder = LockManager::builder().risk_two_holders_after_failover();
    built_through(topology, builder).await
}

/// A manager built by `builder` with the tests' timeouts, reaching
/// `topology`'s Sentinels through one proxy each.
async fn built_through(
    topology: &RedisSentinel,
    builder: LockManagerBuilder,
) -> (LockManager, Vec<FaultProxy>) {
    let proxies: Vec<FaultProxy> = topology
        .sentinels()
        .iter()
        .map(|sentinel| FaultProxy::start(sentinel.addr()))
        .collect();
    let locks = builder
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .sentinel(topology.service_name(), proxies.iter().map(FaultProxy::url))
        .await
        .unwrap_or_else(|err| panic!("cannot connect through the Sentinels: {err}"));
    (locks, proxies)
}

/// Fails over while the manager cannot hear its Sentinels (`fault` applied
/// to every proxy; restored `deaf_for` after the failover began), then
/// asserts that the manager locks on the new primary within
/// [`ANNOUNCED`] of the restore, while the old primary is still a primary:
/// so it was not a failed call on a demoted node that moved it, but the
/// catch-up once its subscription was back.
async fn missed_announcement_is_caught_up(fault: impl Fn(&FaultProxy), deaf_for: Duration) {
    let topology = RedisSentinel::start();
    let (locks, proxies) = manager_through(&topology).await;
    let old_primary = topology.primary();
    let old = old_primary.addr();
    for proxy in &proxies {
        fault(proxy);
    }
    let began = Instant::now();
    let new = blocking(|| topology.failover());
    assert_ne!(old, new);
    let promoted = topology.primary();
    tokio::time::sleep(deaf_for.saturating_sub(began.elapsed())).await;
    for proxy in &proxies {
        proxy.restore();
    }

    let deadline = Instant::now() + ANNOUNCED;
    let mut on_new_primary = false;
    for _ in 0..ANNOUNCED.as_millis() / 50 {
        if let Ok(Some(guard)) = within(locks.try_acquire("caught-up", long())).await {
            on_new_primary = lock_value(promoted, "caught-up").as_str() == Some(guard.token());
            within(guard.release()).await.ok();
        }
        if on_new_primary || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old_role = old_primary.command(&["ROLE"]).unwrap();
    let old_still_primary = matches!(&old_role, RespValue::Array(fields)
        if fields.first().and_then(RespValue::as_str) == Some("master"));
    assert!(
        on_new_primary,
        "the manager still locks on {old} {ANNOUNCED:?} after hearing its Sentinels again (failover to {new})"
    );
    assert!(
        old_still_primary,
        "{old} was demoted before the check ({old_role:?}): this run cannot tell a catch-up from a failed call"
    );
}

/// A manager cut off from its Sentinels (connections closed, new ones
/// refused) while a failover is announced subscribes again once they are
/// back, and asks for the primary at once, so the announcement it missed
/// does not leave it on the replaced primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_announced_while_cut_off_from_the_sentinels_is_caught_up() {
    missed_announcement_is_caught_up(FaultProxy::cut, Duration::ZERO).await;
}

/// A manager whose subscriptions went silent (bytes vanish, no error, no
/// end of stream) while a failover was announced subscribes again and
/// catches up with the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_announced_on_a_silent_subscription_is_caught_up() {
    missed_announcement_is_caught_up(FaultProxy::blackhole, Duration::from_secs(3)).await;
}

/// Each Sentinel's subscribed clients (see [`subscriber_ids`]).
fn every_subscriber_id(topology: &RedisSentinel) -> Vec<Vec<u64>> {
    topology
        .sentinels()
        .into_iter()
        .map(subscriber_ids)
        .collect()
}

/// A manager through proxies (see [`manager_through`]) once it has
/// subscribed on every Sentinel, with the ids of those subscriptions.
async fn subscribed_manager(
    topology: &RedisSentinel,
) -> (LockManager, Vec<FaultProxy>, Vec<Vec<u64>>) {
    let (locks, proxies) = manager_through(topology).await;
    let subscribed = poll_async(NO_HANG, || async {
        every_subscriber_id(topology)
            .iter()
            .all(|ids| ids.len() == 1)
    })
    .await;
    assert!(
        subscribed,
        "the manager did not subscribe on every Sentinel"
    );
    (locks, proxies, every_subscriber_id(topology))
}

/// A subscription whose Sentinel stops answering within twice the connect
/// timeout (here every byte is delayed 3 s, so the connection stays open
/// and nothing fails) is noticed by its unanswered `PING` and opened again:
/// a dead connection that no error reports cannot keep a manager deaf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_heartbeat_opens_the_subscription_again() {
    let topology = RedisSentinel::start();
    let (_locks, proxies, before) = subscribed_manager(&topology).await;
    for proxy in &proxies {
        proxy.delay(Duration::from_secs(3));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for proxy in &proxies {
        proxy.restore();
    }
    let renewed = poll_async(NO_HANG, || async {
        every_subscriber_id(&topology)
            .iter()
            .zip(&before)
            .all(|(now, old)| now.len() == 1 && now != old)
    })
    .await;
    assert!(
        renewed,
        "the subscriptions were not opened again: {before:?} then {:?}",
        every_subscriber_id(&topology)
    );
}

/// A healthy subscription is not opened again: over several heartbeats
/// each Sentinel keeps the same one subscribed client, the manager's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_subscriptions_are_kept_across_heartbeats() {
    let topology = RedisSentinel::start();
    let (_locks, _proxies, before) = subscribed_manager(&topology).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        before,
        every_subscriber_id(&topology),
        "subscriptions to the Sentinels were opened again"
    );
}

/// Issue 25: `(connect + response) * 2` and `connect * 2` overflowed and
/// panicked the Sentinel builder with the longest timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_too_long_to_represent_saturate_on_sentinel_and_cluster() {
    let forever = || {
        LockManager::builder()
            .connect_timeout(Duration::MAX)
            .response_timeout(Duration::MAX)
    };
    let half_of_forever = || {
        LockManager::builder()
            .connect_timeout(Duration::from_secs(u64::MAX / 2))
            .response_timeout(Duration::from_secs(u64::MAX / 2))
    };
    let topology = support::shared_sentinel();
    let cluster = support::shared_cluster();
    for builder in [forever(), half_of_forever()] {
        let sentinel = builder
            .clone()
            .namespace(support::sentinel_namespace())
            .sentinel(topology.service_name(), topology.sentinel_urls())
            .await
            .expect("connect through the Sentinels with unbounded timeouts");
        let guard = sentinel
            .acquire("k", support::long().wait(Duration::MAX))
            .await
            .expect("a free lock");
        guard.release().await.expect("release");
        let clustered = builder
            .namespace(support::cluster_namespace())
            .cluster(cluster.seed_urls())
            .await
            .expect("connect to the cluster with unbounded timeouts");
        let guard = clustered
            .acquire("k", support::long().wait(Duration::MAX))
            .await
            .expect("a free lock");
        guard.release().await.expect("release");
    }
}

/// How soon a release on the new primary must reach a waiter after a
/// failover: a release message and one attempt (200 ms on an idle machine;
/// the bound leaves room for a loaded one). Before waiters watched again,
/// a reader and a permit waiter slept until the holder's 20 s lease ended.
const WOKEN: Duration = Duration::from_secs(1);

/// Waits until `locks` takes its locks on `primary`: it has followed the
/// failover (its waiters then watch there too).
async fn until_locking_on(locks: &LockManager, primary: &RedisServer) {
    let on_primary = poll_async(FOLLOW, || async {
        let Ok(Some(guard)) = within(locks.try_acquire("probe", long())).await else {
            return false;
        };
        let here = lock_value(primary, "probe").as_str() == Some(guard.token());
        within(guard.release()).await.ok();
        here
    })
    .await;
    assert!(on_primary, "the manager never followed the failover");
}

/// After a failover the waiters of every kind (a permit, a read of a
/// write-locked key, a plain lock) watch the new primary: its releases wake
/// them at once, not when the holder's lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_every_kind_hear_releases_on_the_new_primary_after_a_failover() {
    let topology = RedisSentinel::start();
    let holder = manager(&topology).await;
    let other = manager(&topology).await;
    let waiting = support::EveryKindWaiting::start(&holder, &other, ["sem", "doc", "plain"]).await;
    let channels = ["lock-sem:sem", "lock-rw:doc", "lock:plain"];
    for channel in channels {
        assert_subscribed_soon(topology.primary(), channel).await;
    }

    blocking(|| topology.failover());
    let promoted = topology.primary();
    until_locking_on(&holder, promoted).await;
    until_locking_on(&other, promoted).await;
    for channel in channels {
        assert_subscribed_soon(promoted, channel).await;
    }
    waiting.release_and_assert_woken_within(WOKEN).await;
}
