//! The server's own compare-and-delete and compare-and-renew: Valkey 9.1
//! releases a plain lock with `DELIFEQ`, Redis 8.6 with `DELEX … IFEQ`, and
//! both renew with `SET … IFEQ`, no script at all; Redis 7.0 keeps the
//! scripts. Queued waiters mark the lock's value, so the holder's native
//! release fails over to the scripted hand-off and no waiter is skipped;
//! the last waiter to leave clears the mark. Each native behaviour runs on
//! both servers that have the commands, as `valkey::NAME` and
//! `redis8::NAME`, and counts the commands each server answered (`INFO
//! commandstats`), so a test fails when its path is not the one that ran.
//!
//! Each test starts its own server on a free 127.0.0.1 port. Every loop is
//! bounded in count and time.

use crate::support;

use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::{Engine, RedisServer, RespValue};
use support::{
    command_calls, connect_without_lock_delay, join_within, lock_value, long, poll_async, renewed,
    service_rules, waiting, Harness, ACL_PASSWORD, PAST_ONE_TTL, PROMPTLY,
};
use tokio::time::sleep;

support::tests_on!(
    valkey,
    leasehold_testkit::Engine::Valkey,
    [
        releases_and_renews_a_lock_with_its_own_commands_and_no_script,
        a_queued_waiter_marks_the_lock_so_the_native_release_hands_it_over,
        the_last_waiter_to_leave_clears_the_mark_and_the_release_is_native_again,
        a_server_that_refuses_the_native_release_gets_the_scripts,
        an_acl_that_grants_the_native_release_keeps_it,
        the_native_commands_answer_as_the_runtime_reads_them,
    ]
);
support::tests_on!(
    redis8,
    leasehold_testkit::Engine::Redis8,
    [
        releases_and_renews_a_lock_with_its_own_commands_and_no_script,
        a_queued_waiter_marks_the_lock_so_the_native_release_hands_it_over,
        the_last_waiter_to_leave_clears_the_mark_and_the_release_is_native_again,
        a_server_that_refuses_the_native_release_gets_the_scripts,
        an_acl_that_grants_the_native_release_keeps_it,
        the_native_commands_answer_as_the_runtime_reads_them,
    ]
);

/// The compare-and-delete of `engine` as `INFO commandstats` and the ACL
/// name it: `delifeq` on Valkey, `delex` on Redis 8.
fn release_command(engine: Engine) -> &'static str {
    match engine {
        Engine::Valkey => "delifeq",
        Engine::Redis8 => "delex",
        Engine::Redis => panic!("Redis 7.0 has no native release"),
    }
}

/// `engine`'s compare-and-delete of `key` if its value is `value`, as the
/// runtime sends it.
fn release_args<'a>(engine: Engine, key: &'a str, value: &'a str) -> Vec<&'a str> {
    match engine {
        Engine::Redis8 => vec!["DELEX", key, "IFEQ", value],
        _ => vec!["DELIFEQ", key, value],
    }
}

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

