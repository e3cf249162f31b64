//! The fair hand-off on a single Redis server: waiters queue in Redis, and a
//! release hands the lock straight to the first live one, in arrival order
//! across processes (each manager here has its own connections, as a process
//! would). A waiter that dies while queued, or right after being granted,
//! holds up the key only for a short, documented time; nobody ever holds the
//! lock twice; and the uncontended path never touches the queue.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{LockError, LockGuard, LockManager, LockOptions};
use leasehold_testkit::{Engine, FaultProxy, RedisServer, RespValue};
use support::{
    command_calls, connect, connect_without_lock_delay, fixed_lease, join_within, long, poll_async,
    waiting, NO_HANG, PROMPTLY,
};
use tokio::time::timeout;

const KEY: &str = "handoff";
/// Longest a waiter that died while queued, then was granted the lock,
/// can hold up the key: its place (3 s) or the grant window (2 s), plus one
/// refresh period (1 s) of the next waiter.
const DEAD_WAITER_BOUND: Duration = Duration::from_secs(4);

/// Waiters queued for `KEY` on `server`.
fn queued(server: &RedisServer) -> i64 {
    server
        .command(&["ZCARD", &format!("lock-queue:{KEY}")])
        .expect("ZCARD")
        .as_integer()
        .expect("ZCARD answers an integer")
}

/// Waits (bounded) until `n` waiters are queued for `KEY`; a waiter on a
/// slow link needs several round trips to queue.
async fn until_queued(server: &RedisServer, n: i64) {
    let reached = poll_async(NO_HANG, || async { queued(server) >= n }).await;
    assert!(reached, "{n} waiters never queued (now {})", queued(server));
}

/// A new server of `engine`.
fn start(engine: Engine) -> RedisServer {
    RedisServer::builder().engine(engine).start()
}

/// A new server of `engine` on which a manager of its own holds `KEY` with
/// a long lease.
async fn server_with_key_held(engine: Engine) -> (RedisServer, LockGuard) {
    let server = start(engine);
    let holder = connect(&server.url()).await;
    let guard = holder
        .try_acquire(KEY, long())
        .await
        .unwrap()
        .expect("a new server's key is free");
    (server, guard)
}

// Each hand-off test runs on Redis 7.0, whose releases are scripts, on
// Valkey 9.1, whose uncontended release is `DELIFEQ`, and on Redis 8.6,
// whose uncontended release is `DELEX … IFEQ`: a queued waiter's mark on
// the lock's value must send the holder to the scripted hand-off.
support::on_every_engine!(
    granted_waiter_holds_at_the_grant_in_one_trip_and_its_validity_ends_before_the_servers_expiry,
    parked_waiters_keep_their_places_with_one_refresh_per_process,
    parked_waiter_learns_from_its_keeper_what_no_message_told_it,
    releases_hand_the_lock_to_waiters_in_arrival_order_across_processes,
    handed_over_lock_is_never_held_twice_and_every_task_finishes,
    waiter_that_misses_its_grant_message_still_gets_the_lock,
    live_waiter_behind_many_dead_ones_is_not_overtaken,
    granted_waiter_that_cannot_confirm_loses_the_grant_to_the_next_waiter,
    waiter_on_a_slow_link_never_gets_a_guard_already_lost,
    waiter_whose_runtime_stalled_at_the_grant_never_gets_a_guard_already_lost,
    first_handoff_after_the_scripts_are_flushed_is_confirmed_within_the_grant_window
);

async fn releases_hand_the_lock_to_waiters_in_arrival_order_across_processes(engine: Engine) {
    let (server, guard) = server_with_key_held(engine).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 1..=4 {
        let manager = connect(&server.url()).await;
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = manager
                .acquire(KEY, waiting(Duration::from_secs(10)))
                .await
                .expect("every waiter gets the lock in turn");
            let token = guard
                .fencing_token()
                .await
                .expect("the holder gets a token");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((arrival, token));
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("release");
        }));
        until_queued(&server, arrival).await;
    }
    guard.release().await.expect("holder releases");
    join_within(waiters, Duration::from_secs(10), "the queued waiters").await;
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let arrivals: Vec<i64> = order.iter().map(|&(arrival, _)| arrival).collect();
    assert_eq!(arrivals, vec![1, 2, 3, 4], "served out of arrival order");
    assert!(
        order.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "fencing tokens do not increase along the hand-offs: {order:?}"
    );
    assert_eq!(queued(&server), 0, "the queue is left empty");
}

