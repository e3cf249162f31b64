//! Redis Cluster set-ups for the tests: one cluster shared by the tests of a
//! binary that run at the same time, and managers connected to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use distributed_lock::LockManager;
use distributed_lock_testkit::RedisCluster;

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
