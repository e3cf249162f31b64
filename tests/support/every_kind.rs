//! One holder of every kind (a permit, a write lease, a plain lock) with a
//! waiter of each kind on another manager: for the failover tests that
//! check every kind's waiters hear the releases on the new primary.

use std::time::{Duration, Instant};

use leasehold::{LockError, LockGuard, LockManager, LockOptions, Permit, WriteGuard};
use tokio::task::JoinHandle;

use crate::{within, NO_HANG};

/// The held leases, and the waiters of each kind, each telling when it got in.
#[derive(Debug)]
pub struct EveryKindWaiting {
    permit: Permit,
    writer: WriteGuard,
    lock: LockGuard,
    waiters: Vec<(&'static str, JoinHandle<Instant>)>,
}

impl EveryKindWaiting {
    /// `holder` takes a 1-permit semaphore on `keys[0]`, the write lease of
    /// `keys[1]` and the lock on `keys[2]`, each for 20 s; `other` waits for
    /// a permit, a read lease and the lock (up to 40 s).
    pub async fn start(holder: &LockManager, other: &LockManager, keys: [&str; 3]) -> Self {
        let [sem, doc, plain] = keys.map(str::to_owned);
        let lease = LockOptions::new().ttl(Duration::from_secs(20));
        let permit = holder
            .semaphore(&sem, 1)
            .acquire(lease.clone())
            .await
            .unwrap();
        let writer = holder
            .rwlock(&doc)
            .acquire_write(lease.clone())
            .await
            .unwrap();
        let lock = holder.acquire(&plain, lease.clone()).await.unwrap();
        let waiting = lease.wait(Duration::from_secs(40));
        let woken_at = |name: &'static str, outcome: Result<(), LockError>| {
            outcome.unwrap_or_else(|err| panic!("the {name} waiter: {err:?}"));
            Instant::now()
        };
        let permit_waiter = tokio::spawn({
            let (semaphore, options) = (other.semaphore(&sem, 1), waiting.clone());
            async move { woken_at("permit", semaphore.acquire(options).await.map(drop)) }
        });
        let reader = tokio::spawn({
            let (rwlock, options) = (other.rwlock(&doc), waiting.clone());
            async move { woken_at("reader", rwlock.acquire_read(options).await.map(drop)) }
        });
        let lock_waiter = tokio::spawn({
            let (locks, options) = (other.clone(), waiting);
            async move { woken_at("lock", locks.acquire(&plain, options).await.map(drop)) }
        });
        EveryKindWaiting {
            permit,
            writer,
            lock,
            waiters: vec![
                ("permit", permit_waiter),
                ("reader", reader),
                ("lock", lock_waiter),
            ],
        }
    }

    /// Releases the three leases, then asserts that every waiter got in
    /// within `bound` of the releases.
    pub async fn release_and_assert_woken_within(self, bound: Duration) {
        let released = Instant::now();
        within(self.permit.release())
            .await
            .expect("permit released");
        within(self.writer.release())
            .await
            .expect("write lease released");
        within(self.lock.release()).await.expect("lock released");
        for (name, waiter) in self.waiters {
            let woken = tokio::time::timeout(NO_HANG, waiter)
                .await
                .unwrap_or_else(|_| {
                    panic!("the {name} waiter still waits {NO_HANG:?} after the release")
                })
                .expect("waiter task");
            let after = woken.saturating_duration_since(released);
            eprintln!("the {name} waiter got in {after:?} after the release");
            assert!(
                after < bound,
                "the {name} waiter got in {after:?} after the release on the new primary"
            );
        }
    }
}
