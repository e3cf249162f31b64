//! `#[distributed_lock]` against a real redis-server: the lock covers exactly
//! the body, on every exit path, and different arguments lock different keys.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{distributed_lock, fencing_token, held_locks, LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use support::{becomes_free, connect, is_free, within};
use tokio::sync::{oneshot, Notify};

/// A service whose methods lock on a key built from their arguments.
struct Stock {
    locks: LockManager,
    entered: Notify,
    resume: Notify,
}

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("out of stock")]
    OutOfStock,
}

impl Stock {
    /// Signals it is inside, then waits to be resumed.
    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    async fn pause_inside(&self, sku: &str) -> Result<(), ShopError> {
        self.entered.notify_one();
        self.resume.notified().await;
        Ok(())
    }

    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    async fn fail_with_question_mark(&self, sku: &str) -> Result<u32, ShopError> {
        let available: Option<u32> = None;
        let units = available.ok_or(ShopError::OutOfStock)?;
        Ok(units)
    }

    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    async fn panic_inside(&self, sku: &str) -> Result<(), ShopError> {
        panic!("body panicked while holding stock:{sku}");
    }

    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    async fn hang_inside(&self, sku: &str, entered: oneshot::Sender<()>) -> Result<(), ShopError> {
        let _ = entered.send(());
        std::future::pending::<()>().await;
        Ok(())
    }

    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    async fn report_scope(&self, sku: &str) -> Result<(Vec<String>, Option<u64>), ShopError> {
        Ok((held_locks(), fencing_token().await.ok()))
    }

    #[distributed_lock(key = "replicated:{sku}", min_replicas = 1, replica_timeout = "50ms", manager = self.locks)]
    async fn replicated(&self, sku: &str) -> Result<(), ShopError> {
        Ok(())
    }

    #[distributed_lock(key = "stock:{sku}", wait = "5s", manager = self.locks)]
    async fn hold_briefly(
        &self,
        sku: &str,
        overlap: Arc<AtomicBool>,
        inside: Arc<AtomicBool>,
    ) -> Result<(), ShopError> {
        if inside.swap(true, Ordering::SeqCst) {
            overlap.store(true, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        inside.store(false, Ordering::SeqCst);
        Ok(())
    }
}

async fn shop(server: &RedisServer) -> Arc<Stock> {
    Arc::new(Stock {
        locks: connect(&server.url()).await,
        entered: Notify::new(),
        resume: Notify::new(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_is_held_exactly_while_the_body_runs() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let other = connect(&server.url()).await;
    assert!(is_free(&other, "stock:sku-1").await, "free before the call");

    let call = tokio::spawn({
        let stock = Arc::clone(&stock);
        async move { stock.pause_inside("sku-1").await }
    });
    within(stock.entered.notified()).await;
    assert!(
        !is_free(&other, "stock:sku-1").await,
        "held while the body is paused inside"
    );
    stock.resume.notify_one();
    call.await.unwrap().unwrap();
    assert!(
        is_free(&other, "stock:sku-1").await,
        "free right after the call returns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn question_mark_error_in_body_releases_the_lock() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let result = stock.fail_with_question_mark("sku-2").await;
    assert!(matches!(result, Err(ShopError::OutOfStock)));
    assert!(is_free(&stock.locks, "stock:sku-2").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_in_body_releases_the_lock() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let call = tokio::spawn({
        let stock = Arc::clone(&stock);
        async move { stock.panic_inside("sku-3").await }
    });
    assert!(call.await.unwrap_err().is_panic());
    assert!(
        becomes_free(&stock.locks, "stock:sku-3").await,
        "released promptly, not after the TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_releases_the_lock() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let (entered, inside) = oneshot::channel();
    let call = tokio::spawn({
        let stock = Arc::clone(&stock);
        async move { stock.hang_inside("sku-4", entered).await }
    });
    within(inside).await.unwrap();
    assert!(!is_free(&stock.locks, "stock:sku-4").await);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(
        becomes_free(&stock.locks, "stock:sku-4").await,
        "released promptly, not after the TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lock_returns_the_error_without_running_the_body() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let held = stock
        .locks
        .acquire("stock:sku-5", LockOptions::new())
        .await
        .unwrap();
    let result = stock.report_scope("sku-5").await;
    assert!(
        matches!(result, Err(ShopError::Lock(LockError::Busy { .. }))),
        "{result:?}"
    );
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_sees_its_key_and_fencing_token() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let (held, first) = stock.report_scope("sku-6").await.unwrap();
    let (_, second) = stock.report_scope("sku-6").await.unwrap();
    assert_eq!(held, vec!["stock:sku-6".to_owned()]);
    assert!(second.unwrap() > first.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_arguments_lock_different_keys_in_parallel() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let overlap = Arc::new(AtomicBool::new(false));
    let (inside_a, inside_b) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let both_inside = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn({
        let (a, b, both) = (
            Arc::clone(&inside_a),
            Arc::clone(&inside_b),
            Arc::clone(&both_inside),
        );
        async move {
            for _ in 0..100 {
                if a.load(Ordering::SeqCst) && b.load(Ordering::SeqCst) {
                    both.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let (a, b) = tokio::join!(
        stock.hold_briefly("sku-a", Arc::clone(&overlap), Arc::clone(&inside_a)),
        stock.hold_briefly("sku-b", Arc::clone(&overlap), Arc::clone(&inside_b)),
    );
    a.unwrap();
    b.unwrap();
    watcher.await.unwrap();
    assert!(
        both_inside.load(Ordering::SeqCst),
        "two SKUs were locked at the same time"
    );
    assert!(!overlap.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_arguments_from_two_tasks_never_overlap() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let overlap = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let (stock, overlap, inside) = (
                Arc::clone(&stock),
                Arc::clone(&overlap),
                Arc::clone(&inside),
            );
            tokio::spawn(async move { stock.hold_briefly("sku-c", overlap, inside).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert!(!overlap.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_without_replicas_refuses_the_lock_and_releases_it() {
    let server = RedisServer::start();
    let stock = shop(&server).await;
    let result = stock.replicated("sku-r").await;
    assert!(
        matches!(
            result,
            Err(ShopError::Lock(LockError::NotReplicated {
                acknowledged: 0,
                required: 1,
                ..
            }))
        ),
        "{result:?}"
    );
    assert!(
        is_free(&stock.locks, "replicated:sku-r").await,
        "the unreplicated lock was released"
    );
}
