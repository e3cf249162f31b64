//! Whether a lock, a semaphore's permit or a read/write lock's lease is held,
//! seen through a lock manager from outside every lock scope of the test (so
//! a probe never re-enters the test's own lock).

use leasehold::LockManager;

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

/// One `try_acquire` of the one-permit semaphore `key` by `manager` from a
/// freshly spawned task (outside every `with_permit` body). Returns `true`
/// when some permit of `key` is held, whatever its holder's N; a permit the
/// probe got is released again before this returns.
pub async fn permit_held(manager: &LockManager, key: &str) -> bool {
    let semaphore = manager.semaphore(key, 1);
    tokio::spawn(async move {
        match semaphore.try_acquire(long()).await {
            Ok(None) => true,
            Ok(Some(permit)) => {
                permit
                    .release()
                    .await
                    .expect("a probe releases the permit it just took");
                false
            }
            Err(err) => panic!("probe of semaphore `{}` failed: {err}", semaphore.key()),
        }
    })
    .await
    .expect("probe task panicked")
}

/// Whether every permit of `key` is back within [`PROMPTLY`], probing
/// every 10 ms (a bounded number of times).
pub async fn permits_come_back(manager: &LockManager, key: &str) -> bool {
    poll_async(PROMPTLY, || async { !permit_held(manager, key).await }).await
}

/// One `try_acquire_write` of the read/write lock `key` by `manager` from a
/// freshly spawned task (outside every lock scope). Returns `true` when a
/// reader or a writer holds it; a write lease the probe got is released
/// again before this returns. (One attempt leaves no writer's intent.)
pub async fn rw_held(manager: &LockManager, key: &str) -> bool {
    let manager = manager.clone();
    let key = key.to_owned();
    tokio::spawn(async move {
        match manager.rwlock(&key).try_acquire_write(long()).await {
            Ok(None) => true,
            Ok(Some(guard)) => {
                guard
                    .release()
                    .await
                    .expect("a probe releases the write lease it just took");
                false
            }
            Err(err) => panic!("probe of read/write lock `{key}` failed: {err}"),
        }
    })
    .await
    .expect("probe task panicked")
}

/// One `try_acquire_read` of the read/write lock `key` by `manager` from a
/// freshly spawned task. Returns `true` when a new reader is kept out (a
/// writer holds the lock or waits for it); a read lease the probe got is
/// released again before this returns.
pub async fn readers_kept_out(manager: &LockManager, key: &str) -> bool {
    let manager = manager.clone();
    let key = key.to_owned();
    tokio::spawn(async move {
        match manager.rwlock(&key).try_acquire_read(long()).await {
            Ok(None) => true,
            Ok(Some(guard)) => {
                guard
                    .release()
                    .await
                    .expect("a probe releases the read lease it just took");
                false
            }
            Err(err) => panic!("read probe of `{key}` failed: {err}"),
        }
    })
    .await
    .expect("probe task panicked")
}

/// Whether the read/write lock `key` becomes free for a writer within
/// [`PROMPTLY`], probing every 10 ms (a bounded number of times).
pub async fn rw_becomes_free(manager: &LockManager, key: &str) -> bool {
    poll_async(PROMPTLY, || async { !rw_held(manager, key).await }).await
}
