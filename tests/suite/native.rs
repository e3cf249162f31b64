//! The server's own compare-and-delete and compare-and-renew: Valkey 9.1
//! releases a plain lock with `DELIFEQ` and renews with `SET … IFEQ`, no
//! script at all; Redis 7.0 keeps the scripts. Queued waiters mark the
//! lock's value, so the holder's native release fails over to the scripted
//! hand-off and no waiter is skipped; the last waiter to leave clears the
//! mark.
//!
//! Each test starts its own server on a free 127.0.0.1 port. Every loop is
//! bounded in count and time.

use crate::support;

use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::{Engine, RedisServer, RespValue};
use support::{
    command_calls, join_within, lock_value, long, poll_async, renewed, service_rules, waiting,
    Harness, ACL_PASSWORD, PAST_ONE_TTL, PROMPTLY,
};
use tokio::time::sleep;

/// Script calls the server has answered, of every form.
fn script_calls(server: &RedisServer) -> u64 {
    ["evalsha", "eval", "evalsha_ro", "eval_ro"]
        .iter()
        .map(|command| command_calls(server, command))
        .sum()
}

/// Holds `key` on `locks` through several renewals, then releases it.
async fn hold_through_renewals(locks: &LockManager, key: &str) {
    let guard = locks.acquire(key, renewed()).await.unwrap();
    sleep(PAST_ONE_TTL).await;
    assert!(!guard.is_lost(), "renewals kept the lease");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_releases_and_renews_a_lock_with_its_own_commands_and_no_script() {
    let h = Harness::valkey().await;
    hold_through_renewals(&h.a, "k").await;
    let server = h.server();
    assert_eq!(command_calls(server, "delifeq"), 1, "released by DELIFEQ");
    assert!(
        command_calls(server, "set") >= 3,
        "SET NX, then SET IFEQ renewals"
    );
    assert_eq!(
        script_calls(server),
        0,
        "no script in the uncontended cycle"
    );
    assert!(
        h.a.try_acquire("k", long()).await.unwrap().is_some(),
        "released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_7_releases_and_renews_with_the_scripts() {
    let h = Harness::redis().await;
    hold_through_renewals(&h.a, "k").await;
    let server = h.server();
    assert_eq!(command_calls(server, "delifeq"), 0);
    assert_eq!(command_calls(server, "delex"), 0);
    assert!(
        script_calls(server) >= 3,
        "renewals and the release are scripts"
    );
}

/// Waits (bounded) until the lock's value on `server` carries the waiters'
/// mark (`marked`) or not.
async fn until_marked(server: &RedisServer, key: &str, marked: bool) {
    let reached = poll_async(PROMPTLY, || async {
        let value = lock_value(server, key);
        value
            .as_str()
            .is_some_and(|value| value.starts_with('!') == marked)
    })
    .await;
    let value = lock_value(server, key);
    assert!(reached, "marked {marked}: the lock's value is {value:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_marks_the_lock_so_the_native_release_hands_it_over() {
    let h = Harness::valkey().await;
    let guard = h.a.acquire("k", renewed()).await.unwrap();
    let waiter = tokio::spawn({
        let b = h.b.clone();
        async move {
            let guard = b.acquire("k", waiting(Duration::from_secs(10))).await;
            guard
                .expect("the waiter gets the lock")
                .release()
                .await
                .unwrap();
        }
    });
    until_marked(h.server(), "k", true).await;
    // Renewals of the marked lock fall back to the script and keep it.
    sleep(PAST_ONE_TTL).await;
    assert!(!guard.is_lost(), "the holder kept renewing the marked lock");
    let scripts_before = script_calls(h.server());
    guard.release().await.unwrap();
    assert!(
        script_calls(h.server()) > scripts_before,
        "the release fell back to the scripted hand-off"
    );
    join_within(vec![waiter], PROMPTLY, "the queued waiter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_waiter_to_leave_clears_the_mark_and_the_release_is_native_again() {
    let h = Harness::valkey().await;
    let guard = h.a.acquire("k", long()).await.unwrap();
    let gave_up = h.b.acquire("k", waiting(Duration::from_millis(300))).await;
    assert!(gave_up.is_err(), "the waiter gives up: {gave_up:?}");
    until_marked(h.server(), "k", false).await;
    let (deletes, scripts) = (
        command_calls(h.server(), "delifeq"),
        script_calls(h.server()),
    );
    guard.release().await.unwrap();
    assert_eq!(command_calls(h.server(), "delifeq"), deletes + 1);
    assert_eq!(
        script_calls(h.server()),
        scripts,
        "no script for the release"
    );
}

/// The README's least-privilege ACL has no `+delifeq` (Redis 7 does not
/// know the command, so the line would not load there): Valkey refuses the
/// first native release, and the manager uses the scripts from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_the_native_release_gets_the_scripts() {
    let rules = service_rules("lock", false);
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let server = RedisServer::builder()
        .engine(Engine::Valkey)
        .acl_user("svc", ACL_PASSWORD, &rules)
        .start();
    let locks = LockManager::connect(&server.url_as("svc", ACL_PASSWORD))
        .await
        .expect("svc logs in");
    for cycle in 0..3 {
        let guard = locks.acquire("k", long()).await.unwrap();
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("release {cycle}: {err:?}"));
        assert_eq!(lock_value(&server, "k"), RespValue::Nil, "released");
    }
    assert!(script_calls(&server) >= 3, "the releases were scripts");
}
