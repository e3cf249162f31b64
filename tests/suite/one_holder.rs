//! One holder per key in a process: a server that lost a grant (restarted
//! empty here; a promoted replica in `sentinel.rs`) grants the key again,
//! and a second task of the manager that still holds it must not hold it
//! too, whatever the kind: a lock, a write lease (nor a read lease beside
//! it), a permit beyond the semaphore's count. The second task waits for
//! the first to release, then gets it.
//!
//! Each test starts its own `redis-server` on a free 127.0.0.1 port. Every
//! loop is bounded in count and time.

use crate::support;

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::{RedisServer, RespValue};
use support::{answered, connect_without_lock_delay, lock_value, poll_async, within, NO_HANG};

const KEY: &str = "order-42";

/// A 30 s lease that is not renewed: it stays valid on our side while the
/// restarted server knows nothing of it.
fn unrenewed() -> LockOptions {
    LockOptions::new().ttl(Duration::from_secs(30)).renew(false)
}

/// Whether a lease valid until `until` is still valid.
fn still_valid(until: Option<Instant>) -> bool {
    until.is_some_and(|until| until > Instant::now())
}

/// The first `Some` of `attempt` (through [`answered`]), tried every 100 ms
/// within [`NO_HANG`]: a grant the manager refused is given back in the
/// background, so the server may hold it a moment after the refusal.
async fn eventually<T, F, Fut>(mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, LockError>>,
{
    for _ in 0..NO_HANG.as_millis() / 100 + 1 {
        if let Some(answer) = answered("the restarted server", &mut attempt).await {
            return Some(answer);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// A server, and a manager on it that keeps no lock-delay (which would
/// refuse the restarted server's grant itself: see `lock_delay.rs`), so
/// that the manager alone must keep its second task out.
async fn server_and_manager() -> (RedisServer, LockManager) {
    let server = RedisServer::start();
    let locks = connect_without_lock_delay(&server.url()).await;
    (server, locks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_gives_a_second_task_no_lock_its_first_task_holds() {
    let (mut server, locks) = server_and_manager().await;
    let first = within(locks.acquire(KEY, unrenewed())).await.unwrap();
    server.restart_empty();

    let second = answered("the restarted server", || {
        locks.try_acquire(KEY, unrenewed())
    })
    .await;
    assert!(
        second.is_none(),
        "two tasks of one manager hold `{KEY}` at once"
    );
    assert!(still_valid(first.valid_until()), "the first lease is valid");
    assert!(
        poll_async(NO_HANG, || async {
            lock_value(&server, KEY) == RespValue::Nil
        })
        .await,
        "the grant the manager refused was given back"
    );

    let mut waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire(KEY, unrenewed().wait(NO_HANG * 2)).await }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiter)
            .await
            .is_err(),
        "a waiter of the manager got the lock while the first task holds it"
    );
    // The restarted server does not know the first lease: not ours there.
    let _ = first.release().await;
    let second = within(waiter)
        .await
        .expect("the waiter's task")
        .expect("the waiter gets the lock once the first task released it");
    assert!(still_valid(second.valid_until()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_gives_no_second_writer_nor_reader_beside_a_writer() {
    let (mut server, locks) = server_and_manager().await;
    let doc = locks.rwlock(KEY);
    let writer = within(doc.acquire_write(unrenewed())).await.unwrap();
    server.restart_empty();

    let second = answered("the restarted server", || {
        doc.try_acquire_write(unrenewed())
    })
    .await;
    assert!(second.is_none(), "two writers of one manager at once");
    let reader = answered("the restarted server", || doc.try_acquire_read(unrenewed())).await;
    assert!(reader.is_none(), "a reader beside the manager's writer");
    assert!(
        still_valid(writer.valid_until()),
        "the writer's lease is valid"
    );

    let _ = writer.release().await;
    let reader = eventually(|| doc.try_acquire_read(unrenewed())).await;
    assert!(reader.is_some(), "a reader once the writer left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_gives_no_permit_beyond_the_count_the_manager_holds() {
    let (mut server, locks) = server_and_manager().await;
    let pool = locks.semaphore(KEY, 2);
    let first = within(pool.acquire(unrenewed())).await.unwrap();
    let second = within(pool.acquire(unrenewed())).await.unwrap();
    server.restart_empty();

    let third = answered("the restarted server", || pool.try_acquire(unrenewed())).await;
    assert!(third.is_none(), "three holders of a 2-permit semaphore");
    assert!(still_valid(first.valid_until()) && still_valid(second.valid_until()));

    let _ = first.release().await;
    let third = eventually(|| pool.try_acquire(unrenewed())).await;
    assert!(third.is_some(), "a permit once one of the two was given up");
}
