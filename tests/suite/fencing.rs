//! Fencing tokens protect storage from a holder whose lease ran out while it
//! was paused: the store keeps the highest token it has seen and rejects
//! writes that carry a lower one.

use crate::support;

use std::time::Duration;

use leasehold::{fencing_token, LockError, LockManager, LockOptions};
use leasehold_testkit::{poll_until, Engine, FaultProxy, RedisServer, RespValue};
use support::{
    acquire_after_restart, command_calls, connect, connect_without_lock_delay, fence_counter,
    lock_value, long, poll_async, redlock, FencedStore, Harness, StaleWrite, PROMPTLY,
};

/// Takes `key`, writes to `store` with its token, releases it; returns the token.
async fn write_under_lock(
    locks: &LockManager,
    key: &str,
    store: &FencedStore,
    value: &'static str,
) -> u64 {
    let guard = locks.acquire(key, LockOptions::new()).await.unwrap();
    let token = guard.fencing_token().await.unwrap();
    store
        .write(token, value)
        .unwrap_or_else(|stale| panic!("`{value}` rejected: {stale:?}"));
    guard.release().await.unwrap();
    token
}

/// The remaining time to live of `key`'s fencing counter on `server`, in ms
/// (-1: none, -2: no counter).
fn counter_pttl(server: &RedisServer, key: &str) -> i64 {
    match server.command(&["PTTL", &format!("lock-fence:{key}")]) {
        Ok(RespValue::Integer(ms)) => ms,
        other => panic!("PTTL replied {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_whose_lease_was_taken_over_cannot_write() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let store = FencedStore::default();

    let stale = a
        .acquire(
            "doc:1",
            LockOptions::new()
                .ttl(Duration::from_millis(200))
                .renew(false),
        )
        .await
        .unwrap();
    let stale_token = stale.fencing_token().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // a GC pause, a stalled VM…

    let fresh = b.acquire("doc:1", LockOptions::new()).await.unwrap();
    let fresh_token = fresh.fencing_token().await.unwrap();
    assert!(fresh_token > stale_token);
    store
        .write(fresh_token, "written by the new holder")
        .unwrap();

    assert!(
        stale.is_lost(),
        "the paused holder can know its lease is gone"
    );
    assert!(
        matches!(
            stale.fencing_token().await,
            Err(LockError::LeaseLost { .. })
        ),
        "a lost lease hands out no token, not even the one it had"
    );
    let rejected = store.write(stale_token, "written by the stale holder");
    assert_eq!(
        rejected,
        Err(StaleWrite {
            token: stale_token,
            highest: fresh_token
        })
    );
    assert_eq!(store.values(), vec!["written by the new holder"]);
    assert!(matches!(
        stale.release().await,
        Err(LockError::LeaseLost { .. })
    ));
    fresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_writes_with_the_token_of_its_own_lock_scope() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let store = FencedStore::default();
    for value in ["first", "second", "third"] {
        locks
            .with_lock("doc:2", LockOptions::new(), async {
                let token = fencing_token().await.expect("inside a lock scope");
                store.write(token, value)
            })
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(store.values(), vec!["first", "second", "third"]);
    assert!(
        matches!(fencing_token().await, Err(LockError::NotHeld { key: None })),
        "no token outside a lock scope"
    );
}

/// The token of a `fenced` lock was issued with it: the guard has it even
/// once Redis is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_lock_has_its_token_without_asking_redis_again() {
    let mut server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let before = locks.acquire("doc:f", LockOptions::new()).await.unwrap();
    let earlier = before.fencing_token().await.unwrap();
    before.release().await.unwrap();

    let guard = locks
        .acquire("doc:f", LockOptions::new().fenced(true))
        .await
        .unwrap();
    server.kill();

    let token = guard.fencing_token().await.expect("issued with the lock");
    assert!(token > earlier, "token {token} after {earlier}");
}

/// A `fenced` waiter gets its token as soon as the lock is handed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_waiter_has_its_token_when_it_gets_the_lock() {
    let mut server = RedisServer::start();
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let holder = a.acquire("doc:w", LockOptions::new()).await.unwrap();
    let holders_token = holder.fencing_token().await.unwrap();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new()
            .fenced(true)
            .wait(Duration::from_secs(10));
        b.acquire("doc:w", options).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .unwrap();
    server.kill();

    let token = guard.fencing_token().await.expect("issued with the lock");
    assert!(token > holders_token, "token {token} after {holders_token}");
}

/// On Redlock too: issued on a quorum with the acquisition, written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_lock_has_its_token_without_asking_the_nodes_again() {
    let mut nodes = RedisServer::start_independent(3);
    let locks = redlock(&nodes).await;
    let before = locks.acquire("doc:r", LockOptions::new()).await.unwrap();
    let earlier = before.fencing_token().await.unwrap();
    before.release().await.unwrap();

    let guard = locks
        .acquire("doc:r", LockOptions::new().fenced(true))
        .await
        .unwrap();
    for node in &mut nodes {
        node.kill();
    }

    let token = guard.fencing_token().await.expect("issued with the lock");
    assert!(token > earlier, "token {token} after {earlier}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_whose_lease_ended_before_it_asked_gets_no_token() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let stale = a
        .acquire(
            "doc:late",
            LockOptions::new()
                .ttl(Duration::from_millis(200))
                .renew(false),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let fresh = b.acquire("doc:late", LockOptions::new()).await.unwrap();
    fresh.fencing_token().await.unwrap();

    assert!(matches!(
        stale.fencing_token().await,
        Err(LockError::LeaseLost { .. })
    ));
    fresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_whose_key_was_taken_over_gets_no_token_though_its_clock_says_held() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let unaware = a.acquire("doc:taken", LockOptions::new()).await.unwrap();
    // An operator (or a failover) removes the key; another holder takes it.
    server.command(&["DEL", "lock:doc:taken"]).unwrap();
    let fresh = b.acquire("doc:taken", LockOptions::new()).await.unwrap();
    assert!(!unaware.is_lost(), "its own clock still says held");

    assert!(matches!(
        unaware.fencing_token().await,
        Err(LockError::LeaseLost { .. })
    ));
    assert!(unaware.is_lost(), "the refusal marks the lease lost");
    fresh.fencing_token().await.unwrap();
    fresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_accepts_new_holder_after_lock_server_restarts_empty() {
    let mut server = RedisServer::start();
    // It keeps the delayed-restart rule itself (below).
    let locks = connect_without_lock_delay(&server.url()).await;
    let store = FencedStore::default();
    let ttl = Duration::from_millis(200);

    let before = locks
        .acquire("doc:3", LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    store
        .write(before.fencing_token().await.unwrap(), "before the restart")
        .unwrap();
    before.release().await.unwrap();

    server.kill();
    tokio::time::sleep(ttl + Duration::from_millis(50)).await; // the delayed-restart rule
    server.restart_empty();

    let after = acquire_after_restart(&locks, "doc:3", LockOptions::new()).await;
    store
        .write(after.fencing_token().await.unwrap(), "after the restart")
        .expect("a restarted server without persistence still issues higher tokens");
    assert_eq!(
        store.values(),
        vec!["before the restart", "after the restart"]
    );
    after.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_restart_from_a_stale_snapshot() {
    let mut server = RedisServer::start();
    let locks = connect_without_lock_delay(&server.url()).await;
    let store = FencedStore::default();

    let t1 = write_under_lock(&locks, "doc:4", &store, "snapshotted").await;
    server.command(&["SAVE"]).unwrap();
    write_under_lock(&locks, "doc:4", &store, "after the snapshot").await;
    let t3 = write_under_lock(&locks, "doc:4", &store, "lost in the crash").await;

    server.restart_from_disk(); // kill -9, then load the old snapshot
    assert_eq!(
        fence_counter(&server, "doc:4"),
        Some(t1),
        "the snapshot brought back the old counter"
    );
    let after = acquire_after_restart(&locks, "doc:4", LockOptions::new()).await;
    assert!(
        after.fencing_token().await.unwrap() > t3,
        "{} after {t3}",
        after.fencing_token().await.unwrap()
    );
    store
        .write(after.fencing_token().await.unwrap(), "after the restart")
        .expect("a server restarted from a stale snapshot still issues higher tokens");
    after.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_tokens_keep_increasing_after_every_node_restarts_from_a_stale_snapshot() {
    let mut nodes = RedisServer::start_independent(3);
    let locks = redlock(&nodes).await;
    let store = FencedStore::default();

    let t1 = write_under_lock(&locks, "doc:5", &store, "snapshotted").await;
    for node in &nodes {
        node.command(&["SAVE"]).unwrap();
    }
    write_under_lock(&locks, "doc:5", &store, "after the snapshots").await;
    let t3 = write_under_lock(&locks, "doc:5", &store, "lost in the crash").await;
    for node in &nodes {
        assert!(
            counter_pttl(node, "doc:5") > 0,
            "the counter expires when idle, on every node"
        );
    }

    for node in &mut nodes {
        node.restart_from_disk();
        let restored = fence_counter(node, "doc:5");
        assert!(
            restored.is_some_and(|c| c <= t1),
            "counter {restored:?} restored from a snapshot taken at token {t1}"
        );
    }
    let after = acquire_after_restart(&locks, "doc:5", LockOptions::new()).await;
    assert!(
        after.fencing_token().await.unwrap() > t3,
        "{} after {t3}",
        after.fencing_token().await.unwrap()
    );
    store
        .write(after.fencing_token().await.unwrap(), "after the restarts")
        .expect("Redlock nodes restarted from stale snapshots still issue higher tokens");
    after.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_failover_to_a_lagging_replica() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replica_of(&primary);
    let locks = connect_without_lock_delay(&primary.url()).await;
    let store = FencedStore::default();

    let t1 = write_under_lock(&locks, "doc:6", &store, "replicated").await;
    assert!(
        poll_until(Duration::from_secs(10), || fence_counter(&replica, "doc:6")
            == Some(t1)),
        "the replica did not receive the counter within 10 s"
    );
    replica.promote(); // replication breaks: the replica lags from here on
    write_under_lock(&locks, "doc:6", &store, "not replicated").await;
    let t3 = write_under_lock(&locks, "doc:6", &store, "lost in the failover").await;
    assert_eq!(
        fence_counter(&replica, "doc:6"),
        Some(t1),
        "the replica lags"
    );

    primary.kill();
    let promoted = connect_without_lock_delay(&replica.url()).await;
    let after = promoted.acquire("doc:6", LockOptions::new()).await.unwrap();
    assert!(
        after.fencing_token().await.unwrap() > t3,
        "{} after {t3}",
        after.fencing_token().await.unwrap()
    );
    store
        .write(after.fencing_token().await.unwrap(), "after the failover")
        .expect("a promoted replica that missed acquisitions still issues higher tokens");
    after.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_counter_expires_when_idle_instead_of_piling_up() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let minutes = |m: i64| m * 60_000;

    let short = locks
        .acquire("doc:7", LockOptions::new().ttl(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(
        counter_pttl(&server, "doc:7"),
        -2,
        "no counter until a token is asked for"
    );
    short.fencing_token().await.unwrap();
    let pttl = counter_pttl(&server, "doc:7");
    assert!(0 < pttl && pttl <= minutes(10), "short lease: PTTL {pttl}");
    short.release().await.unwrap();

    let long = locks
        .acquire("doc:7", LockOptions::new().ttl(Duration::from_secs(3_600)))
        .await
        .unwrap();
    long.fencing_token().await.unwrap();
    let pttl = counter_pttl(&server, "doc:7");
    assert!(
        minutes(60) < pttl && pttl <= minutes(120),
        "one-hour lease: PTTL {pttl}"
    );
    long.release().await.unwrap();

    // A counter without expiry, far ahead of the clock (written by an older
    // version, or after the clock was set back): tokens still rise past it,
    // and it expires from now on.
    let ahead = fence_counter(&server, "doc:7").unwrap() + 3_600_000_000;
    server
        .command(&["SET", "lock-fence:doc:7", &ahead.to_string()])
        .unwrap();
    let guard = locks.acquire("doc:7", LockOptions::new()).await.unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), ahead + 1);
    assert!(
        counter_pttl(&server, "doc:7") > 0,
        "the counter got an expiry"
    );
    guard.release().await.unwrap();
}

/// Fencing tokens go into `BIGINT` (`i64`) columns: a token is the server's
/// clock in microseconds (about 2^51 today) or one above the last, far below
/// 2^63, on a real server and in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_fit_a_signed_64_bit_column() {
    let server = RedisServer::start();
    for locks in [connect(&server.url()).await, LockManager::in_memory()] {
        let guard = locks
            .acquire("fits", LockOptions::new().fenced(true))
            .await
            .unwrap();
        let token = guard.fencing_token().await.unwrap();
        assert!(i64::try_from(token).is_ok(), "{token}");
        assert!(token < 1 << 56, "{token}: microseconds, not near 2^63");
        guard.release().await.unwrap();
    }
}

/// Script calls the server has answered, of every form.
fn script_calls(server: &RedisServer) -> u64 {
    ["evalsha", "eval"]
        .iter()
        .map(|command| command_calls(server, command))
        .sum()
}

/// A `fenced` lock's first attempt takes the lock and issues its token in
/// one script call: no plain `SET` beside it, no second script that reads
/// the lock back to check it is ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_lock_and_its_token_come_from_one_script_call() {
    for engine in Engine::ALL {
        let h = Harness::on_engine(engine).await;
        let server = h.server();
        // Loads the script (a first EVALSHA answers NOSCRIPT).
        let warm = h.a.acquire("doc:warm", long().fenced(true)).await.unwrap();
        warm.release().await.unwrap();
        let counts = |server: &RedisServer| {
            ["set", "get", "time"].map(|command| command_calls(server, command))
        };
        let (scripts_before, [set, get, time]) = (script_calls(server), counts(server));
        let guard = h.a.acquire("doc:one", long().fenced(true)).await.unwrap();
        assert_eq!(script_calls(server) - scripts_before, 1, "one script call");
        let [sets, gets, times] = counts(server);
        // SET NX PX of the lock and SET … GET of the counter; one TIME. The
        // lock-delay's check reads the node marker and this session's note
        // of it; when the note (kept at most a second) ran out since the
        // warm-up, the check also writes both again.
        assert!(
            sets == set + 2 || sets == set + 4,
            "SET NX PX of the lock and SET … GET of the counter (and the note renewed): {} SETs",
            sets - set
        );
        assert_eq!(
            [gets, times],
            [get + 2, time + 1],
            "the node marker and its note read; one TIME"
        );
        let token = guard.fencing_token().await.unwrap();
        assert_eq!(fence_counter(server, "doc:one"), Some(token));
        assert_eq!(
            script_calls(server) - scripts_before,
            1,
            "token from the guard"
        );
        guard.release().await.unwrap();
    }
}

/// A `fenced` attempt on a lock someone else holds gets no token and does
/// not touch the counter, and says how long the holder has left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_attempt_on_a_held_lock_issues_no_token() {
    for engine in Engine::ALL {
        let h = Harness::on_engine(engine).await;
        let holder = h.a.acquire("doc:held", long()).await.unwrap();
        let fenced = long().fenced(true).wait(Duration::ZERO);
        match h.b.acquire("doc:held", fenced.clone()).await {
            Err(LockError::Busy {
                remaining: Some(remaining),
                ..
            }) => assert!(remaining <= Duration::from_secs(30), "{remaining:?}"),
            other => panic!("expected Busy with the holder's remaining TTL, got {other:?}"),
        }
        assert!(h.b.try_acquire("doc:held", fenced).await.unwrap().is_none());
        assert_eq!(fence_counter(h.server(), "doc:held"), None, "no counter");
        holder.release().await.unwrap();
    }
}

/// A `fenced` lock whose token cannot be issued with it (its counter key
/// holds a hash) is still taken, as `fenced` promises: the script catches
/// the failed write (Redis would not undo its `SET`, leaving a lock nobody
/// knows it has), and the token is asked for again on request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_lock_whose_token_cannot_be_issued_is_taken_and_asks_again_on_request() {
    for engine in Engine::ALL {
        let h = Harness::on_engine(engine).await;
        let server = h.server();
        server
            .command(&["HSET", "lock-fence:doc:e", "not", "a counter"])
            .unwrap();
        let guard = h.a.acquire("doc:e", long().fenced(true)).await.unwrap();
        assert!(
            h.b.try_acquire("doc:e", long()).await.unwrap().is_none(),
            "the lock is held"
        );
        let refused = guard.fencing_token().await;
        assert!(
            matches!(refused, Err(LockError::Server { .. })),
            "{refused:?}"
        );
        server.command(&["DEL", "lock-fence:doc:e"]).unwrap();
        let token = guard.fencing_token().await.unwrap();
        assert_eq!(fence_counter(server, "doc:e"), Some(token));
        guard.release().await.unwrap();
    }
}

/// Tokens issued with the lock rise past a stale counter brought back by a
/// restart, as those issued on request do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_keep_increasing_after_restart_from_a_stale_snapshot() {
    let mut server = RedisServer::start();
    let locks = connect_without_lock_delay(&server.url()).await;
    let fenced = || LockOptions::new().fenced(true);
    let take = |locks: &LockManager| {
        let locks = locks.clone();
        async move {
            let guard = locks.acquire("doc:fs", fenced()).await.unwrap();
            let token = guard.fencing_token().await.unwrap();
            guard.release().await.unwrap();
            token
        }
    };
    let t1 = take(&locks).await;
    server.command(&["SAVE"]).unwrap();
    let t2 = take(&locks).await;
    assert!(t2 > t1);

    server.restart_from_disk(); // kill -9, then load the old snapshot
    assert_eq!(fence_counter(&server, "doc:fs"), Some(t1));
    let after = acquire_after_restart(&locks, "doc:fs", fenced()).await;
    let token = after.fencing_token().await.unwrap();
    assert!(token > t2, "{token} after {t2}");
    after.release().await.unwrap();
}

/// A counter ahead of the clock (set back, or written by another node):
/// the token issued with the lock is one above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_token_is_one_above_a_counter_ahead_of_the_clock() {
    for engine in Engine::ALL {
        let h = Harness::on_engine(engine).await;
        let server = h.server();
        let ahead = 4_000_000_000_000_000_u64;
        server
            .command(&["SET", "lock-fence:doc:ahead", &ahead.to_string()])
            .unwrap();
        let guard = h.a.acquire("doc:ahead", long().fenced(true)).await.unwrap();
        assert_eq!(guard.fencing_token().await.unwrap(), ahead + 1);
        assert_eq!(fence_counter(server, "doc:ahead"), Some(ahead + 1));
        guard.release().await.unwrap();
    }
}

