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

/// What the subscriber of [`a_skipped_call_logs_at_debug`] formatted.
#[derive(Clone, Default)]
struct Traced(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Traced {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut traced = self.0.lock().unwrap_or_else(|e| e.into_inner());
        traced.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A skipped call is routine (a scheduled job skips on every instance but
/// one, every period), so it is logged at DEBUG, not INFO.
#[test]
fn a_skipped_call_logs_at_debug() {
    let traced = Traced::default();
    let writer = traced.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let default = tracing_subscriber::util::SubscriberInitExt::set_default(subscriber);
    runtime.block_on(async {
        let locks = LockManager::in_memory();
        let held = locks.acquire("job", LockOptions::new()).await.unwrap();
        let one = locks.try_with_lock("job", LockOptions::new(), async {});
        assert_eq!(one.await.unwrap(), None);
        let set = locks.try_with_locks(["job", "other"], LockOptions::new(), async {});
        assert_eq!(set.await.unwrap(), None);
        held.release().await.unwrap();
    });
    drop(default);
    let text = String::from_utf8(traced.0.lock().unwrap().clone()).unwrap();
    let skipped: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("skipped"))
        .collect();
    assert_eq!(skipped.len(), 2, "{text}");
    assert!(
        skipped.iter().all(|line| line.contains("DEBUG")),
        "{skipped:#?}"
    );
}
