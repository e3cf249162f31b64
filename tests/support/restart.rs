//! Getting a lock again after a server restarted: the first commands on old
//! connections may fail until the manager has reconnected.

use std::time::{Duration, Instant};

use leasehold::{LockError, LockGuard, LockManager, LockOptions};
use tokio::time::timeout;

use super::options::long;
use super::wait::NO_HANG;

/// Pause between two attempts of [`acquire_after_restart`].
const RETRY: Duration = Duration::from_millis(100);

/// Takes `key` with `options` through `manager`, retrying every 100 ms for
/// at most [`NO_HANG`] while the attempt fails with a connection error or
/// finds the key busy (an attempt the restart left unanswered may hold it
/// until its undo runs). Any other error, or no lock by then, fails the test.
pub async fn acquire_after_restart(
    manager: &LockManager,
    key: &str,
    options: LockOptions,
) -> LockGuard {
    let deadline = Instant::now() + NO_HANG;
    let max_attempts = NO_HANG.as_millis() / RETRY.as_millis() + 1;
    for _ in 0..max_attempts {
        match timeout(NO_HANG, manager.try_acquire(key, options.clone())).await {
            Ok(Ok(Some(guard))) => return guard,
            Ok(Ok(None) | Err(LockError::Connection { .. })) => {}
            Ok(Err(other)) => panic!("acquire of `{key}` after the restart failed: {other}"),
            Err(_) => panic!("acquire of `{key}` after the restart hung for {NO_HANG:?}"),
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(RETRY).await;
    }
    panic!("no acquisition of `{key}` within {NO_HANG:?} of the restart");
}

/// Waits (bounded, see [`acquire_after_restart`]) until `manager` takes and
/// releases a lock on a scratch key again after a restart.
pub async fn reconnect(manager: &LockManager) {
    let probe = acquire_after_restart(manager, "reconnect-probe", long()).await;
    probe
        .release()
        .await
        .expect("release of the reconnect probe");
}