/// A `fenced` acquisition dropped while its script is on its way (sent,
/// not answered) leaves no lock: the script takes the lock and issues a
/// token on the server, and the dropped acquisition gives the lock back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_acquisition_dropped_while_its_script_is_in_flight_leaves_no_lock() {
    for engine in Engine::ALL {
        let server = RedisServer::builder().engine(engine).start();
        let proxy = FaultProxy::start(server.addr());
        let locks = connect(&proxy.url()).await;
        // Loads the script before the link slows down.
        let warm = locks
            .acquire("doc:warm", long().fenced(true))
            .await
            .unwrap();
        warm.release().await.unwrap();
        proxy.delay(Duration::from_millis(300));
        let dropped = tokio::time::timeout(
            Duration::from_millis(100),
            locks.acquire("doc:drop", long().fenced(true)),
        )
        .await;
        assert!(dropped.is_err(), "{engine:?}: dropped while in flight");
        assert!(
            poll_async(PROMPTLY, || async {
                fence_counter(&server, "doc:drop").is_some()
            })
            .await,
            "{engine:?}: the script reached the server and issued a token"
        );
        assert!(
            poll_async(PROMPTLY, || async {
                lock_value(&server, "doc:drop") == RespValue::Nil
            })
            .await,
            "{engine:?}: the lock the dropped acquisition took was given back"
        );
    }
}
