//! An empty lock key is refused with `InvalidOptions`, from the API and
//! from the attribute whose placeholders render empty: a lock on "" would
//! make unrelated calls share one lock.

use crate::support;

use leasehold::{distributed_lock, LockError, LockManager};
use support::{long, Harness};

#[distributed_lock(key = "{customer}", manager = locks)]
async fn charge(locks: &LockManager, customer: &str) -> Result<(), LockError> {
    Ok(())
}

fn invalid<T: std::fmt::Debug>(result: Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::InvalidOptions(ref message)) if message.contains("empty"))
}

async fn empty_keys_are_refused(h: Harness) {
    assert!(invalid(h.a.try_acquire("", long()).await));
    assert!(invalid(h.a.acquire("", long()).await));
    assert!(invalid(h.a.rwlock("").acquire_read(long()).await));
    assert!(invalid(h.a.semaphore("", 2).try_acquire(long()).await));
    assert!(invalid(h.a.acquire_all(["a", ""], long()).await));
    assert!(invalid(charge(&h.a, "").await));
    charge(&h.a, "c-1").await.expect("a key that renders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_keys_are_refused_on_redis() {
    empty_keys_are_refused(Harness::redis().await).await;
}

#[tokio::test]
async fn empty_keys_are_refused_in_memory() {
    empty_keys_are_refused(Harness::memory()).await;
}
