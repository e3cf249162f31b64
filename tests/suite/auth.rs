//! Credentials are checked when a manager is built: a missing password, a
//! wrong one and one given to a server without any fail every constructor
//! with `LockError::Auth` (never `Connection`, never retryable), within the
//! connect timeout, naming the server and never the password. A password
//! changed on the server while the manager runs is reported as `Auth` on the
//! next command. (Sentinels' own credentials: `sentinel::sentinels_asking_…`.)

use std::error::Error;
use std::time::Duration;

use crate::support;

use leasehold::{LockError, LockManager};
use leasehold_testkit::RedisServer;
use support::{cluster_acl_user, long, poll_async, shared_cluster, ACL_PASSWORD, NO_HANG};

/// A password no message may contain.
const SECRET: &str = "s3cret-Pw-9";

/// Generous bound on a refused constructor: its connect timeout is 500 ms.
const REFUSED_WITHIN: Duration = Duration::from_secs(5);

fn builder() -> leasehold::LockManagerBuilder {
    LockManager::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
}

/// A server whose default user asks for [`SECRET`].
fn server_with_password() -> RedisServer {
    let server = RedisServer::start();
    server
        .command(&["CONFIG", "SET", "requirepass", SECRET])
        .expect("CONFIG SET requirepass");
    server
}

/// `result` as an `Auth` error, checked for what every refusal promises:
/// not retryable, the cause kept, no password in its message or `Debug`.
#[track_caller]
fn refused<T>(result: Result<T, LockError>, what: &str) -> LockError {
    let err = match result {
        Err(err @ LockError::Auth { .. }) => err,
        Err(other) => panic!("{what}: expected Auth, got {other:?}"),
        Ok(_) => panic!("{what}: expected Auth, the call succeeded"),
    };
    assert!(!err.is_retryable(), "{what}: {err}");
    assert_eq!(err.http_status(), 500, "{what}");
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(
            !shown.contains(SECRET),
            "{what}: the password shows: {shown}"
        );
        assert!(
            !shown.contains("wrong-pw"),
            "{what}: the password shows: {shown}"
        );
    }
    assert!(
        !err.to_string().contains("AuthenticationFailed"),
        "{what}: a client library's names in the message: {err}"
    );
    err
}

/// Times `connect`, which must be refused within [`REFUSED_WITHIN`].
async fn within<T>(connect: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(REFUSED_WITHIN, connect)
        .await
        .expect("the constructor answered within its time limits")
}

#[tokio::test]
async fn a_missing_password_fails_at_connect_not_at_the_first_lock() {
    let server = server_with_password();
    let result = within(builder().connect(&server.url())).await;
    let err = refused(result, "no password");
    assert!(err.to_string().contains("asks for a password"), "{err}");
    assert!(
        err.to_string().contains(&server.port().to_string()),
        "{err}"
    );
    let cause = err.source().expect("the server's refusal is the source");
    assert!(cause.to_string().contains("NOAUTH"), "{cause}");
}

#[tokio::test]
async fn a_wrong_password_is_auth_not_unreachable() {
    let server = server_with_password();
    let url = format!("redis://:wrong-pw@{}", server.addr());
    let err = refused(within(builder().connect(&url)).await, "wrong password");
    assert!(
        err.to_string()
            .contains("refused the user name or password"),
        "{err}"
    );
    assert!(err.source().is_some(), "the cause is kept");
}

#[tokio::test]
async fn a_password_sent_to_a_server_without_one_is_refused() {
    let server = RedisServer::start();
    let url = format!("redis://:{SECRET}@{}", server.addr());
    let err = refused(within(builder().connect(&url)).await, "needless password");
    assert!(err.to_string().contains("has no password set"), "{err}");
}

/// The clients connected to `server` besides the one asking.
fn other_clients(server: &RedisServer) -> usize {
    let list = server.command(&["CLIENT", "LIST"]).expect("CLIENT LIST");
    let text = list.as_str().expect("CLIENT LIST is text").to_owned();
    text.lines().count().saturating_sub(1)
}

/// A refused constructor leaves no connection behind: not on the server
/// that refused, nor on the Redlock nodes that accepted.
#[tokio::test]
async fn a_refused_constructor_leaves_no_connection_open() {
    let nodes = RedisServer::start_independent(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    nodes[2]
        .command(&["CONFIG", "SET", "requirepass", SECRET])
        .expect("CONFIG SET requirepass");
    refused(within(builder().redlock(&urls)).await, "redlock");
    refused(within(builder().connect(&nodes[2].url())).await, "connect");
    // The refusing node's testkit connection is refused too: count the others.
    let closed = poll_async(NO_HANG, || async {
        other_clients(&nodes[0]) == 0 && other_clients(&nodes[1]) == 0
    })
    .await;
    assert!(
        closed,
        "connections left: {} and {}",
        other_clients(&nodes[0]),
        other_clients(&nodes[1])
    );
}

#[tokio::test]
async fn the_right_password_connects_and_locks() {
    let server = server_with_password();
    let url = format!("redis://:{SECRET}@{}", server.addr());
    let locks = within(builder().connect(&url)).await.expect("connects");
    let guard = locks.acquire("auth:right", long()).await.unwrap();
    guard.release().await.unwrap();
}

/// The password changed on the server and the manager's connection dropped:
/// it logs in again with the old one, and the next call says `Auth`.
#[tokio::test]
async fn a_password_rotated_while_running_is_reported_as_auth() {
    let server = RedisServer::builder()
        .acl_user("svc", SECRET, &["+@all", "~*", "&*"])
        .start();
    let locks = within(builder().connect(&server.url_as("svc", SECRET)))
        .await
        .expect("connects");
    server
        .command(&["ACL", "SETUSER", "svc", "resetpass", ">rotated-pw"])
        .expect("ACL SETUSER");
    server
        .command(&["CLIENT", "KILL", "USER", "svc"])
        .expect("CLIENT KILL");
    // The first call may still meet the dropped connection; the reconnection
    // after it logs in with the old password.
    let mut last = None;
    for _ in 0..3 {
        match locks.try_acquire("auth:rotated", long()).await {
            Err(err @ LockError::Auth { .. }) => {
                last = Some(err);
                break;
            }
            other => last = other.err(),
        }
    }
    let err = refused(last.map_or(Ok(()), Err), "rotated password");
    assert!(
        err.to_string()
            .contains("refused the user name or password"),
        "{err}"
    );
}

#[tokio::test]
async fn redlock_names_the_node_whose_password_is_wrong() {
    let nodes = RedisServer::start_independent(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    nodes[1]
        .command(&["CONFIG", "SET", "requirepass", SECRET])
        .expect("CONFIG SET requirepass");
    let err = refused(within(builder().redlock(&urls)).await, "redlock");
    assert!(
        err.to_string().contains(&nodes[1].port().to_string()),
        "names the refusing node: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_user_with_a_wrong_password_is_refused() {
    let cluster = shared_cluster();
    let user = cluster_acl_user(&cluster);
    let wrong: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| url.replacen("redis://", &format!("redis://{user}:wrong-pw@"), 1))
        .collect();
    refused(
        within(builder().cluster(&wrong)).await,
        "cluster, wrong password",
    );
    let right = cluster.seed_urls_as(&user, ACL_PASSWORD);
    within(builder().namespace(user.as_str()).cluster(&right))
        .await
        .expect("the right password connects");
}
