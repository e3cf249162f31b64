//! Least privilege: the guide documents the ACL the conformance suites run
//! under (`redis_acl::` and `cluster_acl::` there), and a user missing one
//! permission of it gets `LockError::PermissionDenied` naming the rule to
//! add, not a generic server error.

use crate::support;

use leasehold::{LockError, LockManager};
use leasehold_testkit::RedisServer;
use support::{long, service_rules, ACL_PASSWORD, SERVICE_COMMANDS};

/// A server with the user `svc` granted the service ACL of `lock:` minus
/// every rule in `without`.
fn server_without(without: &[&str]) -> RedisServer {
    let rules: Vec<String> = service_rules("lock", false)
        .into_iter()
        .filter(|rule| !without.contains(&rule.as_str()))
        .collect();
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    RedisServer::builder()
        .acl_user("svc", ACL_PASSWORD, &rules)
        .start()
}

/// A manager on `server` as `svc`, keys under `namespace`.
async fn svc(server: &RedisServer, namespace: &str) -> LockManager {
    LockManager::builder()
        .namespace(namespace)
        .connect(&server.url_as("svc", ACL_PASSWORD))
        .await
        .expect("svc logs in")
}

/// As [`svc`], keeping no lock-delay: its uncontended attempt is a plain
/// `SET NX`, not a script.
async fn svc_without_lock_delay(server: &RedisServer, namespace: &str) -> LockManager {
    LockManager::builder()
        .namespace(namespace)
        .risk_two_holders_after_failover()
        .connect(&server.url_as("svc", ACL_PASSWORD))
        .await
        .expect("svc logs in")
}

/// The rule and message of `result`, which must be `PermissionDenied`.
#[track_caller]
fn denied<T>(result: Result<T, LockError>) -> (String, String) {
    match result {
        Err(err) => match &err {
            LockError::PermissionDenied { rule, .. } => (rule.clone(), err.to_string()),
            other => panic!("expected PermissionDenied, got {other:?}"),
        },
        Ok(_) => panic!("expected PermissionDenied, the call succeeded"),
    }
}

#[tokio::test]
async fn guide_documents_the_exact_acl_the_suites_run_under() {
    let guide = include_str!("../../src/guide/operating.md");
    assert!(
        guide.contains(SERVICE_COMMANDS),
        "the guide's Least privilege section (src/guide/operating.md) must list exactly: {SERVICE_COMMANDS}"
    );
}

#[tokio::test]
async fn user_without_set_is_told_to_add_plus_set() {
    let server = server_without(&["+set"]);
    let manager = svc_without_lock_delay(&server, "lock").await;
    let (rule, message) = denied(manager.try_acquire("k", long()).await);
    assert_eq!(rule, "`+set`");
    assert!(message.contains("ACL SETUSER"), "{message}");
}

#[tokio::test]
async fn user_without_script_load_is_told_to_add_it() {
    let server = server_without(&["+script|load"]);
    let manager = svc_without_lock_delay(&server, "lock").await;
    let guard = manager
        .acquire("k", long())
        .await
        .expect("SET NX is allowed");
    let (rule, _) = denied(guard.release().await);
    assert_eq!(rule, "`+script|load`");
}

/// The lock-delay's check reads `INFO` inside the grant scripts: a user
/// without it is refused (Redis does not name a command refused inside a
/// script, so the error points at the README's whole ACL, which has
/// `+info`, and `check()` names it); with the delay turned off it needs
/// none.
#[tokio::test]
async fn user_without_info_is_refused_unless_the_lock_delay_is_off() {
    let server = server_without(&["+info"]);
    let manager = svc(&server, "lock").await;
    let (rule, message) = denied(manager.try_acquire("k", long()).await);
    assert!(rule.contains("least-privilege ACL"), "{message}");
    let (rule, message) = denied(manager.check().await);
    assert!(rule.contains("`+info`"), "{message}");
    let unchecked = svc_without_lock_delay(&server, "lock").await;
    let guard = unchecked.try_acquire("k", long()).await.unwrap();
    assert!(guard.is_some(), "granted without the check");
}

#[tokio::test]
async fn namespace_outside_the_key_pattern_is_told_the_key_rule() {
    let server = server_without(&[]);
    let manager = svc(&server, "elsewhere").await;
    let (rule, _) = denied(manager.try_acquire("k", long()).await);
    assert!(rule.starts_with("`~<base>:* ~<base>-*`"), "{rule}");
}

#[tokio::test]
async fn command_refused_inside_a_lock_script_is_permission_denied() {
    // `SCRIPT LOAD` and `EVALSHA` allowed, the release script's own `DEL`
    // not.
    let server = server_without(&["+del"]);
    let manager = svc(&server, "lock").await;
    let guard = manager
        .acquire("k", long())
        .await
        .expect("SET NX is allowed");
    let (rule, _) = denied(guard.release().await);
    assert!(rule.contains("least-privilege ACL"), "{rule}");
}