/// The uncontended cycle is `SET NX PX`, `SET … IFEQ` renewals and the
/// native release: no script at all (the scripts' own calls would count as
/// script calls, so every `SET` counted here came from the client).
async fn releases_and_renews_a_lock_with_its_own_commands_and_no_script(engine: Engine) {
    let h = Harness::on_engine(engine).await;
    // Without a lock-delay: with one, the uncontended attempt is a script
    // that checks the node (see `lock_delay.rs`).
    let locks = connect_without_lock_delay(&h.server().url()).await;
    hold_through_renewals(&locks, "k").await;
    let server = h.server();
    assert_eq!(
        command_calls(server, release_command(engine)),
        1,
        "released by {}",
        release_command(engine)
    );
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

async fn a_queued_waiter_marks_the_lock_so_the_native_release_hands_it_over(engine: Engine) {
    let h = Harness::on_engine(engine).await;
    let guard = h.a.acquire("k", renewed()).await.unwrap();
    // The waiter keeps the lock until the release has been counted: its own
    // release, with the queue empty, is native too and would count again.
    let (counted, keep_until_counted) = tokio::sync::oneshot::channel::<()>();
    let waiter = tokio::spawn({
        let b = h.b.clone();
        async move {
            let guard = b.acquire("k", waiting(Duration::from_secs(10))).await;
            let guard = guard.expect("the waiter gets the lock");
            let _ = keep_until_counted.await;
            guard.release().await.unwrap();
        }
    });
    until_marked(h.server(), "k", true).await;
    // Renewals of the marked lock try SET IFEQ, which the mark fails, and
    // fall back to the script, which keeps it.
    let server = h.server();
    let (sets, scripts) = (command_calls(server, "set"), script_calls(server));
    sleep(PAST_ONE_TTL).await;
    assert!(!guard.is_lost(), "the holder kept renewing the marked lock");
    assert!(command_calls(server, "set") > sets, "SET IFEQ was tried");
    assert!(script_calls(server) > scripts, "and the script renewed");
    let release = release_command(engine);
    let (deletes, scripts) = (command_calls(server, release), script_calls(server));
    guard.release().await.unwrap();
    assert_eq!(
        command_calls(server, release),
        deletes + 1,
        "{release} was tried, and the mark failed it"
    );
    assert!(
        script_calls(server) > scripts,
        "the release fell back to the scripted hand-off"
    );
    let _ = counted.send(());
    join_within(vec![waiter], PROMPTLY, "the queued waiter").await;
}

async fn the_last_waiter_to_leave_clears_the_mark_and_the_release_is_native_again(engine: Engine) {
    let h = Harness::on_engine(engine).await;
    let guard = h.a.acquire("k", long()).await.unwrap();
    let gave_up = h.b.acquire("k", waiting(Duration::from_millis(300))).await;
    assert!(gave_up.is_err(), "the waiter gives up: {gave_up:?}");
    until_marked(h.server(), "k", false).await;
    let release = release_command(engine);
    let (deletes, scripts) = (command_calls(h.server(), release), script_calls(h.server()));
    guard.release().await.unwrap();
    assert_eq!(command_calls(h.server(), release), deletes + 1);
    assert_eq!(
        script_calls(h.server()),
        scripts,
        "no script for the release"
    );
}

/// How often the server's ACL refused `command` (the `count` of its `ACL
/// LOG` entries, which group repeated denials).
fn acl_denials(server: &RedisServer, command: &str) -> i64 {
    let Ok(RespValue::Array(entries)) = server.command(&["ACL", "LOG"]) else {
        panic!("ACL LOG is an array");
    };
    let field = |fields: &[RespValue], name: &str| {
        fields
            .chunks_exact(2)
            .find(|pair| pair[0].as_str() == Some(name))
            .map(|pair| pair[1].clone())
    };
    entries
        .iter()
        .filter_map(|entry| match entry {
            RespValue::Array(fields) => Some(fields),
            _ => None,
        })
        .filter(|fields| {
            field(fields, "object")
                .and_then(|object| object.as_str().map(str::to_owned))
                .as_deref()
                == Some(command)
        })
        .map(|fields| match field(fields, "count") {
            Some(RespValue::Integer(count)) => count,
            other => panic!("ACL LOG count: {other:?}"),
        })
        .sum()
}

/// A server of `engine` whose user `svc` has the guide's least-privilege
/// ACL plus `extra` rules, and a manager logged in as `svc` (keeping no
/// lock-delay: the native commands serve its uncontended cycle).
async fn acl_server(engine: Engine, extra: &[&str]) -> (RedisServer, LockManager) {
    let rules = service_rules("lock", false);
    let rules: Vec<&str> = rules
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
        .collect();
    let server = RedisServer::builder()
        .engine(engine)
        .acl_user("svc", ACL_PASSWORD, &rules)
        .start();
    let locks = LockManager::builder()
        .risk_two_holders_after_failover()
        .connect(&server.url_as("svc", ACL_PASSWORD))
        .await
        .expect("svc logs in");
    (server, locks)
}

/// The README's least-privilege ACL has no `+delifeq` or `+delex` (Redis 7
/// does not know the commands, so the line would not load there): the
/// server refuses the first native release, once, and the manager uses the
/// scripts from then on, for releases and renewals alike.
async fn a_server_that_refuses_the_native_release_gets_the_scripts(engine: Engine) {
    let (server, locks) = acl_server(engine, &[]).await;
    for cycle in 0..3 {
        let guard = locks.acquire("k", long()).await.unwrap();
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("release {cycle}: {err:?}"));
        assert_eq!(lock_value(&server, "k"), RespValue::Nil, "released");
    }
    let release = release_command(engine);
    assert_eq!(
        acl_denials(&server, release),
        1,
        "the first release tried {release}, once"
    );
    assert!(script_calls(&server) >= 3, "the releases were scripts");
    let (sets, scripts) = (command_calls(&server, "set"), script_calls(&server));
    hold_through_renewals(&locks, "k").await;
    assert_eq!(
        command_calls(&server, "set"),
        sets + 1,
        "only the SET NX: the renewals left SET IFEQ too"
    );
    assert!(
        script_calls(&server) >= scripts + 3,
        "renewals and release by script"
    );
}