/// Waiters parked behind a long-held lock keep their places past a place's
/// life (3 s) without polling: one refresh per process and second keeps all
/// of a process's places, where each waiter used to run a script every
/// second. 16 waiters in 2 processes parked for 4 s cost the server a few
/// scripts, not 64; then each still gets the lock in arrival order.
async fn parked_waiters_keep_their_places_with_one_refresh_per_process(engine: Engine) {
    const WAITERS: usize = 16;
    const PARKED: Duration = Duration::from_secs(4);
    let (server, guard) = server_with_key_held(engine).await;
    let processes = [connect(&server.url()).await, connect(&server.url()).await];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 0..WAITERS {
        let manager = processes[arrival % 2].clone();
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = manager
                .acquire(KEY, waiting(Duration::from_secs(30)))
                .await
                .expect("every parked waiter gets the lock in turn");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(arrival);
            guard.release().await.expect("release");
        }));
        until_queued(&server, i64::try_from(arrival).unwrap() + 1).await;
    }
    let scripts_before = command_calls(&server, "evalsha");
    tokio::time::sleep(PARKED).await;
    let scripts = command_calls(&server, "evalsha") - scripts_before;
    assert_eq!(
        queued(&server),
        i64::try_from(WAITERS).unwrap(),
        "a parked waiter lost its place"
    );
    // One refresh per process and second, and a spare one each.
    let most = 2 * (PARKED.as_secs() + 1);
    assert!(
        scripts <= most,
        "{WAITERS} waiters parked in 2 processes for {PARKED:?} ran {scripts} scripts (at most {most}): they poll"
    );
    guard.release().await.expect("holder releases");
    join_within(waiters, Duration::from_secs(10), "the parked waiters").await;
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of arrival order"
    );
}

/// A parked waiter sleeps until a release's message (or its holder's
/// lease would end): what no message tells it, its key's place keeper does
/// at its next refresh. Here the holder has 30 s left, and the server's
/// state changes behind everyone's back: first the lock is granted to the
/// waiter with no message (as a release whose message was lost), then it is
/// deleted with no message while the waiter is first in line again. Both
/// times the waiter gets the lock within a refresh period; the silent grant
/// it holds as its keeper saw it, in the refresh's own trip: with what the
/// server had left of the grant (under its 2.9 s), ending before the key's
/// PTTL, not confirmed to its 30 s ttl.
async fn parked_waiter_learns_from_its_keeper_what_no_message_told_it(engine: Engine) {
    const SILENT_GRANT: Duration = Duration::from_millis(2900);
    let server = start(engine);
    let (lock, queue, places) = (
        format!("lock:{KEY}"),
        format!("lock-queue:{KEY}"),
        format!("lock-wait:{KEY}"),
    );
    let waiter = connect(&server.url()).await;
    for silent_change in ["granted", "deleted"] {
        server
            .command(&["SET", &lock, "someone-else", "PX", "30000"])
            .expect("held elsewhere for 30 s");
        let waiting_task = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                waiter
                    .acquire(KEY, waiting(Duration::from_secs(20)))
                    .await
                    .expect("the waiter gets the lock")
            })
        };
        until_queued(&server, 1).await;
        let Ok(RespValue::Array(first)) = server.command(&["ZRANGE", &queue, "0", "0"]) else {
            panic!("ZRANGE answers an array");
        };
        let token = first[0].as_str().expect("a queued token").to_owned();
        if silent_change == "granted" {
            server.command(&["ZREM", &queue, &token]).expect("ZREM");
            server.command(&["HDEL", &places, &token]).expect("HDEL");
            server
                .command(&[
                    "SET",
                    &lock,
                    &token,
                    "PX",
                    &SILENT_GRANT.as_millis().to_string(),
                ])
                .expect("granted without a message");
        } else {
            server
                .command(&["DEL", &lock])
                .expect("freed without a message");
        }
        let guard = timeout(PROMPTLY, waiting_task)
            .await
            .unwrap_or_else(|_| {
                panic!("the parked waiter after its lock was {silent_change} silently")
            })
            .expect("spawned task");
        let (client_left, server_left) = time_left(&guard, &server);
        if silent_change == "granted" {
            assert!(
                client_left < SILENT_GRANT,
                "the silent grant was confirmed (validity {client_left:?}), not held as the keeper saw it"
            );
            assert!(
                client_left < server_left,
                "the waiter believes it holds the lock {client_left:?} more, the server {server_left:?}"
            );
        }
        guard.release().await.expect("release");
    }
}

