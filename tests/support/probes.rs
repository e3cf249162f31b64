//! Whether a lock is held, seen through a lock manager from outside every
//! lock scope of the test (so a probe never re-enters the test's own lock).

use distributed_lock::LockManager;

use super::options::long;
use super::wait::{poll_async, PROMPTLY};

/// One `try_acquire` of `key` by `manager` from a freshly spawned task,
/// i.e. outside every lock scope. Returns `true` when the lock was busy; a
/// lock the probe got is released again before this returns.
pub async fn is_held(manager: &LockManager, key: &str) -> bool {
    let manager = manager.clone();
    let key = key.to_owned();
    tokio::spawn(async move {
        match manager.try_acquire(&key, long()).await {
            Ok(None) => true,
            Ok(Some(guard)) => {
                guard
                    .release()
                    .await
                    .expect("a probe releases the lock it just took");
                false
            }
            Err(err) => panic!("probe of `{key}` failed: {err}"),
        }
    })
    .await
    .expect("probe task panicked")
}

/// The opposite of [`is_held`]: one probe found `key` free.
pub async fn is_free(manager: &LockManager, key: &str) -> bool {
    !is_held(manager, key).await
}

/// Whether `key` becomes free within [`PROMPTLY`], probing every 10 ms
/// (a bounded number of times).
pub async fn becomes_free(manager: &LockManager, key: &str) -> bool {
    poll_async(PROMPTLY, || is_free(manager, key)).await
}
