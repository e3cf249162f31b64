//! The lock-delay on Redis Cluster, per promoted primary: a replica that
//! takes over without a grant its primary made (replication cut first)
//! grants nothing in that slot, to any manager, also one started after
//! the promotion, and for no kind, while the lost lease may be valid; a
//! waiter gets the lock once the delay is over, and a lease whose grant did
//! reach the replica is renewed there. `check()` shows the promoted primary
//! in its delay.
//!
//! Replication is cut by the primary's ACL: its `default` user may no longer
//! run `PSYNC` or `SYNC`, and its replica links are closed, so the replica
//! reconnects and is refused, deterministically, while the primary still
//! grants. Each test starts its own cluster (3 primaries, 1 replica each,
//! 1 s node timeout). Every loop is bounded in count and time.

use crate::support;

use std::time::Duration;

use leasehold::{LockDelayState, LockManager, LockOptions};
use leasehold_testkit::{poll_until, RedisCluster, RedisServer, RespValue};
use support::{
    answered, cluster_manager, granted_after_the_first_lease, poll_async, within, DELAY_WAIT,
    NO_HANG,
};

/// The namespace of every manager here.
const NAMESPACE: &str = "delay";

/// A lease nobody renews, short so that waiting out a lock-delay as long
/// (the longest ttl the waiting manager asked for) keeps a test quick.
fn unrenewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(3)).renew(false)
}

/// A renewed lease long enough that the failover falls well inside it.
fn renewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(15))
}

/// A user key `name:{tag}` whose slot `primary` serves, and its lock's name.
fn key_on(cluster: &RedisCluster, primary: &RedisServer, name: &str) -> (String, String) {
    (0..10_000)
        .map(|i| format!("{name}{i}"))
        .find(|tag| cluster.primary_for_key(tag).map(RedisServer::port) == Some(primary.port()))
        .map(|tag| {
            (
                format!("{name}:{{{tag}}}"),
                format!("{{{tag}}}{NAMESPACE}:{name}:{{{tag}}}"),
            )
        })
        .expect("some tag hashes to every primary")
}

/// Cuts replication from `primary` to its replicas: its `default` user loses
/// `PSYNC` and `SYNC`, and its replica links are closed. Returns once every
/// replica reports its link down.
fn cut_replication(cluster: &RedisCluster, primary: &RedisServer) {
    primary
        .command(&["ACL", "SETUSER", "default", "-psync", "-sync"])
        .expect("ACL SETUSER");
    primary
        .command(&["CLIENT", "KILL", "TYPE", "replica"])
        .expect("CLIENT KILL");
    for replica in cluster.replicas_of(primary) {
        let down = poll_until(NO_HANG, || {
            replica
                .command(&["INFO", "replication"])
                .ok()
                .and_then(|info| {
                    info.as_str()
                        .map(|text| text.contains("master_link_status:down"))
                })
                .unwrap_or(false)
        });
        assert!(down, "the replica's link to its primary is down");
    }
}

/// Runs a blocking testkit step (a failover waits for the nodes) without
/// stalling the runtime's other tasks.
fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// `name`'s value on `server`.
fn value(server: &RedisServer, name: &str) -> RespValue {
    server.command(&["GET", name]).expect("GET")
}

/// A manager on `cluster` in [`NAMESPACE`].
async fn manager(cluster: &RedisCluster) -> LockManager {
    cluster_manager(cluster, NAMESPACE).await
}