/// More waiters in one process than one refresh call names (500): the
/// keeper refreshes them in several calls, and every place outlives its
/// 3 s life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_parked_waiters_than_one_refresh_call_names_all_keep_their_places() {
    const WAITERS: i64 = 600;
    let (server, guard) = server_with_key_held(Engine::Redis).await;
    let process = connect(&server.url()).await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let process = process.clone();
            tokio::spawn(async move {
                let _ = process.acquire(KEY, waiting(Duration::from_secs(15))).await;
            })
        })
        .collect();
    let queued_in_time = poll_async(Duration::from_secs(10), || async {
        queued(&server) == WAITERS
    })
    .await;
    assert!(
        queued_in_time,
        "only {} of {WAITERS} queued",
        queued(&server)
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(queued(&server), WAITERS, "a parked waiter lost its place");
    let Ok(RespValue::Array(places)) = server.command(&["HVALS", &format!("lock-wait:{KEY}")])
    else {
        panic!("HVALS answers an array");
    };
    let now = server_ms(&server);
    let expired = places
        .iter()
        .filter(|place| {
            let expires = place.as_str().and_then(|place| place.split(' ').next());
            expires
                .and_then(|ms| ms.parse::<i64>().ok())
                .is_none_or(|expires| expires < now)
        })
        .count();
    assert_eq!(
        i64::try_from(places.len()).unwrap(),
        WAITERS,
        "every waiter has a place"
    );
    assert_eq!(expired, 0, "places not refreshed for 4 s");
    for waiter in waiters {
        waiter.abort();
    }
    drop(guard);
}

