//! One attempt, no waiting, for every kind: `try_with_lock`,
//! `try_with_locks`, `try_with_permit`, `try_with_read`, `try_with_write`,
//! and `on_busy = "skip"` on an annotated function of each kind. A busy
//! lock skips the body (`Ok(None)`), a free one runs it under the lock.

use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};

fn waiting_long() -> LockOptions {
    LockOptions::new().wait(Duration::from_secs(30))
}

#[tokio::test]
async fn every_kind_skips_its_body_when_busy_without_waiting() {
    let locks = LockManager::in_memory();
    let other = locks.clone();
    let plain = other.acquire("a", LockOptions::new()).await.unwrap();
    assert_eq!(
        locks
            .try_with_lock("a", waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        locks
            .try_with_locks(["b", "a"], waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    plain.release().await.unwrap();

    let semaphore = locks.semaphore("api", 1);
    let permit = semaphore.acquire(LockOptions::new()).await.unwrap();
    assert_eq!(
        semaphore
            .try_with_permit(waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    permit.release().await.unwrap();
    assert_eq!(
        semaphore
            .try_with_permit(waiting_long(), async { 2 })
            .await
            .unwrap(),
        Some(2)
    );

    let writer = other
        .rwlock("doc")
        .acquire_write(LockOptions::new())
        .await
        .unwrap();
    assert_eq!(
        locks
            .rwlock("doc")
            .try_with_read(waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        locks
            .rwlock("doc")
            .try_with_write(waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    writer.release().await.unwrap();
    let reader = other
        .rwlock("doc")
        .acquire_read(LockOptions::new())
        .await
        .unwrap();
    assert_eq!(
        locks
            .rwlock("doc")
            .try_with_read(waiting_long(), async { 3 })
            .await
            .unwrap(),
        Some(3)
    );
    assert_eq!(
        locks
            .rwlock("doc")
            .try_with_write(waiting_long(), async { 1 })
            .await
            .unwrap(),
        None
    );
    reader.release().await.unwrap();
    let doc = locks.rwlock("doc");
    let written = doc.try_with_write(waiting_long(), async { leasehold::fencing_token().await });
    assert!(
        written.await.unwrap().expect("free").is_ok(),
        "the body runs in the writer's scope"
    );
}

#[distributed_lock(key = "api", permits = 1, on_busy = "skip", manager = locks)]
async fn call_partner(locks: &LockManager) -> Result<Option<u32>, LockError> {
    Ok(Some(7))
}

#[distributed_lock(key = "doc", mode = "read", on_busy = "skip", manager = locks)]
async fn read_doc(locks: &LockManager) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn annotated_permit_and_read_skip_when_busy() {
    let locks = LockManager::in_memory();
    let permit = locks
        .semaphore("api", 1)
        .acquire(LockOptions::new())
        .await
        .unwrap();
    assert_eq!(call_partner(&locks).await.unwrap(), None);
    permit.release().await.unwrap();
    assert_eq!(call_partner(&locks).await.unwrap(), Some(7));

    let writer = locks
        .rwlock("doc")
        .acquire_write(LockOptions::new())
        .await
        .unwrap();
    read_doc(&locks).await.unwrap();
    assert!(!writer.is_lost());
    writer.release().await.unwrap();
    read_doc(&locks).await.unwrap();
}
