//! Failover of a single master to a replica, against real `redis-server`
//! processes: the double grant that asynchronous replication allows, and
//! replicated acquire (`LockOptions::min_replicas`) refusing it.
//!
//! Each test starts its own servers on free 127.0.0.1 ports. Every loop is
//! bounded in count and time.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use distributed_lock::{LockError, LockManager, LockOptions};
use distributed_lock_testkit::{poll_until, RedisServer, RespValue};

/// A TCP relay between a replica and its master. Once [`stall`](Self::stall)ed
/// it drops the master's replication stream: the replica stays connected and
/// the master still counts it, but it receives nothing more, as over a
/// congested link.
struct Relay {
    port: u16,
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on a free loopback port and relays every connection to `master`.
    fn to(master: &RedisServer) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = master.addr();
        let stalled = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (pump_stalled, pump_stop) = (Arc::clone(&stalled), Arc::clone(&stop));
        let accept = std::thread::spawn(move || {
            while !pump_stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((replica, _)) => {
                        let master = TcpStream::connect(target).expect("relay to the master");
                        replica.set_nonblocking(false).unwrap();
                        let (to_master, from_master) =
                            (replica.try_clone().unwrap(), master.try_clone().unwrap());
                        let stop = Arc::clone(&pump_stop);
                        std::thread::spawn(move || pump(replica, master, None, &stop));
                        let (stalled, stop) = (Arc::clone(&pump_stalled), Arc::clone(&pump_stop));
                        std::thread::spawn(move || {
                            pump(from_master, to_master, Some(&stalled), &stop)
                        });
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(err) => panic!("relay accept: {err}"),
                }
            }
        });
        Relay {
            port,
            stalled,
            stop,
            accept: Some(accept),
        }
    }

    /// From now on, nothing the master sends reaches the replica.
    fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Copies `from` to `to` until either side closes or `stop` is set; while
/// `stalled` is set, what is read is dropped.
fn pump(mut from: TcpStream, mut to: TcpStream, stalled: Option<&AtomicBool>, stop: &AtomicBool) {
    from.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buffer = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                if stalled.is_some_and(|stalled| stalled.load(Ordering::SeqCst)) {
                    continue;
                }
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

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

/// A master and a replica that replicates through a [`Relay`], in sync.
fn master_and_relayed_replica() -> (RedisServer, RedisServer, Relay) {
    let master = RedisServer::builder()
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .start();
    let replica = RedisServer::start();
    let relay = Relay::to(&master);
    replica
        .command(&["REPLICAOF", "127.0.0.1", &relay.port.to_string()])
        .expect("REPLICAOF the relay");
    assert!(
        poll_until(Duration::from_secs(10), || info_replication(&replica)
            .contains("master_link_status:up")),
        "replica in sync"
    );
    master.command(&["SET", "canary", "1"]).unwrap();
    assert!(
        poll_until(Duration::from_secs(5), || get(&replica, "canary").as_str()
            == Some("1")),
        "replication flows through the relay"
    );
    (master, replica, relay)
}

fn long_lease() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(10))
}

/// The pitfall: the master grants the lock, dies before the grant reaches
/// the replica, the replica is promoted and grants the same lock again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_to_a_lagging_replica_grants_a_plain_lock_twice() {
    let (mut master, replica, relay) = master_and_relayed_replica();
    relay.stall();
    let first = LockManager::connect(&master.url()).await.unwrap();
    let guard = first
        .acquire("order-42", long_lease())
        .await
        .expect("master grants");

    master.kill();
    replica.promote();
    assert_eq!(
        get(&replica, "lock:order-42"),
        RespValue::Nil,
        "the grant never reached the replica"
    );
    let second = LockManager::connect(&replica.url()).await.unwrap();
    let rival = second.try_acquire("order-42", long_lease()).await.unwrap();

    assert!(
        rival.is_some(),
        "the promoted replica grants the lock again"
    );
    assert!(
        guard
            .valid_until()
            .is_some_and(|until| until > Instant::now()),
        "while the first holder's lease is still valid: two holders"
    );
}

/// The same failover, with replicated acquire: the first acquisition is
/// refused, so there is never a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_acquire_refuses_a_lock_the_replica_did_not_get() {
    let (mut master, replica, relay) = master_and_relayed_replica();
    relay.stall();
    let first = LockManager::connect(&master.url()).await.unwrap();
    let started = Instant::now();
    let refused = first
        .acquire(
            "order-42",
            long_lease().min_replicas(1, Duration::from_millis(200)),
        )
        .await;

    match refused {
        Err(LockError::NotReplicated {
            key,
            acknowledged: 0,
            required: 1,
        }) => assert_eq!(key, "order-42"),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        get(&master, "lock:order-42"),
        RespValue::Nil,
        "released again"
    );

    master.kill();
    replica.promote();
    let second = LockManager::connect(&replica.url()).await.unwrap();
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
    let manager = LockManager::connect(&master.url()).await.unwrap();
    let replicated = long_lease().min_replicas(1, Duration::from_secs(2));

    for round in 0..2 {
        let guard = manager
            .acquire("replicated", replicated.clone())
            .await
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(
            get(&replica, "lock:replicated").as_str(),
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
    let (master, _replica, relay) = master_and_relayed_replica();
    relay.stall();
    let manager = LockManager::connect(&master.url()).await.unwrap();
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
    assert_eq!(off.get_min_replicas(), None);
    let replicated = LockOptions::new()
        .ttl(ttl)
        .min_replicas(2, Duration::from_millis(100));
    assert_eq!(
        replicated.get_min_replicas(),
        Some((2, Duration::from_millis(100)))
    );
    let guard = manager
        .acquire("k", replicated)
        .await
        .expect("no replicas in memory: ignored");
    guard.release().await.unwrap();
}