async fn handed_over_lock_is_never_held_twice_and_every_task_finishes(engine: Engine) {
    let server = start(engine);
    let inside = Arc::new(AtomicUsize::new(0));
    let cycles = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let manager = connect(&server.url()).await;
        for _ in 0..4 {
            let (manager, inside, cycles) =
                (manager.clone(), Arc::clone(&inside), Arc::clone(&cycles));
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = manager
                        .acquire(KEY, waiting(Duration::from_secs(20)))
                        .await
                        .expect("acquire");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                    cycles.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    join_within(tasks, Duration::from_secs(30), "12 contending tasks").await;
    assert_eq!(cycles.load(Ordering::SeqCst), 120);
    assert_eq!(queued(&server), 0, "the queue is left empty");
}

async fn waiter_that_misses_its_grant_message_still_gets_the_lock(engine: Engine) {
    let server = start(engine);
    let holder = connect(&server.url()).await;
    let waiter = connect(&server.url()).await;
    let guard = holder
        .try_acquire(KEY, long())
        .await
        .unwrap()
        .expect("free");
    let waiting_task = tokio::spawn(async move {
        let guard = waiter
            .acquire(KEY, waiting(Duration::from_secs(10)))
            .await
            .expect("the granted waiter confirms at its next refresh");
        guard.release().await.expect("release");
    });
    until_queued(&server, 1).await;
    server
        .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("cut the notification connections");
    guard.release().await.expect("holder releases");
    join_within(
        vec![waiting_task],
        Duration::from_secs(3),
        "the waiter whose grant message was lost",
    )
    .await;
}

/// The server's clock in ms, as the queue scripts read it.
fn server_ms(server: &RedisServer) -> i64 {
    let Ok(RespValue::Array(time)) = server.command(&["TIME"]) else {
        panic!("TIME answers an array");
    };
    let part = |i: usize| -> i64 {
        time[i]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("TIME part")
    };
    part(0) * 1000 + part(1) / 1000
}

/// More dead waiters (crashed, their places expired) than one script drops
/// (64) in front of a live one: no attempt takes the lock past the live
/// waiter, though each call drops only 64 of them.
async fn live_waiter_behind_many_dead_ones_is_not_overtaken(engine: Engine) {
    let (server, guard) = server_with_key_held(engine).await;
    let (queue, places) = (format!("lock-queue:{KEY}"), format!("lock-wait:{KEY}"));
    let now = server_ms(&server);
    let mut queued = vec!["ZADD".to_owned(), queue.clone()];
    let mut expiries = vec!["HSET".to_owned(), places.clone()];
    for i in 0..200 {
        queued.extend([i.to_string(), format!("dead-{i}")]);
        expiries.extend([format!("dead-{i}"), (now - 1000).to_string()]);
    }
    queued.extend(["1000".to_owned(), "live".to_owned()]);
    expiries.extend(["live".to_owned(), (now + 30_000).to_string()]);
    // As the waiters' own acquisitions would have: they mark the held lock
    // (which sends a native release to the scripted hand-off).
    let marked = format!("!{}", guard.token());
    let mark = ["SET", &format!("lock:{KEY}"), &marked, "KEEPTTL"].map(str::to_owned);
    for command in [queued, expiries, mark.to_vec()] {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        server.command(&args).expect("queue written");
    }
    guard.release().await.expect("holder releases");
    let newcomer = connect(&server.url()).await;
    for attempt in 0..4 {
        let taken = newcomer.try_acquire(KEY, long()).await.expect("attempt");
        assert!(
            taken.is_none(),
            "attempt {attempt} took the lock past a live queued waiter"
        );
    }
}

async fn granted_waiter_that_cannot_confirm_loses_the_grant_to_the_next_waiter(engine: Engine) {
    let (server, guard) = server_with_key_held(engine).await;
    let proxy = FaultProxy::start(server.addr());
    let cut_off = LockManager::builder()
        .response_timeout(Duration::from_millis(200))
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    // Long enough to be queued when the release comes; it then rides out
    // the cut until its wait ends.
    let first_wait = Duration::from_secs(3);
    let first = tokio::spawn(async move {
        cut_off
            .acquire(KEY, waiting(first_wait))
            .await
            .map(|guard| guard.key().to_owned())
    });
    until_queued(&server, 1).await;
    let next = connect(&server.url()).await;
    let second = tokio::spawn(async move {
        let guard = next
            .acquire(KEY, waiting(Duration::from_secs(10)))
            .await
            .expect("the next waiter gets the lock once the grant runs out");
        guard.release().await.expect("release");
    });
    until_queued(&server, 2).await;
    proxy.cut();
    let released = Instant::now();
    guard.release().await.expect("holder releases");
    join_within(
        vec![second],
        DEAD_WAITER_BOUND,
        "the waiter behind one that cannot confirm its grant",
    )
    .await;
    assert!(released.elapsed() < DEAD_WAITER_BOUND);
    let first = timeout(first_wait + PROMPTLY, first)
        .await
        .expect("the cut-off waiter gives up by its deadline")
        .expect("waiter task");
    assert!(
        matches!(first, Err(LockError::Connection { .. })),
        "the cut-off waiter must not believe it holds the lock: {first:?}"
    );
}

/// Without a lock-delay (with one, the attempt is `acquire.lua`, which
/// checks the node: see `lock_delay.rs` and BENCHMARKS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_cycle_is_one_plain_set_and_one_release_script() {
    let server = RedisServer::start();
    let locks = connect_without_lock_delay(&server.url()).await;
    // The first release loads the script (its EVALSHA fails with NOSCRIPT).
    let guard = locks
        .acquire(KEY, waiting(Duration::from_secs(1)))
        .await
        .expect("free");
    guard.release().await.expect("release");
    server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    for _ in 0..20 {
        let guard = locks
            .acquire(KEY, waiting(Duration::from_secs(1)))
            .await
            .expect("free");
        guard.release().await.expect("release");
    }
    for command in [
        "zadd", "hset", "zrange", "zrem", "publish", "time", "eval", "exists",
    ] {
        assert_eq!(
            command_calls(&server, command),
            0,
            "an uncontended cycle ran {command}"
        );
    }
    // 20 cycles: each a SET NX PX and one EVALSHA of the release script
    // (GET, and DEL of the unmarked lock: nobody queued), as a hand-written
    // lock sends, and no fencing token asked for.
    for (command, calls) in [("set", 20), ("evalsha", 20), ("get", 20), ("del", 20)] {
        assert_eq!(command_calls(&server, command), calls, "{command}");
    }
}

/// The waiter process of the test below: queues for `KEY` and waits. Run only
/// as a child process, which the test then kills with SIGKILL.
#[tokio::test]
#[ignore = "a child process of `dead_queued_waiter_holds_up_the_key_only_briefly`"]
async fn queued_waiter_process() {
    let Ok(url) = std::env::var("HANDOFF_CHILD_URL") else {
        return;
    };
    let manager = LockManager::connect(&url).await.expect("connect");
    let _ = manager.acquire(KEY, waiting(Duration::from_secs(60))).await;
}

