//! Behaviour that only a real Redis server can show: what the lock looks like
//! in Redis, scripts flushed, the server unreachable, killed, paused or
//! restarted empty, keys deleted behind the holder's back, and how many
//! commands waiting costs.
//!
//! Each test starts its own `redis-server` on a free 127.0.0.1 port, so tests
//! are independent and run in parallel. Every loop is bounded in count and time.

use crate::support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::{ExtraPort, RedisServer};
use support::{
    assert_lease_lost, command_calls, fence_counter, lock_value, long, reconnect, renewed, waiting,
    Harness, NO_HANG, PAST_ONE_TTL,
};
use tokio::time::{sleep, timeout};

/// Calls of the script commands (`EVALSHA` and `EVAL`) the server has answered.
fn script_calls(server: &RedisServer) -> u64 {
    command_calls(server, "evalsha") + command_calls(server, "eval")
}

/// Asserts that no script reaches `server` for three renewal periods
/// (one `ttl`) after `event`: the watchdog stopped with the guard.
async fn assert_no_script_calls_for(server: &RedisServer, ttl: Duration, event: &str) {
    sleep(Duration::from_millis(50)).await;
    let after = script_calls(server);
    sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(
        script_calls(server),
        after,
        "script calls went on for 3 renewal periods after {event}"
    );
}

/// An integer reply of `args`, panicking on anything else.
fn integer(server: &RedisServer, args: &[&str]) -> i64 {
    let reply = server
        .command(args)
        .unwrap_or_else(|err| panic!("{args:?} failed: {err}"));
    reply
        .as_integer()
        .unwrap_or_else(|| panic!("{args:?} replied {reply:?}"))
}

