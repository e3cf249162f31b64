//! What the lock's futures carry of the caller's body: the `with_*` methods
//! box it on entry and an annotated function boxes it at once, so a large
//! body is held on the heap once, not copied into every layer of the lock's
//! calls (each copy is moved and, in debug builds, on the stack of whoever
//! polls it: before, these tests with a 64 KiB body overflowed a test
//! thread's 2 MiB stack making the futures alone). Only the sizes of futures
//! that are never polled are measured: no server is needed.

use std::future::Future;
use std::mem::size_of_val;

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};

/// The size of the body each test passes.
const BODY: usize = 16 * 1024;

/// What the lock's own state may add to a future, far below [`BODY`].
const LOCK_STATE: usize = 8 * 1024;

/// A body whose state holds [`BODY`] bytes across an `.await`.
async fn large_body() -> u8 {
    let state = [7u8; BODY];
    tokio::task::yield_now().await;
    state[BODY - 1]
}

/// Asserts that `future`, made from a [`large_body`], holds it once at most.
fn holds_the_body_once_at_most(what: &str, future: &impl Future) {
    let size = size_of_val(future);
    assert!(
        size <= BODY + LOCK_STATE,
        "{what}: a {BODY}-byte body made a {size}-byte future"
    );
}

#[test]
fn every_with_method_holds_the_body_once_at_most() {
    let locks = LockManager::in_memory();
    let options = LockOptions::new;
    let semaphore = locks.semaphore("s", 2);
    let rwlock = locks.rwlock("d");
    holds_the_body_once_at_most("with_lock", &locks.with_lock("k", options(), large_body()));
    holds_the_body_once_at_most(
        "try_with_lock",
        &locks.try_with_lock("k", options(), large_body()),
    );
    holds_the_body_once_at_most(
        "with_locks",
        &locks.with_locks(["a", "b"], options(), large_body()),
    );
    holds_the_body_once_at_most(
        "try_with_locks",
        &locks.try_with_locks(["a", "b"], options(), large_body()),
    );
    holds_the_body_once_at_most(
        "with_permit",
        &semaphore.with_permit(options(), large_body()),
    );
    holds_the_body_once_at_most(
        "try_with_permit",
        &semaphore.try_with_permit(options(), large_body()),
    );
    holds_the_body_once_at_most("with_read", &rwlock.with_read(options(), large_body()));
    holds_the_body_once_at_most("with_write", &rwlock.with_write(options(), large_body()));
    holds_the_body_once_at_most(
        "try_with_read",
        &rwlock.try_with_read(options(), large_body()),
    );
    holds_the_body_once_at_most(
        "try_with_write",
        &rwlock.try_with_write(options(), large_body()),
    );
}

#[distributed_lock(key = "big:{id}")]
async fn annotated(id: u32) -> Result<u8, LockError> {
    Ok(large_body().await + id as u8)
}

#[distributed_lock(key = "big:{id}", on_busy = "skip")]
async fn annotated_skipping(id: u32) -> Result<Option<u8>, LockError> {
    Ok(Some(large_body().await + id as u8))
}

#[test]
fn an_annotated_function_keeps_its_body_on_the_heap() {
    for (what, size) in [
        ("waiting", size_of_val(&annotated(1))),
        ("skipping", size_of_val(&annotated_skipping(1))),
    ] {
        assert!(
            size <= LOCK_STATE,
            "{what}: an annotated function with a {BODY}-byte body made a {size}-byte future"
        );
    }
}