/// Starts [`queued_waiter_process`] against `url`.
fn start_queued_waiter_process(url: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "handoff::queued_waiter_process",
            "--ignored",
            "--quiet",
        ])
        .env("HANDOFF_CHILD_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the waiter process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_queued_waiter_holds_up_the_key_only_briefly() {
    let (server, guard) = server_with_key_held(Engine::Redis).await;
    let mut child = start_queued_waiter_process(&server.url());
    until_queued(&server, 1).await;
    child.kill().expect("SIGKILL the queued waiter");
    child.wait().expect("reap it");

    let live = connect(&server.url()).await;
    let live_task = tokio::spawn(async move {
        let guard = live
            .acquire(KEY, waiting(Duration::from_secs(20)))
            .await
            .expect("the live waiter gets the lock");
        guard.release().await.expect("release");
    });
    until_queued(&server, 2).await;
    let released = Instant::now();
    guard.release().await.expect("holder releases");
    join_within(
        vec![live_task],
        DEAD_WAITER_BOUND + Duration::from_secs(1),
        "the live waiter behind a dead one",
    )
    .await;
    let waited = released.elapsed();
    assert!(
        waited < DEAD_WAITER_BOUND + Duration::from_secs(1),
        "a dead waiter held up the key for {waited:?}"
    );
}

/// What the holder of `guard` believes it has left of `KEY`'s lock, then
/// what the server has left of it, read in that order.
fn time_left(guard: &LockGuard, server: &RedisServer) -> (Duration, Duration) {
    let client_left = guard
        .valid_until()
        .expect("held")
        .saturating_duration_since(Instant::now());
    (client_left, pttl(server))
}

/// Server-side remaining time of `KEY`'s lock.
fn pttl(server: &RedisServer) -> Duration {
    let ms = server
        .command(&["PTTL", &format!("lock:{KEY}")])
        .expect("PTTL")
        .as_integer()
        .expect("PTTL answers an integer");
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The grant a release sends is taken as it comes: the waiter holds the
/// lock without confirming it, with a first lease of min(its place, 3 s;
/// its ttl) counted from when it sent its last place refresh. Its validity
/// then must end before the server's expiry: over 40 hand-offs between two
/// managers, the client's remaining validity is below the key's PTTL read
/// right after it (the smallest margin is printed). The first renewal then
/// extends the lease to the full ttl.
async fn granted_waiter_holds_at_the_grant_in_one_trip_and_its_validity_ends_before_the_servers_expiry(
    engine: Engine,
) {
    const PLACE: Duration = Duration::from_secs(3);
    let server = start(engine);
    let managers = [connect(&server.url()).await, connect(&server.url()).await];
    let mut smallest_margin = Duration::MAX;
    for handoff in 0..40 {
        let (holder, waiter) = (&managers[handoff % 2], managers[(handoff + 1) % 2].clone());
        let held = holder
            .try_acquire(KEY, long())
            .await
            .unwrap()
            .expect("free between hand-offs");
        let waiting =
            tokio::spawn(
                async move { waiter.acquire(KEY, waiting(Duration::from_secs(10))).await },
            );
        until_queued(&server, 1).await;
        if handoff % 8 == 7 {
            // Well into a refresh period: the grant is counted from a
            // refresh the waiter sent well before the release (and its first
            // renewal, a third of the place after that refresh, is still
            // more than half a second away when the lease is read).
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        if handoff % 10 == 4 {
            // Past a refresh period: the grant is counted from a refresh
            // that the key's keeper sent for the waiter's place.
            tokio::time::sleep(Duration::from_millis(1300)).await;
        }
        held.release().await.expect("holder releases");
        let guard = timeout(PROMPTLY, waiting)
            .await
            .expect("the waiter gets the lock")
            .unwrap()
            .expect("handed over");
        let (client_left, server_left) = time_left(&guard, &server);
        assert!(
            client_left < PLACE,
            "hand-off {handoff}: the grant was confirmed (validity {client_left:?}), not taken as it came"
        );
        assert!(
            client_left < server_left,
            "hand-off {handoff}: the waiter believes it holds the lock {client_left:?} more, the server {server_left:?}"
        );
        smallest_margin = smallest_margin.min(server_left - client_left);
        if handoff == 0 {
            tokio::time::sleep(PLACE / 2).await;
            let renewed = guard
                .valid_until()
                .expect("held")
                .saturating_duration_since(Instant::now());
            assert!(
                renewed > PLACE,
                "the first renewal extends the lease to the ttl: {renewed:?}"
            );
        }
        guard.release().await.expect("release");
    }
    eprintln!("{engine:?}: smallest margin of the server's expiry over the waiter's validity in 40 one-trip hand-offs: {smallest_margin:?}");
}

/// What a guard has left when `acquire` returns it: its validity (zero
/// when already over) and whether it is lost.
fn left_on_return(guard: &LockGuard) -> (Duration, bool) {
    let left = guard.valid_until().map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(Instant::now())
    });
    (left, guard.is_lost())
}