/// A port on 127.0.0.1 on which nothing listens (the OS's free pick, released again).
fn unused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_key_in_redis_holds_owner_token_and_ttl() {
    let h = Harness::redis().await;
    let ttl = Duration::from_secs(5);
    let guard = h.a.acquire("k", LockOptions::new().ttl(ttl)).await.unwrap();
    let pttl = integer(h.server(), &["PTTL", "lock:k"]);
    assert!(
        pttl > 0 && pttl <= 5000,
        "PTTL of a held lock is {pttl} ms, expected (0, 5000]"
    );
    assert_eq!(lock_value(h.server(), "k").as_str(), Some(guard.token()));
    assert_eq!(
        integer(h.server(), &["EXISTS", "k"]),
        0,
        "key without namespace"
    );
    guard.release().await.unwrap();
    assert_eq!(integer(h.server(), &["EXISTS", "lock:k"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_namespace_prefixes_the_lock_key() {
    let server = RedisServer::start();
    let manager = LockManager::builder()
        .namespace("app:")
        .connect(&server.url())
        .await
        .unwrap();
    let guard = manager.acquire("k", long()).await.unwrap();
    assert_eq!(integer(&server, &["EXISTS", "app:k"]), 1);
    assert_eq!(integer(&server, &["EXISTS", "lock:k"]), 0);
    guard.release().await.unwrap();
    assert_eq!(integer(&server, &["EXISTS", "app:k"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_acquire_work_after_script_flush() {
    let h = Harness::redis().await;
    let guard = h.a.acquire("k", long()).await.unwrap();
    h.server().command(&["SCRIPT", "FLUSH"]).unwrap();
    guard
        .release()
        .await
        .expect("release falls back to loading its script after NOSCRIPT");
    assert_eq!(integer(h.server(), &["EXISTS", "lock:k"]), 0);

    h.server().command(&["SCRIPT", "FLUSH"]).unwrap();
    let again =
        h.a.try_acquire("k", long())
            .await
            .expect("acquire falls back to loading its script after NOSCRIPT")
            .expect("the lock is free");
    assert_eq!(integer(h.server(), &["EXISTS", "lock:k"]), 1);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_works_after_script_flush() {
    let h = Harness::redis().await;
    let guard = h.a.acquire("k", renewed()).await.unwrap();
    h.server().command(&["SCRIPT", "FLUSH"]).unwrap();
    sleep(PAST_ONE_TTL).await;
    assert!(!guard.is_lost(), "renewal failed after SCRIPT FLUSH");
    assert!(integer(h.server(), &["PTTL", "lock:k"]) > 0);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_unreachable_redis_fails_with_connection_error() {
    let url = format!("redis://127.0.0.1:{}", unused_port());
    let started = Instant::now();
    let result = timeout(NO_HANG, LockManager::connect(&url))
        .await
        .expect("connect to a dead port gives up by itself");
    match result {
        Err(err @ LockError::Connection { .. }) => assert!(err.is_retryable()),
        other => panic!("connect to {url} gave {other:?}"),
    }
    assert!(started.elapsed() < NO_HANG);
}

/// A failed connect names the address it tried, so that an operator knows
/// which server to look at, and never the URL's password: for one server,
/// a cluster seed, a Redlock node and a Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_connect_names_the_address_it_tried_but_never_the_password() {
    const PASSWORD: &str = "Pw-ADDR-51c0e9";
    let dead = ExtraPort::reserve();
    let address = format!("127.0.0.1:{}", dead.port());
    let url = format!("redis://svc:{PASSWORD}@{address}");
    let attempts = [
        (
            "connect",
            timeout(NO_HANG, LockManager::connect(&url)).await,
        ),
        (
            "cluster",
            timeout(NO_HANG, LockManager::cluster([url.as_str()])).await,
        ),
        (
            "redlock",
            timeout(NO_HANG, LockManager::redlock([url.as_str()])).await,
        ),
        (
            "sentinel",
            timeout(NO_HANG, LockManager::sentinel("orders", [url.as_str()])).await,
        ),
    ];
    for (constructor, attempt) in attempts {
        let result = attempt.unwrap_or_else(|_| panic!("{constructor} gives up by itself"));
        let err = match result {
            Err(err @ LockError::Connection { .. }) => err,
            other => panic!("{constructor} to a dead port gave {other:?}"),
        };
        let shown = format!("{err} / {err:?}");
        assert!(shown.contains(&address), "{constructor}: {shown}");
        assert!(!shown.contains(PASSWORD), "{constructor}: {shown}");
    }
}

/// `connect` to a server that accepts connections but never answers fails
/// within about twice the connect timeout (1 s by default), as the README
/// says; the bound allows a busy machine 2 s more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_server_that_never_answers_fails_instead_of_hanging() {
    // Accepts TCP connections (into its backlog) but never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let result = timeout(NO_HANG, LockManager::connect(&url))
        .await
        .expect("connect to a silent server gives up by itself");
    assert!(
        matches!(result, Err(LockError::Connection { .. })),
        "connect to a silent server gave {result:?}"
    );
    let took = started.elapsed();
    println!("connect to a silent server failed after {took:?}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_on_killed_server_fails_fast_and_recovers_after_restart() {
    let mut h = Harness::redis_without_lock_delay().await;
    h.a.acquire("k", long())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    h.server_mut().kill();

    let result = timeout(NO_HANG, h.a.try_acquire("k", long()))
        .await
        .expect("acquire on a dead server fails instead of hanging");
    assert!(
        matches!(result, Err(LockError::Connection { .. })),
        "acquire on a dead server gave {result:?}"
    );

    h.server_mut().restart_empty();
    reconnect(&h.a).await;
    reconnect(&h.b).await;
    let guard = h.a.try_acquire("k", long()).await.unwrap();
    let guard = guard.expect("the lock is free on the restarted server");
    assert!(h.held_elsewhere("k").await);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_learns_its_lease_is_lost_when_the_server_dies() {
    let mut h = Harness::redis().await;
    let options = LockOptions::new().ttl(Duration::from_millis(600));
    let guard = h.a.acquire("k", options).await.unwrap();
    h.server_mut().kill();
    timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("renewals that keep failing until the lease ends count as lost");
    assert!(guard.is_lost());
    let release = timeout(NO_HANG, guard.release())
        .await
        .expect("release on a dead server fails instead of hanging");
    assert!(
        release.is_err(),
        "release of a lost lease on a dead server reported success"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lock_key_is_reported_lost_within_a_renewal_period() {
    let h = Harness::redis().await;
    let options = LockOptions::new().ttl(Duration::from_millis(600));
    let guard = h.a.acquire("k", options).await.unwrap();
    assert!(
        timeout(Duration::from_millis(100), guard.lost())
            .await
            .is_err(),
        "lost() resolved while the lease was held"
    );
    h.server().command(&["DEL", "lock:k"]).unwrap();
    timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the watchdog notices the deleted key at its next renewal");
    assert!(guard.is_lost());
    assert_eq!(guard.valid_until(), None);
    assert_lease_lost(guard.release().await, "k");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_is_cancelled_when_its_lock_key_is_deleted_under_it() {
    let h = Harness::redis().await;
    let finished = AtomicBool::new(false);
    let options = LockOptions::new().ttl(Duration::from_millis(600));
    let body = async {
        sleep(Duration::from_secs(5)).await;
        finished.store(true, Ordering::SeqCst);
    };
    let deleter = async {
        sleep(Duration::from_millis(100)).await;
        h.server().command(&["DEL", "lock:k"]).unwrap();
    };
    let started = Instant::now();
    let (result, ()) = tokio::join!(h.a.with_lock("k", options, body), deleter);
    assert_lease_lost(result, "k");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cancelled at the next renewal, not after the body's 5 s"
    );
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_taken_over_after_delete_is_reported_lost() {
    let h = Harness::redis().await;
    let options = LockOptions::new().ttl(Duration::from_millis(600));
    let stale = h.a.acquire("k", options).await.unwrap();
    h.server().command(&["DEL", "lock:k"]).unwrap();
    let new_owner =
        h.b.try_acquire("k", long())
            .await
            .unwrap()
            .expect("the deleted lock is free");
    timeout(Duration::from_secs(2), stale.lost())
        .await
        .expect("the old holder learns it was taken over");
    assert!(stale.is_lost());
    assert_lease_lost(stale.release().await, "k");
    assert!(
        h.a.try_acquire("k", long()).await.unwrap().is_none(),
        "the old holder's release freed the new owner's lock"
    );
    assert!(!new_owner.is_lost());
    new_owner.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_paused_past_the_ttl_reports_lost_lease() {
    let h = Harness::redis().await;
    let options = LockOptions::new().ttl(Duration::from_millis(600));
    let guard = h.a.acquire("k", options).await.unwrap();
    h.server()
        .command(&["CLIENT", "PAUSE", "2000", "ALL"])
        .unwrap();
    let started = Instant::now();
    timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("a renewal that cannot complete before the lease ends counts as lost");
    assert!(guard.is_lost());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_stops_when_guard_is_released() {
    let h = Harness::redis().await;
    let ttl = Duration::from_millis(300);
    let guard = h.a.acquire("k", LockOptions::new().ttl(ttl)).await.unwrap();
    let after_acquire = script_calls(h.server());
    sleep(Duration::from_millis(450)).await;
    assert!(
        script_calls(h.server()) > after_acquire,
        "the watchdog did not renew at all"
    );
    guard.release().await.unwrap();
    assert_no_script_calls_for(h.server(), ttl, "release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_stops_when_guard_is_dropped() {
    let h = Harness::redis().await;
    let ttl = Duration::from_millis(300);
    let guard = h.a.acquire("k", LockOptions::new().ttl(ttl)).await.unwrap();
    sleep(Duration::from_millis(150)).await;
    drop(guard);
    h.assert_freed_promptly("k").await;
    assert_no_script_calls_for(h.server(), ttl, "the guard was dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_release_not_by_polling() {
    const WAITERS: usize = 8;
    let h = Harness::redis().await;
    let holder = h.a.acquire("hot", long()).await.unwrap();
    let before = script_calls(h.server());
    let mut waiters = Vec::new();
    for waiter in 0..WAITERS {
        let manager = h.alternate(waiter).clone();
        waiters.push(tokio::spawn(async move {
            let guard = manager
                .acquire("hot", waiting(Duration::from_secs(10)))
                .await?;
            sleep(Duration::from_millis(10)).await;
            guard.release().await
        }));
    }
    sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    let all = async {
        let mut acquired = 0;
        for waiter in waiters {
            waiter
                .await
                .unwrap()
                .expect("every waiter gets and releases the lock");
            acquired += 1;
        }
        acquired
    };
    let acquired = timeout(Duration::from_secs(15), all)
        .await
        .expect("8 waiters of 10 ms each are done within 15 s");
    assert_eq!(acquired, WAITERS);
    let calls = script_calls(h.server()) - before;
    // Polling every 10 ms during the 300 ms hold alone would be 8 × 30 = 240.
    assert!(
        calls < 120,
        "{calls} script calls for {WAITERS} waiters: waiters poll instead of sleeping until woken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_counter_read_modify_write_under_lock_loses_no_updates() {
    let h = Harness::redis().await;
    let client = redis::Client::open(h.server().url()).unwrap();
    let data = client.get_multiplexed_async_connection().await.unwrap();
    let increments = h
        .locked_increments(move || {
            let mut data = data.clone();
            async move {
                // Not atomic in Redis: only the lock keeps it correct.
                let seen: Option<usize> = redis::cmd("GET")
                    .arg("counter")
                    .query_async(&mut data)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let () = redis::cmd("SET")
                    .arg("counter")
                    .arg(seen.unwrap_or(0) + 1)
                    .query_async(&mut data)
                    .await
                    .unwrap();
            }
        })
        .await;
    let counter = h.server().command(&["GET", "counter"]).unwrap();
    assert_eq!(counter.as_str(), Some(increments.to_string().as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_token_increases_after_restart_without_persistence() {
    let mut h = Harness::redis_without_lock_delay().await;
    let guard = h.a.acquire("k", long()).await.unwrap();
    let t1 = guard.fencing_token().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(fence_counter(h.server(), "k"), Some(t1));

    h.server_mut().restart_empty();
    assert_eq!(
        fence_counter(h.server(), "k"),
        None,
        "the restarted server has no fencing counter"
    );
    reconnect(&h.a).await;
    let guard = h.a.acquire("k", long()).await.unwrap();
    let t2 = guard.fencing_token().await.unwrap();
    assert!(
        t2 > t1,
        "fencing token went back from {t1} to {t2} after a restart"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_and_password_in_the_url_are_used() {
    let server = RedisServer::start();
    server
        .command(&[
            "ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all",
        ])
        .unwrap();
    let port = server.port();
    let wrong = LockManager::connect(&format!("redis://locker:wrong@127.0.0.1:{port}")).await;
    assert!(wrong.is_err(), "a wrong password must not connect");
    let locks = LockManager::connect(&format!("redis://locker:s3cret@127.0.0.1:{port}"))
        .await
        .expect("connect with user and password");
    let guard = locks.acquire("acl", long()).await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn unusable_urls_are_refused_with_a_clear_error() {
    for url in ["http://127.0.0.1:6379", "not a url"] {
        let refused = LockManager::connect(url).await;
        assert!(
            matches!(refused, Err(LockError::InvalidUrl { .. })),
            "{url}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn durations_too_long_to_represent_are_errors_or_saturated_never_panics() {
    let server = RedisServer::start();
    let forever = LockManager::builder()
        .connect_timeout(Duration::MAX)
        .response_timeout(Duration::MAX);
    let locks = forever
        .clone()
        .connect(&server.url())
        .await
        .expect("connect with unbounded timeouts");
    let guard = locks
        .acquire("k", long().wait(Duration::MAX))
        .await
        .expect("a free lock, with a wait that never ends");
    guard.release().await.expect("release");
    let replicas = locks
        .try_acquire("k", long().min_replicas(1, Duration::MAX))
        .await;
    assert!(
        matches!(replicas, Err(LockError::InvalidOptions(_))),
        "a replica timeout longer than the ttl gave {replicas:?}"
    );
    let ttl = locks
        .try_acquire("k", LockOptions::new().ttl(Duration::MAX))
        .await;
    assert!(matches!(ttl, Err(LockError::InvalidOptions(_))), "{ttl:?}");
    let redlock = forever
        .redlock([server.url()])
        .await
        .expect("Redlock over one node with unbounded timeouts");
    let guard = redlock
        .acquire(
            "k",
            LockOptions::new().ttl(Duration::from_secs(365 * 24 * 3600)),
        )
        .await
        .expect("the longest allowed ttl");
    guard.release().await.expect("release");
}

/// Issue 25: namespace `app`'s fencing counter of `k` was namespace
/// `app-fence`'s lock on `k`. Every Redis constructor refuses such a
/// namespace before it connects.
#[tokio::test]
async fn namespace_whose_names_could_be_another_namespaces_is_refused_everywhere() {
    let url = "redis://127.0.0.1:1";
    for namespace in ["app-fence", "lock-rw", "app:orders"] {
        let builder = || LockManager::builder().namespace(namespace);
        let refused = [
            builder().connect(url).await.map(|_| ()),
            builder().redlock([url]).await.map(|_| ()),
            builder().sentinel("primary", [url]).await.map(|_| ()),
            builder().cluster([url]).await.map(|_| ()),
        ];
        for result in refused {
            assert!(
                matches!(&result, Err(LockError::InvalidOptions(reason)) if reason.contains(namespace)),
                "{namespace}: {result:?}"
            );
        }
    }
}
