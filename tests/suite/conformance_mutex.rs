//! The plain lock's guarantees, held by the other kinds used as a mutex:
//! a semaphore of one permit and a read/write lock's write lease, beside
//! the plain lock itself, on every backend that has them (a real
//! `redis-server`, `valkey-server`, Sentinel's primary, a Redis Cluster,
//! the ACL-restricted users, memory). Each test runs its steps for every
//! kind, through one adapter ([`Kind`]), as a multi-backend lock library
//! keeps its primitives honest.

use crate::support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{HeldLease, LockError, LockGuard, LockManager, LockOptions, Permit, WriteGuard};
use support::{assert_lease_lost, fixed_lease, long, poll_async, waiting, Harness, PROMPTLY};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout};

use crate::conformance::WATCHDOG_TTL;

support::conformance!(
    held_mutex_is_busy_for_other_managers_until_released,
    dropped_guard_frees_the_mutex_promptly,
    cancelled_scoped_body_frees_the_mutex_promptly,
    waiter_is_woken_by_the_release_not_by_the_holders_ttl,
    waiter_gives_up_with_timeout_while_the_holder_keeps_the_mutex,
    waiter_takes_over_when_a_crashed_holders_ttl_runs_out,
    expired_holder_cannot_release_the_new_holders_mutex,
    concurrent_increments_under_the_mutex_lose_no_updates,
    watchdog_keeps_the_mutex_while_the_body_runs_three_ttls,
    acquisition_dropped_after_first_poll_leaves_no_mutex,
);

/// A kind of lock used as a mutex.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The plain lock.
    Lock,
    /// A semaphore of one permit.
    Permit,
    /// A read/write lock's write lease.
    Write,
}

const KINDS: [Kind; 3] = [Kind::Lock, Kind::Permit, Kind::Write];

/// The guard of a mutex of any kind.
#[derive(Debug)]
enum Guard {
    Lock(LockGuard),
    Permit(Permit),
    Write(WriteGuard),
}

impl Guard {
    fn held(&self) -> &HeldLease {
        match self {
            Guard::Lock(guard) => guard,
            Guard::Permit(permit) => permit,
            Guard::Write(guard) => guard,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Guard::Lock(guard) => guard.release().await,
            Guard::Permit(permit) => permit.release().await,
            Guard::Write(guard) => guard.release().await,
        }
    }
}

impl Kind {
    /// Takes the mutex `key` of this kind, waiting up to `options.wait`.
    async fn acquire(
        self,
        locks: &LockManager,
        key: &str,
        options: LockOptions,
    ) -> Result<Guard, LockError> {
        Ok(match self {
            Kind::Lock => Guard::Lock(locks.acquire(key, options).await?),
            Kind::Permit => Guard::Permit(locks.semaphore(key, 1).acquire(options).await?),
            Kind::Write => Guard::Write(locks.rwlock(key).acquire_write(options).await?),
        })
    }