/// The owner token queued first for `KEY`, with its place as the last
/// refresh left it: the refresh's number and the server time it came (ms).
fn first_place(server: &RedisServer) -> Option<(String, String, i64)> {
    let Ok(RespValue::Array(first)) =
        server.command(&["ZRANGE", &format!("lock-queue:{KEY}"), "0", "0"])
    else {
        return None;
    };
    let token = first.first()?.as_str()?.to_owned();
    let place = server
        .command(&["HGET", &format!("lock-wait:{KEY}"), &token])
        .ok()?;
    // `expires seq refreshed lease`, see `refresh_places.lua`.
    let fields: Vec<String> = place.as_str()?.split(' ').map(str::to_owned).collect();
    let refreshed = fields.get(2)?.parse().ok()?;
    Some((token, fields.get(1)?.clone(), refreshed))
}

/// A grant taken as it comes counts from the waiter's last place refresh,
/// and its message needs one more trip: on a slow link (300 ms each way,
/// a 1 s ttl) a release 420 ms after the refresh reached the server still
/// grants more than half (580 ms of 1 s), yet the waiter reads it 1020 ms
/// after it sent the refresh, past the grant's validity (938 ms). Such a
/// grant is confirmed instead (or, run out before the confirmation lands,
/// given up: the waiter goes on waiting and takes the lock when it expires):
/// over three hand-offs, the guard `acquire` returns has validity left.
async fn waiter_on_a_slow_link_never_gets_a_guard_already_lost(engine: Engine) {
    const ONE_WAY: Duration = Duration::from_millis(300);
    const RELEASE_AFTER_REFRESH: i64 = 420;
    let server = start(engine);
    let proxy = FaultProxy::start(server.addr());
    let holder = connect(&server.url()).await;
    let waiter = connect(&proxy.url()).await;
    proxy.delay(ONE_WAY);
    for handoff in 0..3 {
        let held = holder
            .try_acquire(KEY, long())
            .await
            .unwrap()
            .expect("free between hand-offs");
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let options = LockOptions::new()
                    .ttl(Duration::from_secs(1))
                    .wait(Duration::from_secs(20));
                let guard = waiter
                    .acquire(KEY, options)
                    .await
                    .expect("the waiter gets the lock");
                let left = left_on_return(&guard);
                // A guard already lost fails its release; `left` tells.
                let _ = guard.release().await;
                left
            })
        };
        // The release comes after the keeper's first refresh of the place
        // (the one after the waiter's own attempt), long before its next.
        until_queued(&server, 1).await;
        let (_, attempt_seq, _) = first_place(&server).expect("the waiter's place");
        let mut refreshed = None;
        let kept = poll_async(NO_HANG, || {
            let seen = first_place(&server);
            let now_kept = seen.filter(|(_, seq, _)| *seq != attempt_seq);
            refreshed = now_kept.as_ref().map(|&(_, _, at)| at);
            let found = refreshed.is_some();
            async move { found }
        })
        .await;
        assert!(
            kept,
            "hand-off {handoff}: the keeper never refreshed the place"
        );
        let age = server_ms(&server) - refreshed.expect("refreshed");
        let pause = u64::try_from(RELEASE_AFTER_REFRESH - age).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        held.release().await.expect("holder releases");
        let (left, lost) = timeout(NO_HANG, waiting)
            .await
            .expect("the waiter gets the lock")
            .expect("waiter task");
        assert!(
            !lost && !left.is_zero(),
            "hand-off {handoff}: acquire returned a guard already lost (validity left {left:?})"
        );
    }
}

