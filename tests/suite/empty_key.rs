//! An empty lock key is refused with `InvalidOptions`, from the API and
//! from the attribute whose placeholders render empty: a lock on "" would
//! make unrelated calls share one lock. So is a key with one empty
//! placeholder value (`order:{id}` with `id == ""` would lock `order:` for
//! every empty id), named in the error, before the body runs.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};

use leasehold::{distributed_lock, LockError, LockManager};
use support::{long, Harness};

struct Order {
    id: String,
}

#[distributed_lock(key = "order:{order.id}", manager = locks)]
async fn ship(locks: &LockManager, order: &Order, ran: &AtomicU32) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], manager = locks)]
async fn transfer(
    locks: &LockManager,
    from: &str,
    to: u64,
    ran: &AtomicU32,
) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "{customer}", manager = locks)]
async fn charge(locks: &LockManager, customer: &str) -> Result<(), LockError> {
    Ok(())
}

/// Whether `result` is `InvalidOptions` naming `placeholder` as empty.
fn names<T: std::fmt::Debug>(result: Result<T, LockError>, placeholder: &str) -> bool {
    matches!(result, Err(LockError::InvalidOptions(ref message))
        if message.contains(&format!("`{placeholder}`")) && message.contains("empty"))
}

async fn empty_placeholder_values_are_refused_by_name(h: Harness) {
    let ran = AtomicU32::new(0);
    let empty = Order { id: String::new() };
    assert!(names(ship(&h.a, &empty, &ran).await, "{order.id}"));
    assert!(names(transfer(&h.a, "", 7, &ran).await, "{from}"));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "no body ran");
    let order = Order { id: "o-1".into() };
    ship(&h.a, &order, &ran).await.expect("a non-empty id");
    transfer(&h.a, "a-1", 7, &ran)
        .await
        .expect("non-empty accounts");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_placeholder_values_are_refused_by_name_on_redis() {
    empty_placeholder_values_are_refused_by_name(Harness::redis().await).await;
}

#[tokio::test]
async fn empty_placeholder_values_are_refused_by_name_in_memory() {
    empty_placeholder_values_are_refused_by_name(Harness::memory()).await;
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