/// `CLUSTER FAILOVER FORCE` to a replica that missed a lock, a permit and a
/// write lease of one key (their grants, and its slot's node marker):
/// a manager started after the promotion is granted none of them, nor a
/// read lease, during the delay; a waiter gets the lock once it is over,
/// never while the first lease may be valid. A lease of another tag,
/// granted before the cut, reached the replica and is renewed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forced_failover_to_a_replica_that_missed_the_grants_grants_none_during_the_delay() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let primary = cluster.primaries()[0];
    let (kept_key, kept_name) = key_on(&cluster, primary, "kept");
    let on_the_replica = renewed().min_replicas(1, Duration::from_secs(5));
    let kept = within(holder.acquire(&kept_key, on_the_replica))
        .await
        .expect("granted once the replica has it");
    let replica = cluster.replicas_of(primary)[0];

    cut_replication(&cluster, primary);
    let (key, name) = key_on(&cluster, primary, "order");
    let lock = within(holder.acquire(&key, unrenewed()))
        .await
        .expect("free");
    let _permit = within(holder.semaphore(&key, 1).acquire(unrenewed()))
        .await
        .expect("free");
    let _write = within(holder.rwlock(&key).acquire_write(unrenewed()))
        .await
        .expect("free");
    let first_lease_ends = lock.valid_until().expect("held");

    blocking(|| cluster.force_failover(replica));
    let promoted = cluster.primary_for_key(&name).expect("a primary serves it");
    assert_eq!(promoted.port(), replica.port(), "the replica took over");
    assert_eq!(
        value(promoted, &name),
        RespValue::Nil,
        "the grant never reached the replica"
    );
    let kept_until = kept.valid_until().expect("held");

    let late = manager(&cluster).await;
    let rival = answered("lock", || late.try_acquire(&key, unrenewed())).await;
    assert!(
        rival.is_none(),
        "the promoted replica granted the lock during its lock-delay"
    );
    let rival = answered("permit", || async {
        late.semaphore(&key, 1).try_acquire(unrenewed()).await
    })
    .await;
    assert!(
        rival.is_none(),
        "the promoted replica granted a permit during its lock-delay"
    );
    let rival = answered("write", || async {
        late.rwlock(&key).try_acquire_write(unrenewed()).await
    })
    .await;
    assert!(
        rival.is_none(),
        "the promoted replica granted a write lease during its lock-delay"
    );
    let rival = answered("read", || async {
        late.rwlock(&key).try_acquire_read(unrenewed()).await
    })
    .await;
    assert!(
        rival.is_none(),
        "the promoted replica granted a read lease during its lock-delay"
    );
    let report = within(late.check())
        .await
        .expect("the cluster passes its check");
    let shown = report
        .nodes
        .iter()
        .find(|node| node.address == promoted.addr().to_string())
        .expect("the promoted replica is checked");
    assert!(
        matches!(shown.lock_delay, Some(LockDelayState::Running { .. })),
        "the check shows the promoted replica in its delay: {shown:?}"
    );

    let _waiter = granted_after_the_first_lease(
        first_lease_ends,
        late.acquire(&key, unrenewed().wait(DELAY_WAIT)),
    )
    .await;

    let renewed_there = poll_async(Duration::from_secs(30), || async {
        kept.valid_until().is_some_and(|until| until > kept_until)
    })
    .await;
    assert!(
        renewed_there,
        "the kept lease is renewed on the promoted replica"
    );
    assert!(!kept.is_lost());
    let rival = answered("kept", || late.try_acquire(&kept_key, unrenewed())).await;
    assert!(rival.is_none(), "the kept lease's lock went to another");
    assert_eq!(value(promoted, &kept_name).as_str(), Some(kept.token()));
}

/// A cluster primary killed after a grant its replica never got: the
/// cluster's own failure detection promotes the replica (1 s node timeout),
/// which grants the lock to nobody, neither a manager connected before nor
/// one started after the promotion, while the first lease may be valid; a
/// waiter gets it once the delay is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_primary_whose_replica_missed_the_grant_grants_no_lock_during_the_delay() {
    let mut cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let before = manager(&cluster).await;
    let primary = cluster.primaries()[0];
    let replica_port = cluster.replicas_of(primary)[0].port();
    cut_replication(&cluster, primary);
    let (key, name) = key_on(&cluster, primary, "job");
    let lock = within(holder.acquire(&key, unrenewed()))
        .await
        .expect("free");
    let first_lease_ends = lock.valid_until().expect("held");

    blocking(|| cluster.kill_primary(0));
    let promoted = cluster.primary_for_key(&name).expect("a primary serves it");
    assert_eq!(promoted.port(), replica_port, "the replica took over");
    assert_eq!(
        value(promoted, &name),
        RespValue::Nil,
        "the grant never reached the replica"
    );

    let rival = answered("before", || before.try_acquire(&key, unrenewed())).await;
    assert!(
        rival.is_none(),
        "the promoted replica granted the lock during its lock-delay"
    );
    let late = manager(&cluster).await;
    let rival = answered("late", || late.try_acquire(&key, unrenewed())).await;
    assert!(
        rival.is_none(),
        "the promoted replica granted the lock during its lock-delay"
    );

    let _waiter = granted_after_the_first_lease(
        first_lease_ends,
        late.acquire(&key, unrenewed().wait(DELAY_WAIT)),
    )
    .await;
}