/// The same on a fast link when the waiter's runtime does not run it for a
/// while: its thread is blocked from before the release until 600 ms after,
/// longer than the validity of a 500 ms grant. The grant's message is read
/// then, with the validity counted from the waiter's refresh already over:
/// the guard `acquire` returns has validity left.
async fn waiter_whose_runtime_stalled_at_the_grant_never_gets_a_guard_already_lost(engine: Engine) {
    const STALL: Duration = Duration::from_millis(600);
    let (server, held) = server_with_key_held(engine).await;
    let url = server.url();
    let (stall, stall_now) = tokio::sync::oneshot::channel::<()>();
    let (stalling, stalled) = tokio::sync::oneshot::channel::<()>();
    let (release_done, released) = std::sync::mpsc::channel::<()>();
    let waiter_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the waiter's runtime");
        runtime.block_on(async move {
            let waiter = connect(&url).await;
            let acquiring = tokio::spawn(async move {
                let options = LockOptions::new()
                    .ttl(Duration::from_millis(500))
                    .wait(Duration::from_secs(20));
                let guard = waiter
                    .acquire(KEY, options)
                    .await
                    .expect("the waiter gets the lock");
                let left = left_on_return(&guard);
                // A guard already lost fails its release; `left` tells.
                let _ = guard.release().await;
                left
            });
            stall_now.await.expect("told to stall");
            stalling.send(()).expect("the test waits");
            // Blocks the runtime's one thread: nothing of the waiter runs.
            released.recv_timeout(NO_HANG).expect("the holder released");
            std::thread::sleep(STALL);
            acquiring.await.expect("waiter task")
        })
    });
    until_queued(&server, 1).await;
    stall.send(()).expect("the waiter's runtime listens");
    stalled.await.expect("the waiter's runtime stalls");
    held.release().await.expect("holder releases");
    release_done.send(()).expect("the waiter's runtime waits");
    let (left, lost) = timeout(
        NO_HANG,
        tokio::task::spawn_blocking(move || waiter_thread.join()),
    )
    .await
    .expect("the waiter's thread finishes")
    .expect("join")
    .expect("the waiter's thread");
    assert!(
        !lost && !left.is_zero(),
        "acquire returned a guard already lost (validity left {left:?})"
    );
}

/// A waiter confirms a lock handed to it by extending it to its ttl
/// (always here: its lease is not renewed, so no grant is taken as it
/// comes), within the grant window the server counts from the release
/// (2 s, or what is left of a grant counted from a refresh, at least
/// 1.5 s). On a slow link (400 ms each way) to a server that has just lost
/// its scripts (`SCRIPT FLUSH`; a restart or a failover does the same), an
/// `EVALSHA` answered `NOSCRIPT` made the confirmation several round trips,
/// past the window: the grant lapsed, the lock sat idle, and the waiter
/// behind took it. The confirmation is one round trip whatever the script
/// cache holds: the granted waiter holds the lock first.
async fn first_handoff_after_the_scripts_are_flushed_is_confirmed_within_the_grant_window(
    engine: Engine,
) {
    const ONE_WAY: Duration = Duration::from_millis(400);
    let (server, held) = server_with_key_held(engine).await;
    let proxy = FaultProxy::start(server.addr());
    let slow = connect(&proxy.url()).await;
    proxy.delay(ONE_WAY);
    let order = Arc::new(Mutex::new(Vec::new()));
    let holds = |manager: LockManager, name: &'static str, options: LockOptions| {
        let order = Arc::clone(&order);
        tokio::spawn(async move {
            let guard = manager
                .acquire(KEY, options)
                .await
                .expect("each waiter gets the lock in turn");
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(name);
            guard.release().await.expect("release");
        })
    };
    let slow_waiter = holds(
        slow,
        "granted",
        fixed_lease(Duration::from_secs(10)).wait(Duration::from_secs(30)),
    );
    until_queued(&server, 1).await;
    let next_waiter = holds(
        connect(&server.url()).await,
        "next",
        waiting(Duration::from_secs(30)),
    );
    until_queued(&server, 2).await;
    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    held.release().await.expect("holder releases");
    join_within(
        vec![slow_waiter, next_waiter],
        Duration::from_secs(30),
        "both waiters",
    )
    .await;
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(
        order,
        ["granted", "next"],
        "the grant to the waiter on the slow link lapsed before its confirmation landed"
    );
}
