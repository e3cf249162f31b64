//! The lock-delay's check without `INFO` (issue 47): the uncontended
//! attempt is sent under a session (a nonce in the script's text, see
//! `runtime/src/backend/session.rs`), whose check compares the marker with
//! what the same process noted for that session, and asks the server for
//! `INFO` only when they differ or the note has ended. These tests show the
//! `INFO` gone from the steady cycle, and that no event the full check
//! catches slips past the cheap one: a server restarted from a snapshot
//! that holds the note, a replica promoted by hand while a manager's
//! connection to it stays open (its session loaded there), and a flushed
//! script cache.
//!
//! Each test starts its own servers on free 127.0.0.1 ports. Every loop is
//! bounded in count and time.

use crate::support;

use std::time::{Duration, Instant};

use leasehold::{LockError, LockOptions};
use leasehold_testkit::{Engine, RedisServer, RespValue};
use support::{answered, command_calls, connect, lock_value, NO_HANG};

use crate::failover::master_and_proxied_replica;

/// A lease nobody renews, long so that the session's note is kept its
/// longest (a second; half the delay, the longest ttl, when shorter).
fn unrenewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(30)).renew(false)
}

/// Takes and releases `key` once, within [`NO_HANG`].
async fn cycle(manager: &leasehold::LockManager, key: &str) {
    let guard = tokio::time::timeout(NO_HANG, manager.try_acquire(key, unrenewed()))
        .await
        .expect("answered")
        .expect("no error")
        .expect("the free key is granted");
    guard.release().await.expect("released");
}

/// The steady uncontended cycle asks for no `INFO`: at most the full check
/// of each time the session's note ends (twice `INFO`, at most once a
/// second, plus the first), where every cycle asked twice before. On every
/// engine: the note's write without replication is Redis's own
/// `redis.set_repl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uncontended_cycle_asks_for_no_info_while_its_session_is_vouched_for() {
    for engine in Engine::ALL {
        uncontended_cycles_ask_for_no_info(engine).await;
    }
}

async fn uncontended_cycles_ask_for_no_info(engine: Engine) {
    let server = RedisServer::builder().engine(engine).start();
    let manager = connect(&server.url()).await;
    cycle(&manager, "warm-up").await;

    server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let started = Instant::now();
    let cycles: u64 = 200;
    for n in 0..cycles {
        cycle(&manager, &format!("order-{n}")).await;
    }
    let seconds = started.elapsed().as_secs();
    let infos = command_calls(&server, "info");
    assert!(
        infos <= 2 * (seconds + 2),
        "{engine:?}: {infos} INFO calls for {cycles} cycles in {seconds} s: the check asked for INFO on the cheap path"
    );
    assert_eq!(
        command_calls(&server, "script|load"),
        0,
        "{engine:?}: the session stays loaded"
    );
}

/// A server killed after a snapshot that holds the marker and a session's
/// note, and started again from it: a lock granted after the snapshot is
/// lost, and its holder may still believe it valid. The session of the
/// manager that left the note does not exist in the new process (its
/// script cache starts empty), so that manager's next attempt takes a new
/// session and the full check, which sees another process and starts the
/// delay: no grant, though the snapshot's marker and note still agree.
/// Nor to a manager started after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_from_a_snapshot_with_a_note_grants_nothing_it_lost() {
    for engine in Engine::ALL {
        restarted_from_a_snapshot_with_a_note(engine).await;
    }
}

async fn restarted_from_a_snapshot_with_a_note(engine: Engine) {
    let mut server = RedisServer::builder().engine(engine).start();
    let holder = connect(&server.url()).await;
    let rival = connect(&server.url()).await;
    cycle(&rival, "before").await;
    server.command(&["SAVE"]).expect("SAVE");
    let lost = holder
        .try_acquire("order-42", unrenewed())
        .await
        .expect("answered")
        .expect("granted after the snapshot");

    server.restart_from_disk();
    assert_eq!(
        lock_value(&server, "order-42"),
        RespValue::Nil,
        "the grant after the snapshot is lost"
    );
    let again = answered("the restarted server", || {
        rival.try_acquire("order-42", unrenewed())
    })
    .await;
    assert!(
        again.is_none(),
        "{engine:?}: the restarted server granted a lock it lost, under the note of a session"
    );
    let fresh = connect(&server.url()).await;
    let late = answered("the restarted server", || {
        fresh.try_acquire("order-42", unrenewed())
    })
    .await;
    assert!(
        late.is_none(),
        "{engine:?}: a manager started after it was granted it"
    );
    drop(lost);
}

