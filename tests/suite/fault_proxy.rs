//! The testkit's `FaultProxy` as a real client sees it. redis-rs sends every
//! request of a connection on one socket and pairs each reply with the
//! oldest request still waiting for one; a proxy that dropped a request's
//! bytes and then carried the same connection on would pair every later
//! reply with the wrong request. A stress probe built on such a proxy once
//! reported overlapping holders and a fencing token of 0 that no script
//! issues: the test tools must fail the way a network does.

use std::time::Duration;

use futures_util::future::join_all;
use leasehold_testkit::{FaultProxy, RedisServer};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::support::PROMPTLY;

/// How long a request waits for its reply before it fails.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

fn value_of(key: &str) -> String {
    format!("value-of-{key}")
}

async fn get(connection: &ConnectionManager, key: &str) -> redis::RedisResult<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut connection.clone())
        .await
}

/// `GET a` goes into a blackhole (and times out); once the blackhole ends,
/// rounds of `GET a`..`GET d` in flight together each get their own key's
/// value or an error (the connection closed, then made again), never
/// another key's value; and the connection recovers within 10 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_client_never_receives_another_commands_reply_after_a_blackhole() {
    let server = RedisServer::start();
    for key in KEYS {
        server.command(&["SET", key, &value_of(key)]).expect("SET");
    }
    let proxy = FaultProxy::start(server.addr());
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(PROMPTLY));
    let connection = redis::Client::open(proxy.url())
        .expect("the proxy's URL")
        .get_connection_manager_with_config(config)
        .await
        .expect("connect through the proxy");
    assert_eq!(get(&connection, "a").await.ok(), Some(value_of("a")));

    proxy.blackhole();
    assert!(
        get(&connection, "a").await.is_err(),
        "a request into the blackhole got an answer"
    );
    proxy.restore();

    for round in 0..10 {
        let connection = &connection;
        let replies =
            join_all(KEYS.map(|key| async move { (key, get(connection, key).await) })).await;
        let mut answered = 0;
        for (key, reply) in replies {
            if let Ok(value) = reply {
                assert_eq!(
                    value,
                    value_of(key),
                    "round {round}: GET {key} got another command's reply"
                );
                answered += 1;
            }
        }
        if answered == KEYS.len() {
            return;
        }
    }
    panic!("the connection never recovered from the blackhole in 10 rounds");
}
