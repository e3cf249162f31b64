//! The default manager: without `install` an annotated call fails cleanly,
//! after it the call runs under the installed manager. One test, because the
//! default is process-wide.

use leasehold::{distributed_lock, install, LockError, LockManager, LockOptions};

#[distributed_lock(key = "job:{id}")]
async fn run_job(id: u32) -> Result<u32, LockError> {
    Ok(id * 2)
}

#[tokio::test]
async fn annotated_call_needs_an_installed_manager() {
    assert!(matches!(run_job(1).await, Err(LockError::NotInstalled)));

    let locks = LockManager::in_memory();
    assert!(install(locks.clone()).is_none());
    assert_eq!(run_job(21).await.unwrap(), 42);

    let held = locks.acquire("job:7", LockOptions::new()).await.unwrap();
    // No `wait`: one attempt, and the lock held here is reported busy.
    assert!(matches!(run_job(7).await, Err(LockError::Busy { .. })));
    held.release().await.unwrap();
    assert_eq!(run_job(7).await.unwrap(), 14);
}
