//! Redis Cluster set-ups for the tests: one cluster shared by the tests of a
//! binary that run at the same time, and managers connected to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::{FaultProxy, RedisCluster, RespValue};

use super::wait::{poll_async, PROMPTLY};

/// The cluster of the tests that hold it now; started again by the first
/// test after it was dropped, so its processes never outlive the tests.
static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());

/// Namespaces handed out on the shared cluster so far.
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// The cluster (3 primaries, 1 replica each) shared with every test of this
/// binary that holds one now, started if none does. Tests on it must not
/// fail it over or reshard it and must keep their keys apart (see
/// [`cluster_namespace`]); a test that does starts its own with
/// `RedisCluster::start`.
pub fn shared_cluster() -> Arc<RedisCluster> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start());
    *shared = Arc::downgrade(&cluster);
    cluster
}

/// A key namespace used by no other test on the shared cluster.
pub fn cluster_namespace() -> String {
    format!(
        "cluster-test-{}",
        NAMESPACES.fetch_add(1, Ordering::Relaxed)
    )
}

/// A manager on `cluster` with keys under `namespace` and 500 ms connect and
/// response timeouts, so that a dead primary costs little.
pub async fn cluster_manager(cluster: &RedisCluster, namespace: &str) -> LockManager {
    LockManager::builder()
        .namespace(namespace)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .cluster(cluster.seed_urls())
        .await
        .unwrap_or_else(|err| panic!("cannot connect to the cluster: {err}"))
}

/// A cluster of 3 primaries without replicas, each behind a [`FaultProxy`]
/// whose port it announces (`cluster-announce-port`): the slot map and the
/// redirections a cluster client follows name the proxies, so every client
/// of the cluster goes through them and their faults. Returns once every
/// node's `CLUSTER SLOTS` names only proxies.
pub async fn proxied_cluster() -> (RedisCluster, Vec<FaultProxy>) {
    let cluster = RedisCluster::builder().replicas_per_primary(0).start();
    let nodes = cluster.primaries();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|node| FaultProxy::start(node.addr()))
        .collect();
    for (node, proxy) in nodes.iter().zip(&proxies) {
        node.command(&[
            "CONFIG",
            "SET",
            "cluster-announce-port",
            &proxy.port().to_string(),
        ])
        .expect("CONFIG SET cluster-announce-port");
    }
    let proxy_ports: Vec<i64> = proxies.iter().map(|p| i64::from(p.port())).collect();
    let announced = poll_async(Duration::from_secs(10), || async {
        nodes.iter().all(|node| {
            let Ok(RespValue::Array(ranges)) = node.command(&["CLUSTER", "SLOTS"]) else {
                return false;
            };
            ranges.len() == nodes.len()
                && ranges.iter().all(|range| match range {
                    RespValue::Array(fields) => match fields.get(2) {
                        Some(RespValue::Array(primary)) => primary
                            .get(1)
                            .and_then(RespValue::as_integer)
                            .is_some_and(|port| proxy_ports.contains(&port)),
                        _ => false,
                    },
                    _ => false,
                })
        })
    })
    .await;
    assert!(announced, "the nodes did not announce their proxies' ports");
    (cluster, proxies)
}

/// Two managers of a [`proxied_cluster`] reached through `proxies`: the
/// partitioned holder's, with `holder_timeout` as its response timeout, and
/// the other side's. The other side is cut off with the holder but is not
/// under test: once the proxies are back it must reconnect, which a loaded
/// machine can take longer than a holder's short timeout to answer, so it
/// waits [`PROMPTLY`] for each response.
pub async fn holder_and_other_side(
    proxies: &[FaultProxy],
    holder_timeout: Duration,
) -> (LockManager, LockManager) {
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let urls = &urls;
    let manager = |response_timeout| async move {
        LockManager::builder()
            .response_timeout(response_timeout)
            .cluster(urls)
            .await
            .expect("connect through the proxies")
    };
    (manager(holder_timeout).await, manager(PROMPTLY).await)
}
