//! Failover of a single master to a replica, against real `redis-server`
//! processes: the double grant that asynchronous replication allows, and
//! replicated acquire (`LockOptions::min_replicas`) refusing it.
//!
//! Each test starts its own servers on free 127.0.0.1 ports. Every loop is
//! bounded in count and time.

use crate::support;

use std::time::{Duration, Instant};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::{poll_until, FaultProxy, RedisServer, RespValue};
use support::{assert_not_replicated, connect, lock_value};

fn info_replication(server: &RedisServer) -> String {
    server
        .command(&["INFO", "replication"])
        .ok()
        .and_then(|reply| reply.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn get(server: &RedisServer, key: &str) -> RespValue {
    server.command(&["GET", key]).expect("GET")
}

/// A master and a replica that replicates through a [`FaultProxy`], in sync.
/// Once the proxy is blackholed the replica receives nothing more and
/// acknowledges nothing, yet stays connected, so the master still counts it,
/// as over a congested link.
pub(crate) fn master_and_proxied_replica() -> (RedisServer, RedisServer, FaultProxy) {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    let link = FaultProxy::start(master.addr());
    replica
        .command(&["REPLICAOF", "127.0.0.1", &link.port().to_string()])
        .expect("REPLICAOF the proxy");
    assert!(
        poll_until(Duration::from_secs(10), || info_replication(&replica)
            .contains("master_link_status:up")),
        "replica in sync"
    );
    master.command(&["SET", "canary", "1"]).unwrap();
    assert!(
        poll_until(Duration::from_secs(5), || get(&replica, "canary").as_str()
            == Some("1")),
        "replication flows through the proxy"
    );
    (master, replica, link)
}

fn long_lease() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(10))
}

/// A lease short enough that waiting out a lock-delay as long (the longest
/// ttl asked for) keeps a test quick.
fn short_lease() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(3))
}

/// The pitfall: the master grants the lock, dies before the grant reaches
/// the replica, the replica is promoted and would grant the same lock again.
/// Promoted, it keeps a lock-delay as long as the lease (the marker of the
/// identity the master granted under never reached it): the lock is not
/// granted again while the first lease may be valid, and a waiter gets it
/// once the delay is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_a_lagging_replica_grants_no_lock_while_the_first_lease_may_be_valid() {
    let (mut master, replica, link) = master_and_proxied_replica();
    link.blackhole();
    let first = connect(&master.url()).await;
    let guard = first
        .acquire("order-42", short_lease().renew(false))
        .await
        .expect("master grants");
    let first_lease_ends = guard.valid_until().expect("held");

    master.kill();
    replica.promote();
    assert_eq!(
        lock_value(&replica, "order-42"),
        RespValue::Nil,
        "the grant never reached the replica"
    );
    let second = connect(&replica.url()).await;
    let rival = second.try_acquire("order-42", short_lease()).await.unwrap();
    assert!(
        rival.is_none(),
        "the promoted replica granted the lock again during its lock-delay"
    );

    let wait = short_lease().wait(Duration::from_secs(60));
    let waiter = tokio::time::timeout(Duration::from_secs(70), second.acquire("order-42", wait))
        .await
        .expect("the waiter returns within its wait")
        .expect("the waiter gets the lock once the lock-delay is over");
    assert!(
        Instant::now() >= first_lease_ends,
        "the waiter got the lock while the first lease was valid"
    );
    assert!(!waiter.is_lost());
}

/// The same failover, with replicated acquire: the first acquisition is
/// refused, so there is never a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_refuses_a_lock_the_replica_did_not_get() {
    let (mut master, replica, link) = master_and_proxied_replica();
    link.blackhole();
    let first = connect(&master.url()).await;
    let started = Instant::now();
    let refused = first
        .acquire(
            "order-42",
            long_lease().min_replicas(1, Duration::from_millis(200)),
        )
        .await;

    assert_not_replicated(refused, "order-42");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        lock_value(&master, "order-42"),
        RespValue::Nil,
        "released again"
    );

    master.kill();
    replica.promote();
    // No lock-delay needed: no grant was kept that the replica could lack.
    let second = LockManager::builder()
        .risk_two_holders_after_failover()
        .connect(&replica.url())
        .await
        .expect("connect to the promoted replica");
    let only = second.try_acquire("order-42", long_lease()).await.unwrap();
    assert!(only.is_some(), "the one and only holder");
}

/// With a healthy replica the acquisition succeeds, and the lock is on the
/// replica by the time it returns (no polling). The first attempt on a fresh
/// server, and the one after `SCRIPT FLUSH`, take the NOSCRIPT path.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_returns_once_the_replica_has_the_lock() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    replica.replica_of(&master);
    assert!(poll_until(Duration::from_secs(10), || info_replication(
        &replica
    )
    .contains("master_link_status:up")));
    let manager = connect(&master.url()).await;
    let replicated = long_lease().min_replicas(1, Duration::from_secs(2));

    for round in 0..2 {
        let guard = manager
            .acquire("replicated", replicated.clone())
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(
            lock_value(&replica, "replicated").as_str(),
            Some(guard.token()),
            "round {round}: on the replica when acquire returns"
        );
        guard.release().await.unwrap();
        master.command(&["SCRIPT", "FLUSH"]).unwrap();
    }
    let loads = master.info_commandstats().get("script|load").copied();
    assert!(loads >= Some(2), "both rounds loaded the script: {loads:?}");
}

/// `WAIT` blocks its connection on the server; it must not hold up the
/// manager's other locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_does_not_hold_up_other_locks() {
    let (master, _replica, link) = master_and_proxied_replica();
    link.blackhole();
    let manager = connect(&master.url()).await;
    let slow_manager = manager.clone();
    let slow = tokio::spawn(async move {
        slow_manager
            .acquire(
                "waits-for-replica",
                long_lease().min_replicas(1, Duration::from_secs(2)),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let other = manager.acquire("other", long_lease()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "a plain lock waited for WAIT: {:?}",
        started.elapsed()
    );
    other.release().await.unwrap();
    assert!(
        !slow.is_finished(),
        "WAIT still waiting for the stalled replica"
    );
    let refused = slow.await.unwrap();
    assert!(
        matches!(refused, Err(LockError::NotReplicated { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn min_replicas_is_checked_and_ignored_in_memory() {
    let manager = LockManager::in_memory();
    let ttl = Duration::from_secs(1);
    let zero = LockOptions::new().ttl(ttl).min_replicas(1, Duration::ZERO);
    assert!(matches!(
        manager.acquire("k", zero).await,
        Err(LockError::InvalidOptions(message)) if message.contains("at least 1 ms")
    ));
    let too_long = LockOptions::new().ttl(ttl).min_replicas(1, ttl);
    assert!(matches!(
        manager.acquire("k", too_long).await,
        Err(LockError::InvalidOptions(message)) if message.contains("shorter than the ttl")
    ));
    let off = LockOptions::new().min_replicas(0, Duration::ZERO);
    assert_eq!(off.replicas(), None);
    let replicated = LockOptions::new()
        .ttl(ttl)
        .min_replicas(2, Duration::from_millis(100));
    assert_eq!(replicated.replicas(), Some((2, Duration::from_millis(100))));
    let guard = manager
        .acquire("k", replicated)
        .await
        .expect("no replicas in memory: ignored");
    guard.release().await.unwrap();
}
