//! `LockManager::check`, the start-up and readiness probe: it names each
//! node with its round trip, server and native commands, fails with
//! `PermissionDenied` naming every ACL rule the user lacks (before any lock
//! is taken), lists the settings that weaken the guarantees as risks, keeps
//! a failed Redlock node or Sentinel in the report, and leaves nothing
//! behind on the server.

use std::time::Duration;

use crate::support;

use leasehold::{LockDelayState, LockError, LockManager, LockOptions, NodeRole, Risk, Verdict};
use leasehold_testkit::{Engine, RedisServer, RespValue};
use support::{
    cluster_manager, cluster_namespace, on_every_engine, sentinel_manager, sentinel_namespace,
    service_rules, shared_cluster, shared_sentinel, ACL_PASSWORD,
};

fn builder() -> leasehold::LockManagerBuilder {
    LockManager::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
}

/// The number of keys on `server`.
fn keys_on(server: &RedisServer) -> i64 {
    match server.command(&["DBSIZE"]) {
        Ok(RespValue::Integer(keys)) => keys,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// A plain server: one primary that answered, its server named, no native
/// command on Redis 7 and both on Valkey 9 and Redis 8.6, no append-only
/// file reported,
/// and no key left behind by the probe.
async fn one_server_is_reported_with_its_version_and_native_commands(engine: Engine) {
    let server = RedisServer::builder().engine(engine).start();
    let locks = builder().connect(&server.url()).await.unwrap();
    let report = locks.check().await.expect("a plain server passes");
    assert_eq!(report.deployment, "one server");
    let [node] = report.nodes.as_slice() else {
        panic!("one node: {report}");
    };
    assert_eq!(node.role, NodeRole::Primary);
    assert!(node.round_trip.is_some(), "{report}");
    assert!(node.failure.is_none(), "{report}");
    assert!(
        node.address.ends_with(&server.port().to_string()),
        "{report}"
    );
    let server_name = node.server.clone().expect("HELLO names the server");
    match engine {
        Engine::Valkey => {
            assert!(server_name.starts_with("valkey 9"), "{report}");
            assert_eq!(node.native, ["DELIFEQ", "SET IFEQ"], "{report}");
        }
        Engine::Redis8 => {
            assert!(server_name.starts_with("redis 8.6"), "{report}");
            assert_eq!(node.native, ["DELEX IFEQ", "SET IFEQ"], "{report}");
        }
        Engine::Redis => {
            assert!(server_name.starts_with("redis 7"), "{report}");
            assert!(node.native.is_empty(), "Redis 7 has none: {report}");
        }
    }
    assert!(
        report.risks.contains(&Risk::NoAppendOnlyFile {
            node: node.address.clone()
        }),
        "the testkit's servers run without AOF: {report}"
    );
    assert_eq!(report.verdict(), Verdict::AtRisk);
    let shown = report.to_string();
    assert!(shown.contains("primary 127.0.0.1:"), "{shown}");
    assert!(shown.contains("verdict: at risk"), "{shown}");
    assert_eq!(keys_on(&server), 0, "the probe leaves no key behind");
}

on_every_engine!(one_server_is_reported_with_its_version_and_native_commands);

#[tokio::test]
async fn an_evicting_server_is_a_risk() {
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("64mb")
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .arg("--appendonly")
        .arg("yes")
        .start();
    let locks = builder().connect(&server.url()).await.unwrap();
    let report = locks.check().await.unwrap();
    assert_eq!(
        report.risks,
        [Risk::Eviction {
            node: report.nodes[0].address.clone(),
            policy: "allkeys-lru".to_owned()
        }],
        "{report}"
    );
    assert!(report.to_string().contains("noeviction"), "{report}");
}

/// A user missing two rules is told both at once, before any lock; the
/// README's whole ACL passes, `INFO` (which the lock-delay reads) included,
/// so the settings are read too.
#[tokio::test]
async fn every_missing_acl_rule_is_named_at_once() {
    let rules: Vec<String> = service_rules("lock", false)
        .into_iter()
        .filter(|rule| rule != "+hset" && rule != "+zadd")
        .collect();
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let server = RedisServer::builder()
        .acl_user("svc", ACL_PASSWORD, &rules)
        .start();
    let locks = builder()
        .connect(&server.url_as("svc", ACL_PASSWORD))
        .await
        .unwrap();
    match locks.check().await {
        Err(LockError::PermissionDenied { rule, .. }) => {
            assert!(rule.contains("`+hset`"), "{rule}");
            assert!(rule.contains("`+zadd`"), "{rule}");
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }

    let full = support::acl_server();
    let locks = builder()
        .connect(&full.url_as("svc", ACL_PASSWORD))
        .await
        .unwrap();
    let report = locks.check().await.expect("the README's ACL is enough");
    assert_eq!(
        report.risks,
        [Risk::NoAppendOnlyFile {
            node: report.nodes[0].address.clone()
        }],
        "{report}"
    );
}

#[tokio::test]
async fn a_redlock_node_down_is_reported_and_a_quorum_passes() {
    let mut nodes = RedisServer::start_independent(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let locks = builder().redlock(&urls).await.unwrap();
    nodes[2].kill();
    let report = locks.check().await.expect("a quorum answers");
    assert_eq!(report.verdict(), Verdict::Degraded, "{report}");
    let failed: Vec<&str> = report
        .nodes
        .iter()
        .filter(|node| node.failure.is_some())
        .map(|node| node.address.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert!(failed[0].contains(&nodes[2].port().to_string()), "{report}");
    assert!(report.to_string().contains("FAILED"), "{report}");
    nodes[1].kill();
    match locks.check().await {
        Err(err @ LockError::Connection { .. }) => {
            assert!(err.to_string().contains("quorum"), "{err}");
        }
        other => panic!("expected Connection without a quorum, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_reports_the_primary_and_every_sentinel() {
    let topology = shared_sentinel();
    let locks = sentinel_manager(&topology, &sentinel_namespace()).await;
    let report = locks.check().await.unwrap();
    assert!(
        report.deployment.starts_with("Sentinel service"),
        "{report}"
    );
    let roles: Vec<NodeRole> = report.nodes.iter().map(|node| node.role).collect();
    assert_eq!(roles[0], NodeRole::Primary, "{report}");
    assert_eq!(
        roles
            .iter()
            .filter(|role| **role == NodeRole::Sentinel)
            .count(),
        topology.sentinel_urls().len(),
        "{report}"
    );
    assert!(
        report
            .risks
            .iter()
            .any(|risk| matches!(risk, Risk::AsyncReplication { .. })),
        "the primary's replicas, no grant waits for: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_reports_every_primary() {
    let cluster = shared_cluster();
    let locks = cluster_manager(&cluster, &cluster_namespace()).await;
    let report = locks.check().await.unwrap();
    assert_eq!(report.deployment, "Redis Cluster");
    assert_eq!(report.nodes.len(), cluster.primaries().len(), "{report}");
    assert!(
        report.nodes.iter().all(|node| node.round_trip.is_some()),
        "{report}"
    );
}

#[tokio::test]
async fn in_memory_is_healthy_and_empty() {
    let report = LockManager::in_memory().check().await.unwrap();
    assert!(report.nodes.is_empty());
    assert_eq!(report.verdict(), Verdict::Healthy);
}

/// A replica promoted by hand: the check shows its lock-delay pending (it
/// was promoted since its last grant), the first attempt starts the delay
/// and is refused, a wait shorter than the delay times out, and the check
/// then shows the delay running, with what is left of it (the delay is
/// long, so it cannot have ended by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_is_shown_in_its_lock_delay_and_when_it_ends() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replica_of(&primary);
    assert!(
        leasehold_testkit::poll_until(Duration::from_secs(10), || {
            replica
                .command(&["INFO", "replication"])
                .ok()
                .and_then(|info| {
                    info.as_str()
                        .map(|info| info.contains("master_link_status:up"))
                })
                .unwrap_or(false)
        }),
        "replica in sync"
    );
    replica.promote();
    let delay = Duration::from_secs(60);
    let locks = builder()
        .lock_delay(delay)
        .connect(&replica.url())
        .await
        .unwrap();

    let report = locks.check().await.expect("the promoted replica passes");
    assert_eq!(
        report.nodes[0].lock_delay,
        Some(LockDelayState::Pending),
        "{report}"
    );
    let first = locks
        .try_acquire("k", LockOptions::new())
        .await
        .expect("answered");
    assert!(first.is_none(), "granted during the lock-delay");
    let waited = locks
        .acquire("k", LockOptions::new().wait(Duration::from_millis(300)))
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "a wait shorter than the delay times out: {waited:?}"
    );

    let report = locks.check().await.expect("the promoted replica passes");
    match report.nodes[0].lock_delay {
        Some(LockDelayState::Running { left }) => {
            assert!(left > Duration::ZERO && left <= delay, "{left:?}");
        }
        other => panic!("not in its lock-delay: {other:?} {report}"),
    }
    assert!(report.to_string().contains("in its lock-delay"), "{report}");
}
