//! `LockManager::shutdown`: a guard dropped as a `main` or a
//! `#[tokio::test]` ends cannot send its release (the runtime that would run
//! it is gone), so its lock stays until the TTL and the next process waits;
//! `shutdown` gives back every lease the manager holds while the runtime
//! still runs, waits for releases in flight, and refuses later acquisitions.
//! On a real redis-server and in memory; the state is read with the
//! operations API, which a shut-down manager still answers.

use crate::support;

use std::time::Duration;

use leasehold::{LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use support::{becomes_free, connect, is_held, long, within, Harness};

/// Whether `locks` sees the lock, the read/write lock and the semaphore
/// named in [`hold_every_kind`], and the keys of its set, all free.
async fn all_free(locks: &LockManager) -> bool {
    let mut free = true;
    for key in ["lock", "x", "y"] {
        free &= !locks.inspect(key).await.unwrap().held;
    }
    let rw = locks.rwlock("rw").inspect().await.unwrap();
    free &= rw.writer.is_none() && rw.reader_count == 0;
    free && locks.semaphore("sem", 2).inspect().await.unwrap().held == 0
}

/// Holds a lock, a write lease, a permit and a set of two keys on `locks`,
/// then shuts it down: five leases are released, at once, and the guards
/// report their leases lost.
async fn shutdown_releases_every_kind_of_lease(h: Harness) {
    let lock = h.a.acquire("lock", long()).await.unwrap();
    let writer = h.a.rwlock("rw").acquire_write(long()).await.unwrap();
    let permit = h.a.semaphore("sem", 2).acquire(long()).await.unwrap();
    let set = h.a.acquire_all(["x", "y"], long()).await.unwrap();
    assert!(!all_free(&h.b).await);

    assert_eq!(within(h.a.shutdown()).await, 5);
    assert!(
        all_free(&h.b).await,
        "free when shutdown returns, not after a TTL"
    );
    assert!(lock.is_lost() && writer.is_lost() && set.is_lost());
    assert!(matches!(
        lock.release().await,
        Err(LockError::LeaseLost { .. })
    ));
    drop((writer, permit, set));
    assert!(all_free(&h.b).await);
}

/// After `shutdown`, this manager and its clones refuse every acquisition.
async fn acquisitions_after_shutdown_fail_with_shut_down(h: Harness) {
    let clone = h.a.clone();
    within(h.a.shutdown()).await;
    let shut = |result: Result<(), LockError>| matches!(result, Err(LockError::ShutDown));
    assert!(shut(clone.acquire("k", long()).await.map(drop)));
    assert!(shut(h.a.try_acquire("k", long()).await.map(drop)));
    assert!(shut(h.a.rwlock("rw").acquire_read(long()).await.map(drop)));
    assert!(shut(
        h.a.rwlock("rw").try_acquire_write(long()).await.map(drop)
    ));
    assert!(shut(
        h.a.semaphore("sem", 2).acquire(long()).await.map(drop)
    ));
    assert!(shut(h.a.acquire_all(["x", "y"], long()).await.map(drop)));
    assert!(shut(h.a.with_lock("k", long(), async {}).await));
    let message = LockError::ShutDown.to_string();
    assert!(
        message.contains("shut down") && message.contains("new manager"),
        "{message}"
    );
}

/// A body running under a lock when the manager shuts down is cancelled
/// (its lock is given back, so it is no longer protected).
async fn body_running_at_shutdown_is_cancelled_with_lease_lost(h: Harness) {
    let (inside, entered) = tokio::sync::oneshot::channel();
    let locks = h.a.clone();
    let call = tokio::spawn(async move {
        locks
            .with_lock("lock", long(), async move {
                let _ = inside.send(());
                std::future::pending::<()>().await
            })
            .await
    });
    within(entered).await.unwrap();
    assert_eq!(within(h.a.shutdown()).await, 1);
    let outcome = within(call).await.unwrap();
    assert!(
        matches!(outcome, Err(LockError::LeaseLost { .. })),
        "{outcome:?}"
    );
    assert!(!h.b.inspect("lock").await.unwrap().held);
}

mod redis {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_releases_every_kind_of_lease() {
        super::shutdown_releases_every_kind_of_lease(Harness::redis().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acquisitions_after_shutdown_fail_with_shut_down() {
        super::acquisitions_after_shutdown_fail_with_shut_down(Harness::redis().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn body_running_at_shutdown_is_cancelled_with_lease_lost() {
        super::body_running_at_shutdown_is_cancelled_with_lease_lost(Harness::redis().await).await;
    }

    /// A guard dropped just before `shutdown` has its release in flight:
    /// `shutdown` returns only once it is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_waits_for_a_release_in_flight() {
        let h = Harness::redis().await;
        drop(h.a.acquire("lock", long()).await.unwrap());
        assert_eq!(within(h.a.shutdown()).await, 0, "the guard's own release");
        assert!(!h.b.inspect("lock").await.unwrap().held);
    }
}

mod memory {
    use super::*;

    #[tokio::test]
    async fn shutdown_releases_every_kind_of_lease() {
        super::shutdown_releases_every_kind_of_lease(Harness::memory()).await;
    }

    #[tokio::test]
    async fn acquisitions_after_shutdown_fail_with_shut_down() {
        super::acquisitions_after_shutdown_fail_with_shut_down(Harness::memory()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn body_running_at_shutdown_is_cancelled_with_lease_lost() {
        super::body_running_at_shutdown_is_cancelled_with_lease_lost(Harness::memory()).await;
    }
}

/// Runs `job` on a current-thread runtime of its own, as a `main` or a
/// `#[tokio::test]` does, which ends as soon as `job` returns: a task `job`
/// spawned last (a dropped guard's release) never runs.
fn in_a_runtime_that_ends<F: std::future::Future<Output = ()> + Send + 'static>(job: F) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(job);
    })
    .join()
    .expect("the job's thread");
}

/// The pitfall and its cure: a guard dropped as its runtime ends keeps the
/// lock until its TTL (the control), unless the manager was shut down first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_its_runtime_ends_keeps_the_lock_unless_shut_down() {
    let server = RedisServer::start();
    let observer = connect(&server.url()).await;
    let ttl = LockOptions::new().ttl(Duration::from_secs(60));
    for (key, shut_down) in [("kept", false), ("freed", true)] {
        let (url, options) = (server.url(), ttl.clone());
        in_a_runtime_that_ends(async move {
            let locks = connect(&url).await;
            let guard = locks.acquire(key, options).await.unwrap();
            if shut_down {
                locks.shutdown().await;
            }
            // The end of a test or `main` with the guard alive: its release
            // is spawned, and the runtime ends before it runs.
            drop(guard);
        });
    }
    assert!(
        is_held(&observer, "kept").await,
        "without shutdown: held until its TTL"
    );
    assert!(
        !is_held(&observer, "freed").await,
        "shut down: free at once"
    );
}

/// Issue 25, defect 5: a guard dropped as *its* runtime ends, on a manager
/// built on a runtime that still runs (one manager shared by a test harness
/// or a worker pool with runtimes of their own), is released from the
/// manager's runtime instead of keeping the lock until its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_its_runtime_ends_is_released_on_the_managers_runtime() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let shared = locks.clone();
    in_a_runtime_that_ends(async move {
        let options = LockOptions::new().ttl(Duration::from_secs(60));
        let guard = shared.acquire("shared", options).await.unwrap();
        drop(guard);
    });
    assert!(
        becomes_free(&locks, "shared").await,
        "released from the manager's runtime, not kept for its 60 s TTL"
    );
}