/// A manager connected to a replica loads its session there (its attempt
/// is refused: a replica takes no writes). The replica misses a grant of
/// the primary, which dies, and is promoted by hand; the manager's
/// connection stays open, so its session runs there, with the marker the
/// primary wrote. Nothing the replica's process noted vouches for it: the
/// full check sees the promotion and starts the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_promoted_by_hand_under_an_open_session_grants_nothing_it_missed() {
    let (mut primary, replica, link) = master_and_proxied_replica();
    let first = connect(&primary.url()).await;
    cycle(&first, "before").await;
    let on_replica = connect(&replica.url()).await;
    let refused = tokio::time::timeout(NO_HANG, on_replica.try_acquire("other", unrenewed()))
        .await
        .expect("answered");
    assert!(
        matches!(refused, Err(ref err) if !matches!(err, LockError::Connection { .. })),
        "a replica refuses a grant: {refused:?}"
    );

    link.blackhole();
    let _lost = first
        .try_acquire("order-42", unrenewed())
        .await
        .expect("answered")
        .expect("the primary grants");
    primary.kill();
    replica.promote();
    assert_eq!(lock_value(&replica, "order-42"), RespValue::Nil);

    let again = answered("the restarted server", || {
        on_replica.try_acquire("order-42", unrenewed())
    })
    .await;
    assert!(
        again.is_none(),
        "the promoted replica granted a lock it missed, under a session loaded before"
    );
}

/// `SCRIPT FLUSH` drops the manager's session from the server: its next
/// attempt loads a new one and answers as the full check does (a held lock
/// stays held), and the cycles after it take the cheap path again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_script_cache_gets_a_new_session() {
    let server = RedisServer::start();
    let manager = connect(&server.url()).await;
    cycle(&manager, "before").await;
    let held = manager
        .try_acquire("order-42", unrenewed())
        .await
        .expect("answered")
        .expect("granted");

    server.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    let busy = manager.try_acquire("order-42", unrenewed()).await;
    assert!(matches!(busy, Ok(None)), "a held lock stays held: {busy:?}");
    cycle(&manager, "after").await;

    server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let started = Instant::now();
    for n in 0..50 {
        cycle(&manager, &format!("after-{n}")).await;
    }
    let seconds = started.elapsed().as_secs();
    let infos = command_calls(&server, "info");
    assert!(
        infos <= 2 * (seconds + 2),
        "{infos} INFO calls for 50 cycles in {seconds} s: the new session takes no cheap path"
    );
    assert_eq!(command_calls(&server, "script|load"), 0);
    held.release().await.expect("released");
}

/// Attempts in flight together on a manager that has no session yet (its
/// first ones, or all those at a restart) load one session between them,
/// not one each: every session is a script the server keeps (Redis 7.0
/// until `SCRIPT FLUSH` or a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_in_flight_together_load_one_session() {
    let server = RedisServer::start();
    let manager = connect(&server.url()).await;
    let attempts = (0..32).map(|n| {
        let manager = manager.clone();
        tokio::spawn(async move {
            let key = format!("order-{n}");
            tokio::time::timeout(NO_HANG, manager.try_acquire(&key, unrenewed()))
                .await
                .expect("answered")
                .expect("no error")
                .expect("the free key is granted")
        })
    });
    let guards = futures_util::future::join_all(attempts).await;
    assert_eq!(cached_scripts(&server), 1, "one session loaded");
    drop(guards);
}

/// How many scripts the server keeps (`INFO memory`).
fn cached_scripts(server: &RedisServer) -> u64 {
    let reply = server.command(&["INFO", "memory"]).expect("INFO memory");
    reply
        .as_str()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("number_of_cached_scripts:"))
        })
        .and_then(|count| count.trim().parse().ok())
        .expect("INFO memory names number_of_cached_scripts")
}

/// A waiter's attempts that keep its place in the queue (`acquire.lua`)
/// ask for no `INFO` either: at most the full checks of each time a
/// session's note ends, for the uncontended attempt's session and the
/// queueing one's, where each of those attempts asked twice before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiters_attempts_ask_for_no_info_while_their_session_is_vouched_for() {
    let server = RedisServer::start();
    let holder = connect(&server.url()).await;
    let waiter = connect(&server.url()).await;
    let _held = holder
        .try_acquire("order-42", unrenewed())
        .await
        .expect("answered")
        .expect("granted");
    let wait = unrenewed().wait(Duration::from_millis(100));
    let waited = waiter.acquire("order-42", wait.clone()).await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );

    server.command(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
    let started = Instant::now();
    let waits: u64 = 30;
    for _ in 0..waits {
        let waited = tokio::time::timeout(NO_HANG, waiter.acquire("order-42", wait.clone()))
            .await
            .expect("the waiter returns within its wait");
        assert!(
            matches!(waited, Err(LockError::Timeout { .. })),
            "{waited:?}"
        );
    }
    let seconds = started.elapsed().as_secs();
    let queued = command_calls(&server, "zadd");
    assert!(queued >= waits, "each wait kept a place: {queued} ZADD");
    let infos = command_calls(&server, "info");
    assert!(
        infos <= 4 * (seconds + 2),
        "{infos} INFO calls for {waits} waits in {seconds} s: a waiter's check asked for INFO"
    );
}