    /// One attempt: `None` when the mutex is held elsewhere.
    async fn try_acquire(
        self,
        locks: &LockManager,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<Guard>, LockError> {
        Ok(match self {
            Kind::Lock => locks.try_acquire(key, options).await?.map(Guard::Lock),
            Kind::Permit => {
                let semaphore = locks.semaphore(key, 1);
                semaphore.try_acquire(options).await?.map(Guard::Permit)
            }
            Kind::Write => {
                let rwlock = locks.rwlock(key);
                rwlock.try_acquire_write(options).await?.map(Guard::Write)
            }
        })
    }

    /// Runs `body` holding the mutex `key`.
    async fn with<F: Future>(
        self,
        locks: &LockManager,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        match self {
            Kind::Lock => locks.with_lock(key, options, body).await,
            Kind::Permit => locks.semaphore(key, 1).with_permit(options, body).await,
            Kind::Write => locks.rwlock(key).with_write(options, body).await,
        }
    }

    /// Whether another manager finds the mutex `key` held.
    async fn held_elsewhere(self, h: &Harness, key: &str) -> bool {
        match self.try_acquire(&h.b, key, long()).await.unwrap() {
            Some(guard) => {
                guard.release().await.unwrap();
                false
            }
            None => true,
        }
    }

    /// Asserts that another manager takes the mutex `key` within [`PROMPTLY`].
    async fn assert_freed_promptly(self, h: &Harness, key: &str) {
        let freed = poll_async(PROMPTLY, || async { !self.held_elsewhere(h, key).await }).await;
        assert!(
            freed,
            "{self:?} `{key}` still held {PROMPTLY:?} after its end"
        );
    }
}

async fn held_mutex_is_busy_for_other_managers_until_released(h: Harness) {
    for kind in KINDS {
        let guard = kind.try_acquire(&h.a, "k", long()).await.unwrap();
        let guard = guard.unwrap_or_else(|| panic!("{kind:?}: free mutex"));
        assert_eq!(guard.held().key(), "k");
        assert!(
            kind.try_acquire(&h.b, "k", long()).await.unwrap().is_none(),
            "{kind:?}: a second owner got a held mutex"
        );
        guard.release().await.unwrap();
        assert!(!kind.held_elsewhere(&h, "k").await, "{kind:?}: not freed");
    }
}

async fn dropped_guard_frees_the_mutex_promptly(h: Harness) {
    for kind in KINDS {
        let guard = kind.acquire(&h.a, "k", long()).await.unwrap();
        assert!(kind.held_elsewhere(&h, "k").await);
        drop(guard);
        kind.assert_freed_promptly(&h, "k").await;
    }
}

async fn cancelled_scoped_body_frees_the_mutex_promptly(h: Harness) {
    for kind in KINDS {
        let body = kind.with(&h.a, "k", long(), sleep(Duration::from_secs(60)));
        assert!(timeout(Duration::from_millis(300), body).await.is_err());
        kind.assert_freed_promptly(&h, "k").await;
    }
}

async fn waiter_is_woken_by_the_release_not_by_the_holders_ttl(h: Harness) {
    for kind in KINDS {
        let holder = kind.acquire(&h.a, "k", long()).await.unwrap();
        let releaser = tokio::spawn(async move {
            sleep(Duration::from_millis(200)).await;
            holder.release().await
        });
        let started = Instant::now();
        let waiter = kind
            .acquire(&h.b, "k", waiting(Duration::from_secs(20)))
            .await;
        let elapsed = started.elapsed();
        let waiter = waiter.unwrap_or_else(|err| panic!("{kind:?}: {err:?}"));
        assert!(
            elapsed < Duration::from_secs(10),
            "{kind:?}: the waiter took {elapsed:?}, the 30 s TTL and not the release"
        );
        releaser.await.unwrap().unwrap();
        waiter.release().await.unwrap();
    }
}

async fn waiter_gives_up_with_timeout_while_the_holder_keeps_the_mutex(h: Harness) {
    for kind in KINDS {
        let holder = kind.acquire(&h.a, "k", long()).await.unwrap();
        let wait = Duration::from_millis(300);
        let result = timeout(
            Duration::from_secs(5),
            kind.acquire(&h.b, "k", waiting(wait)),
        )
        .await
        .expect("a 300 ms wait ends well within 5 s");
        match result {
            Err(LockError::Timeout { key, waited, .. }) => {
                assert_eq!((key.as_str(), waited), ("k", wait), "{kind:?}");
            }
            other => panic!("{kind:?}: expected Timeout, got {other:?}"),
        }
        assert!(!holder.held().is_lost());
        holder.release().await.expect("the holder kept its mutex");
    }
}

async fn waiter_takes_over_when_a_crashed_holders_ttl_runs_out(h: Harness) {
    for kind in KINDS {
        let crashed = kind
            .acquire(&h.a, "k", fixed_lease(Duration::from_millis(300)))
            .await
            .unwrap();
        // A crashed process neither releases nor renews: its lease only expires.
        std::mem::forget(crashed);
        let waiter = kind
            .acquire(&h.b, "k", waiting(Duration::from_secs(5)))
            .await;
        let waiter = waiter.unwrap_or_else(|err| panic!("{kind:?}: {err:?}"));
        waiter.release().await.unwrap();
    }
}

async fn expired_holder_cannot_release_the_new_holders_mutex(h: Harness) {
    for kind in KINDS {
        let stale = kind
            .acquire(&h.a, "k", fixed_lease(Duration::from_millis(150)))
            .await
            .unwrap();
        let new_owner = kind
            .acquire(&h.b, "k", waiting(Duration::from_secs(2)))
            .await
            .unwrap_or_else(|err| panic!("{kind:?}: the 150 ms lease never ended: {err:?}"));
        assert!(stale.held().is_lost(), "{kind:?}: expired lease not lost");
        assert_lease_lost(stale.release().await, "k");
        assert!(
            kind.try_acquire(&h.a, "k", long()).await.unwrap().is_none(),
            "{kind:?}: the expired holder's release freed the new owner's mutex"
        );
        new_owner
            .release()
            .await
            .expect("the new owner still holds it");
    }
}

async fn concurrent_increments_under_the_mutex_lose_no_updates(h: Harness) {
    for kind in KINDS {
        let counter = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let locks = if task % 2 == 0 {
                    h.a.clone()
                } else {
                    h.b.clone()
                };
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    for _ in 0..5 {
                        let counter = Arc::clone(&counter);
                        let increment = async move {
                            let seen = counter.load(Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            counter.store(seen + 1, Ordering::SeqCst);
                        };
                        let options = waiting(Duration::from_secs(20));
                        kind.with(&locks, "counter", options, increment)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(counter.load(Ordering::SeqCst), 40, "{kind:?}");
    }
}

async fn watchdog_keeps_the_mutex_while_the_body_runs_three_ttls(h: Harness) {
    let (mut entries, mut finishes) = (Vec::new(), Vec::new());
    let bodies = KINDS.map(|kind| {
        let (locks, key) = (h.a.clone(), format!("{kind:?}"));
        let (entered, has_entered) = oneshot::channel();
        let (finish, finished) = oneshot::channel::<()>();
        entries.push(has_entered);
        finishes.push(finish);
        tokio::spawn(async move {
            let options = LockOptions::new().ttl(WATCHDOG_TTL);
            let body = async move {
                entered.send(()).expect("the test waits for the body");
                finished.await.expect("the test ends the body");
            };
            kind.with(&locks, &key, options, body).await
        })
    });
    // Sampled from when every body holds its mutex until three ttls later,
    // and the bodies end only then: on a loaded machine the acquisitions
    // may take longer than a pause, and the samples longer than planned.
    for has_entered in entries {
        has_entered.await.expect("body started");
    }
    for sample in 0..6 {
        sleep(WATCHDOG_TTL / 2).await;
        for kind in KINDS {
            assert!(
                kind.held_elsewhere(&h, &format!("{kind:?}")).await,
                "{kind:?}, sample {sample}: free while its body still ran"
            );
        }
    }
    for finish in finishes {
        finish.send(()).expect("the body waits for its end");
    }
    for (kind, body) in KINDS.into_iter().zip(bodies) {
        body.await
            .unwrap()
            .unwrap_or_else(|err| panic!("{kind:?} kept its lease for the whole body: {err:?}"));
    }
}

async fn acquisition_dropped_after_first_poll_leaves_no_mutex(h: Harness) {
    for kind in KINDS {
        for _ in 0..10 {
            if let Ok(acquired) = timeout(Duration::ZERO, kind.try_acquire(&h.a, "k", long())).await
            {
                let guard = acquired.unwrap();
                guard.expect("free mutex").release().await.unwrap();
            }
            kind.assert_freed_promptly(&h, "k").await;
        }
    }
}
