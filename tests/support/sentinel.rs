//! Sentinel set-ups for the tests: one topology shared by the tests of a
//! binary that run at the same time, and managers connected through it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::RedisSentinel;

/// The topology of the tests that hold it now; started again by the first
/// test after it was dropped, so its processes never outlive the tests.
static SHARED: Mutex<Weak<RedisSentinel>> = Mutex::new(Weak::new());

/// Namespaces handed out on the shared topology so far.
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// The topology shared with every test of this binary that holds one now,
/// started if none does. Tests on it must not fail it over and must keep
/// their keys apart (see [`sentinel_namespace`]); a test that fails over
/// starts its own with `RedisSentinel::start`.
pub fn shared_sentinel() -> Arc<RedisSentinel> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(topology) = shared.upgrade() {
        return topology;
    }
    let topology = Arc::new(RedisSentinel::start());
    *shared = Arc::downgrade(&topology);
    topology
}

/// A key namespace used by no other test on the shared topology.
pub fn sentinel_namespace() -> String {
    format!(
        "sentinel-test-{}",
        NAMESPACES.fetch_add(1, Ordering::Relaxed)
    )
}

/// A manager on `topology`'s primary with keys under `namespace` and 500 ms
/// connect and response timeouts, so that a dead primary costs little.
pub async fn sentinel_manager(topology: &RedisSentinel, namespace: &str) -> LockManager {
    LockManager::builder()
        .namespace(namespace)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .sentinel(topology.service_name(), topology.sentinel_urls())
        .await
        .unwrap_or_else(|err| panic!("cannot connect through the Sentinels: {err}"))
}