/// The README's ACL line with the native release added (`+delifeq` on
/// Valkey, `+delex` on Redis 8) loads, and the releases are native.
async fn an_acl_that_grants_the_native_release_keeps_it(engine: Engine) {
    let release = release_command(engine);
    let granted = format!("+{release}");
    let (server, locks) = acl_server(engine, &[&granted]).await;
    for _ in 0..3 {
        let guard = locks.acquire("k", long()).await.unwrap();
        guard.release().await.unwrap();
    }
    assert_eq!(command_calls(&server, release), 3, "native releases");
    assert_eq!(script_calls(&server), 0, "no script");
    assert_eq!(acl_denials(&server, release), 0);
}

/// The replies the runtime relies on, asked of the server directly. Valkey
/// and Redis 8 agree on every one the runtime reads: the compare-and-delete
/// answers 1 when it deleted and 0 otherwise (a missing key included), and
/// `SET … IFEQ` answers nil, creating nothing, on a missing key. They differ
/// on a key that is not a string: Valkey's `DELIFEQ` answers `WRONGTYPE`,
/// Redis 8's `DELEX … IFEQ` `ERR Key should be of string type`; either is
/// an error reply, which the runtime takes as "ask the script" (whose own
/// error then reaches the caller).
async fn the_native_commands_answer_as_the_runtime_reads_them(engine: Engine) {
    let server = RedisServer::builder().engine(engine).start();
    let ask = |args: &[&str]| server.command(args);
    assert_eq!(
        ask(&release_args(engine, "k", "t")),
        Ok(RespValue::Integer(0)),
        "missing key"
    );
    ask(&["SET", "k", "t"]).unwrap();
    assert_eq!(
        ask(&release_args(engine, "k", "other")),
        Ok(RespValue::Integer(0)),
        "not ours"
    );
    assert_eq!(
        ask(&release_args(engine, "k", "t")),
        Ok(RespValue::Integer(1)),
        "ours"
    );
    assert_eq!(ask(&["EXISTS", "k"]), Ok(RespValue::Integer(0)), "deleted");

    let renew = |value: &'static str| ["SET", "k", "t", "IFEQ", value, "PX", "60000"];
    assert_eq!(ask(&renew("t")), Ok(RespValue::Nil), "missing key: nil");
    assert_eq!(
        ask(&["EXISTS", "k"]),
        Ok(RespValue::Integer(0)),
        "and no key created"
    );
    ask(&["SET", "k", "t"]).unwrap();
    assert_eq!(ask(&renew("other")), Ok(RespValue::Nil), "not ours: nil");
    assert_eq!(ask(&["PTTL", "k"]), Ok(RespValue::Integer(-1)), "untouched");
    assert_eq!(ask(&renew("t")), Ok(RespValue::Simple("OK".into())), "ours");
    let ttl = ask(&["PTTL", "k"]).unwrap();
    assert!(
        matches!(ttl, RespValue::Integer(1..=60000)),
        "renewed: {ttl:?}"
    );

    ask(&["HSET", "h", "f", "v"]).unwrap();
    let refused = ask(&release_args(engine, "h", "t")).expect_err("not a string");
    let expected = match engine {
        Engine::Redis8 => "error reply: ERR Key should be of string type",
        _ => "error reply: WRONGTYPE",
    };
    assert!(refused.contains(expected), "{engine:?}: {refused}");
}
