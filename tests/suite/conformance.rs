//! Behaviour every backend must show, written once and run against a real
//! `redis-server` (`redis::…`), against a real `valkey-server` 9.1
//! (`valkey::…`), against the primary of a Sentinel-managed set-up
//! (`sentinel::…`), against a Redis Cluster of 3 primaries with a replica
//! each (`cluster::…`) and against `LockManager::in_memory()` (`memory::…`).
//!
//! Each test gets its own server (or in-memory table), so tests are
//! independent and run in parallel. The Sentinel tests that run at the same
//! time share one topology (six processes), each in a key namespace of its
//! own; so do the Cluster tests (one cluster of six nodes). Every loop is
//! bounded in count and time.

use crate::support;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    fencing_token, fencing_token_for, held_locks, lease_lost, LockError, LockManager, LockOptions,
    OnLost,
};
use support::{assert_lease_lost, fixed_lease, is_owner_token, long, waiting, Harness, LONG_TTL};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout};

support::conformance!(
    held_lock_is_busy_for_other_managers_until_released,
    owner_tokens_are_128_bit_hex_and_unique_per_acquisition,
    zero_ttl_is_rejected_instead_of_creating_a_lock_that_never_expires,
    expired_holder_cannot_release_new_owners_lock,
    dropped_guard_releases_promptly,
    early_return_releases_promptly,
    question_mark_error_path_releases_promptly,
    panic_in_spawned_task_releases_promptly,
    cancelled_future_releases_promptly,
    cancelled_with_lock_releases_promptly,
    with_lock_releases_after_body,
    with_lock_body_panic_releases_promptly,
    waiter_is_woken_by_release_not_by_holders_ttl,
    waiter_gives_up_with_timeout_while_holder_keeps_lock,
    one_attempt_on_a_held_lock_is_busy_with_the_holders_time_left,
    waiting_without_limit_does_not_overflow_the_deadline,
    waiter_takes_over_when_crashed_holders_ttl_runs_out,
    concurrent_increments_under_lock_lose_no_updates,
    fencing_tokens_strictly_increase_across_holders,
    fenced_locks_come_with_tokens_that_keep_increasing,
    fencing_token_is_refused_once_the_lease_is_lost,
    nested_with_lock_reenters_to_depth_10,
    nested_acquire_reenters_and_shares_the_outer_lease,
    held_locks_lists_nested_keys_innermost_first,
    spawned_task_does_not_inherit_the_callers_lock,
    non_reentrant_nested_acquire_fails_instead_of_deadlocking,
    reentered_lock_is_released_only_when_outermost_exits,
    watchdog_keeps_lock_while_body_runs_three_ttls,
    fixed_lease_running_out_cancels_body_with_lease_lost,
    on_lost_continue_finishes_body_and_reports_loss,
    reentering_a_lost_lease_fails_instead_of_running_unlocked,
    reentered_scope_cancels_its_own_body_when_the_lease_is_lost,
    fencing_token_is_the_innermost_scopes_keys_token,
    ttl_too_long_to_represent_is_rejected_not_a_panic,
    release_future_dropped_after_first_poll_still_releases,
    acquire_future_dropped_after_first_poll_leaves_no_lock,
);

async fn held_lock_is_busy_for_other_managers_until_released(h: Harness) {
    let guard =
        h.a.try_acquire("k", long())
            .await
            .unwrap()
            .expect("free lock");
    assert_eq!(guard.key(), "k");
    assert!(!guard.is_lost());
    assert!(
        h.b.try_acquire("k", long()).await.unwrap().is_none(),
        "a second owner got a held lock"
    );
    guard.release().await.expect("release of a held lock");
    let again = h.b.try_acquire("k", long()).await.unwrap();
    again
        .expect("lock free after release")
        .release()
        .await
        .unwrap();
}

async fn owner_tokens_are_128_bit_hex_and_unique_per_acquisition(h: Harness) {
    let mut seen = HashSet::new();
    for round in 0..8 {
        for key in ["same", "other"] {
            let manager = h.alternate(round);
            let guard = manager.acquire(key, long()).await.unwrap();
            let token = guard.token().to_owned();
            assert!(
                is_owner_token(&token),
                "token {token:?} does not start with 32 lowercase hex digits and `|`"
            );
            assert!(
                seen.insert(token.clone()),
                "token {token} was handed out twice"
            );
            guard.release().await.unwrap();
        }
    }
    assert_eq!(seen.len(), 16);
}

async fn zero_ttl_is_rejected_instead_of_creating_a_lock_that_never_expires(h: Harness) {
    let result =
        h.a.try_acquire("k", LockOptions::new().ttl(Duration::ZERO))
            .await;
    assert!(
        matches!(result, Err(LockError::InvalidOptions(_))),
        "zero ttl gave {result:?}"
    );
    assert!(
        !h.held_elsewhere("k").await,
        "a rejected acquisition left a lock"
    );
}

async fn expired_holder_cannot_release_new_owners_lock(h: Harness) {
    let ttl = Duration::from_millis(150);
    let stale = h.a.acquire("k", fixed_lease(ttl)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut new_owner = None;
    for _ in 0..200 {
        if let Some(guard) = h.b.try_acquire("k", long()).await.unwrap() {
            new_owner = Some(guard);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "150 ms lease still held after 2 s"
        );
        sleep(Duration::from_millis(10)).await;
    }
    let new_owner = new_owner.expect("lease expired within the bounded loop");
    assert!(
        stale.is_lost(),
        "fixed lease past its TTL not reported lost"
    );
    assert_lease_lost(stale.release().await, "k");
    assert!(
        h.a.try_acquire("k", long()).await.unwrap().is_none(),
        "the expired holder's release freed the new owner's lock"
    );
    assert!(!new_owner.is_lost());
    new_owner.release().await.expect("new owner still holds it");
}

async fn dropped_guard_releases_promptly(h: Harness) {
    let guard = h.a.acquire("k", long()).await.unwrap();
    assert!(h.held_elsewhere("k").await);
    drop(guard);
    h.assert_freed_promptly("k").await;
}

/// Returns early from inside the lock's scope.
async fn first_even_under_lock(h: &Harness, key: &str, items: &[u32]) -> Result<u32, LockError> {
    let _guard = h.a.acquire(key, long()).await?;
    assert!(h.held_elsewhere(key).await);
    for &item in items {
        if item % 2 == 0 {
            return Ok(item);
        }
    }
    Ok(0)
}

async fn early_return_releases_promptly(h: Harness) {
    assert_eq!(first_even_under_lock(&h, "k", &[1, 4, 5]).await.unwrap(), 4);
    h.assert_freed_promptly("k").await;
}

/// Leaves through `?` while holding the lock.
async fn parse_under_lock(
    h: &Harness,
    key: &str,
    input: &str,
) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let _guard = h.a.acquire(key, long()).await?;
    assert!(h.held_elsewhere(key).await);
    let number: u32 = input.parse()?;
    Ok(number)
}

async fn question_mark_error_path_releases_promptly(h: Harness) {
    let result = parse_under_lock(&h, "k", "not a number").await;
    assert!(result.is_err(), "parse should fail, got {result:?}");
    h.assert_freed_promptly("k").await;
}

async fn panic_in_spawned_task_releases_promptly(h: Harness) {
    let manager = h.a.clone();
    let (acquired, was_acquired) = oneshot::channel();
    let task = tokio::spawn(async move {
        let _guard = manager.acquire("k", long()).await.unwrap();
        acquired.send(()).unwrap();
        panic!("deliberate panic while holding lock `k` (expected by the test)");
    });
    let err = task.await.expect_err("the task panics");
    assert!(err.is_panic());
    was_acquired
        .await
        .expect("the task held the lock before panicking");
    h.assert_freed_promptly("k").await;
}

async fn cancelled_future_releases_promptly(h: Harness) {
    let acquired = AtomicBool::new(false);
    let holder = async {
        let _guard = h.a.acquire("k", long()).await.unwrap();
        acquired.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
    };
    let result = timeout(Duration::from_millis(300), holder).await;
    assert!(result.is_err(), "the holder never finishes by itself");
    assert!(acquired.load(Ordering::SeqCst), "the holder took the lock");
    h.assert_freed_promptly("k").await;
}

async fn cancelled_with_lock_releases_promptly(h: Harness) {
    let entered = AtomicBool::new(false);
    let locked = h.a.with_lock("k", long(), async {
        entered.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
    });
    let result = timeout(Duration::from_millis(300), locked).await;
    assert!(result.is_err(), "the body never finishes by itself");
    assert!(
        entered.load(Ordering::SeqCst),
        "the body ran under the lock"
    );
    h.assert_freed_promptly("k").await;
}

async fn with_lock_releases_after_body(h: Harness) {
    let value =
        h.a.with_lock("k", long(), async {
            assert!(h.held_elsewhere("k").await, "body runs under the lock");
            assert_eq!(held_locks(), vec!["k".to_owned()]);
            7
        })
        .await
        .unwrap();
    assert_eq!(value, 7);
    assert!(held_locks().is_empty(), "scope ended with with_lock");
    h.assert_freed_promptly("k").await;
}

async fn with_lock_body_panic_releases_promptly(h: Harness) {
    let manager = h.a.clone();
    let (acquired, was_acquired) = oneshot::channel();
    let task = tokio::spawn(async move {
        manager
            .with_lock("k", long(), async move {
                acquired.send(()).unwrap();
                panic!("deliberate panic in a with_lock body (expected by the test)");
            })
            .await
    });
    let err = task.await.expect_err("the body panics");
    assert!(err.is_panic());
    was_acquired.await.expect("the body ran under the lock");
    h.assert_freed_promptly("k").await;
}

async fn waiter_is_woken_by_release_not_by_holders_ttl(h: Harness) {
    let holder = h.a.acquire("k", long()).await.unwrap();
    let releaser = tokio::spawn(async move {
        sleep(Duration::from_millis(200)).await;
        holder.release().await
    });
    let started = Instant::now();
    // Woken only by its deadline, the waiter would get the lock after 20 s;
    // by the 30 s TTL, not at all.
    let waiter = h.b.acquire("k", waiting(Duration::from_secs(20))).await;
    let elapsed = started.elapsed();
    let waiter = waiter.expect("the waiter gets the lock once the holder releases");
    assert!(
        elapsed < Duration::from_secs(10),
        "waiter took {elapsed:?}: it waited for the 30 s TTL, not the release"
    );
    releaser
        .await
        .unwrap()
        .expect("holder released its own lock");
    waiter.release().await.unwrap();
}

/// A zero `wait` is one attempt: a held lock is `Busy`, not a `Timeout` of
/// a wait that never ran, and says how long the holder's lease has left.
async fn one_attempt_on_a_held_lock_is_busy_with_the_holders_time_left(h: Harness) {
    let _holder = h.a.acquire("k", long()).await.unwrap();
    match h.b.acquire("k", long()).await {
        Err(LockError::Busy {
            key,
            remaining,
            lock_delay: None,
        }) => {
            assert_eq!(key, "k");
            let remaining = remaining.expect("the holder's time left is known");
            assert!(
                remaining > Duration::ZERO && remaining <= LONG_TTL,
                "{remaining:?}"
            );
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(
        h.b.try_acquire("k", long()).await.unwrap().is_none(),
        "try_ says busy as None"
    );
}

async fn waiter_gives_up_with_timeout_while_holder_keeps_lock(h: Harness) {
    let holder = h.a.acquire("k", long()).await.unwrap();
    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(5),
        h.b.acquire("k", waiting(Duration::from_millis(300))),
    )
    .await
    .expect("a 300 ms wait ends well within 5 s");
    let elapsed = started.elapsed();
    match result {
        Err(LockError::Timeout {
            key,
            waited,
            lock_delay: None,
        }) => {
            assert_eq!(key, "k");
            assert_eq!(waited, Duration::from_millis(300));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        elapsed >= Duration::from_millis(250),
        "gave up after {elapsed:?}, before its 300 ms wait"
    );
    assert!(!holder.is_lost());
    holder.release().await.expect("the holder kept its lock");
}

async fn waiting_without_limit_does_not_overflow_the_deadline(h: Harness) {
    let holder = h.a.acquire("k", long()).await.unwrap();
    let releaser = tokio::spawn(async move {
        sleep(Duration::from_millis(100)).await;
        holder.release().await
    });
    let manager = h.b.clone();
    let waiter = tokio::spawn(async move {
        let guard = manager.acquire("k", waiting(Duration::MAX)).await?;
        guard.fencing_token().await
    });
    let fence = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken by the release")
        .expect("`wait(Duration::MAX)` means no limit, not a panic")
        .expect("the waiter gets the lock");
    assert!(fence > 0);
    releaser.await.unwrap().unwrap();
    h.assert_freed_promptly("k").await;
}

async fn waiter_takes_over_when_crashed_holders_ttl_runs_out(h: Harness) {
    let crashed =
        h.a.acquire("k", fixed_lease(Duration::from_millis(300)))
            .await
            .unwrap();
    // A crashed process neither releases nor renews: its lock only expires.
    std::mem::forget(crashed);
    let started = Instant::now();
    let waiter =
        h.b.acquire("k", waiting(Duration::from_secs(5)))
            .await
            .expect("the waiter gets the lock once the crashed holder's TTL ran out");
    assert!(started.elapsed() < Duration::from_secs(5));
    waiter.release().await.unwrap();
}

async fn concurrent_increments_under_lock_lose_no_updates(h: Harness) {
    let counter = Arc::new(AtomicUsize::new(0));
    let shared = Arc::clone(&counter);
    let increments = h
        .locked_increments(move || {
            let counter = Arc::clone(&shared);
            async move {
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
            }
        })
        .await;
    assert_eq!(counter.load(Ordering::SeqCst), increments);
}

async fn fenced_locks_come_with_tokens_that_keep_increasing(h: Harness) {
    let lazy = h.a.acquire("k", long()).await.unwrap();
    let mut last = lazy.fencing_token().await.unwrap();
    lazy.release().await.unwrap();
    for round in 0..4 {
        let guard = h
            .alternate(round)
            .acquire("k", long().fenced(true))
            .await
            .unwrap();
        let token = guard.fencing_token().await.unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        assert_eq!(guard.fencing_token().await.unwrap(), token);
        last = token;
        guard.release().await.unwrap();
    }
}

async fn fencing_tokens_strictly_increase_across_holders(h: Harness) {
    let mut last = 0;
    for round in 0..5 {
        let guard = h.a.acquire("k", long()).await.unwrap();
        let token = guard.fencing_token().await.unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        guard.release().await.unwrap();

        let in_scope =
            h.b.with_lock("k", long(), async { fencing_token().await })
                .await
                .unwrap()
                .expect("with_lock body runs in a lock scope");
        assert!(
            in_scope > last,
            "round {round}: token {in_scope} after {last}"
        );
        last = in_scope;
    }
    assert!(
        matches!(fencing_token().await, Err(LockError::NotHeld { key: None })),
        "no lock scope outside with_lock"
    );
}

/// `depth` nested `with_lock`s of `key`; returns how many levels ran inside.
fn nest(
    manager: LockManager,
    key: String,
    depth: u32,
    outer_fence: Option<u64>,
) -> Pin<Box<dyn Future<Output = Result<u32, LockError>> + Send>> {
    Box::pin(async move {
        let inner = manager.clone();
        let scope_key = key.clone();
        manager
            .with_lock(&key, long(), async move {
                assert_eq!(held_locks(), vec![scope_key.clone()]);
                let fence = fencing_token().await.expect("inside a lock scope");
                if let Some(outer) = outer_fence {
                    assert_eq!(fence, outer, "re-entry issued a new fencing token");
                }
                if depth == 0 {
                    return Ok(0);
                }
                Ok(nest(inner, scope_key, depth - 1, Some(fence)).await? + 1)
            })
            .await?
    })
}

async fn fencing_token_is_refused_once_the_lease_is_lost(h: Harness) {
    let guard =
        h.a.acquire("k", fixed_lease(Duration::from_millis(300)))
            .await
            .unwrap();
    let issued = guard.fencing_token().await.unwrap();
    assert_eq!(guard.fencing_token().await.unwrap(), issued, "asked twice");
    guard.lost().await;

    assert_lease_lost(guard.fencing_token().await, "k");
}

async fn nested_with_lock_reenters_to_depth_10(h: Harness) {
    let levels = timeout(
        Duration::from_secs(5),
        nest(h.a.clone(), "k".to_owned(), 10, None),
    )
    .await
    .expect("re-entry never waits for itself");
    assert_eq!(levels.expect("every level re-entered"), 10);
    h.assert_freed_promptly("k").await;
}

async fn nested_acquire_reenters_and_shares_the_outer_lease(h: Harness) {
    let manager = h.a.clone();
    h.a.with_lock("k", long(), async {
        let outer = fencing_token().await.unwrap();
        let inner = timeout(Duration::from_secs(2), manager.try_acquire("k", long()))
            .await
            .expect("re-entry does not wait")
            .unwrap()
            .expect("re-entry succeeds");
        assert!(inner.is_reentered());
        assert_eq!(inner.key(), "k");
        assert_eq!(inner.fencing_token().await.unwrap(), outer);
        inner.release().await.expect("releasing a re-entered guard");
        assert!(
            h.held_elsewhere("k").await,
            "inner release freed the outer lock"
        );
    })
    .await
    .unwrap();
    h.assert_freed_promptly("k").await;
}

async fn held_locks_lists_nested_keys_innermost_first(h: Harness) {
    assert!(held_locks().is_empty());
    let seen =
        h.a.with_lock("outer", long(), async {
            h.a.with_lock("inner", long(), async { held_locks() })
                .await
                .unwrap()
        })
        .await
        .unwrap();
    assert_eq!(seen, vec!["inner".to_owned(), "outer".to_owned()]);
    assert!(held_locks().is_empty());
}

async fn spawned_task_does_not_inherit_the_callers_lock(h: Harness) {
    let manager = h.a.clone();
    h.a.with_lock("k", long(), async move {
        let spawned = tokio::spawn(async move {
            let inherited = held_locks();
            let attempt = manager.try_acquire("k", long()).await.unwrap();
            (inherited, attempt.is_some())
        });
        let (inherited, got_it) = spawned.await.unwrap();
        assert!(inherited.is_empty(), "spawned task sees {inherited:?}");
        assert!(!got_it, "a spawned task re-entered its parent's lock");
    })
    .await
    .unwrap();
}

async fn non_reentrant_nested_acquire_fails_instead_of_deadlocking(h: Harness) {
    let strict = long().reentrant(false).wait(Duration::from_secs(5));
    h.a.with_lock("k", long(), async {
        let nested = timeout(Duration::from_secs(2), h.a.acquire("k", strict.clone()))
            .await
            .expect("fails at once instead of waiting for itself");
        assert!(
            matches!(&nested, Err(LockError::AlreadyHeld { key }) if key == "k"),
            "nested non-re-entrant acquire gave {nested:?}"
        );
        let nested_with = timeout(
            Duration::from_secs(2),
            h.a.with_lock("k", strict.clone(), async {}),
        )
        .await
        .expect("fails at once instead of waiting for itself");
        assert!(
            matches!(&nested_with, Err(LockError::AlreadyHeld { key }) if key == "k"),
            "nested non-re-entrant with_lock gave {nested_with:?}"
        );
        assert!(
            h.held_elsewhere("k").await,
            "the refusal freed the outer lock"
        );
    })
    .await
    .unwrap();
    h.assert_freed_promptly("k").await;
}

async fn reentered_lock_is_released_only_when_outermost_exits(h: Harness) {
    h.a.with_lock("k", long(), async {
        h.a.with_lock("k", long(), async {
            h.a.with_lock("k", long(), async {}).await.unwrap();
            assert!(h.held_elsewhere("k").await, "innermost exit freed the lock");
        })
        .await
        .unwrap();
        assert!(h.held_elsewhere("k").await, "middle exit freed the lock");
    })
    .await
    .unwrap();
    h.assert_freed_promptly("k").await;
}

/// The ttl of the watchdog tests: long enough that a busy machine's scheduling
/// delays stay far inside a renewal period (ttl / 3) and the lease's safety
/// margin, so only a watchdog that does not renew can fail them.
pub(crate) const WATCHDOG_TTL: Duration = Duration::from_secs(1);

async fn watchdog_keeps_lock_while_body_runs_three_ttls(h: Harness) {
    let manager = h.a.clone();
    let (entered, has_entered) = oneshot::channel();
    let (finish, finished) = oneshot::channel::<()>();
    let body = tokio::spawn(async move {
        let options = LockOptions::new().ttl(WATCHDOG_TTL);
        manager
            .with_lock("k", options, async move {
                entered.send(()).unwrap();
                finished.await.expect("the test ends the body");
                lease_lost()
            })
            .await
    });
    // Sampled for three ttls while the body runs; it ends only after the
    // last sample, however long the samples took on a loaded machine.
    has_entered.await.expect("body started");
    for sample in 0..6 {
        sleep(WATCHDOG_TTL / 2).await;
        assert!(
            h.held_elsewhere("k").await,
            "sample {sample}: lock free while its body still ran"
        );
    }
    finish.send(()).expect("the body waits for its end");
    let lost = body
        .await
        .unwrap()
        .expect("with_lock kept its lease for the whole body");
    assert!(!lost, "lease_lost() true although renewal kept the lease");
}

async fn fixed_lease_running_out_cancels_body_with_lease_lost(h: Harness) {
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(10),
        h.a.with_lock("k", fixed_lease(Duration::from_millis(200)), async {
            sleep(Duration::from_secs(5)).await;
            finished.store(true, Ordering::SeqCst);
        }),
    )
    .await
    .expect("with_lock returns by itself");
    let elapsed = started.elapsed();
    assert_lease_lost(result, "k");
    assert!(
        elapsed < Duration::from_secs(3),
        "loss reported after {elapsed:?}"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body went on after losing its lease"
    );
}

async fn on_lost_continue_finishes_body_and_reports_loss(h: Harness) {
    let options = fixed_lease(Duration::from_millis(200)).on_lost(OnLost::Continue);
    let (before, after) =
        h.a.with_lock("k", options, async {
            let before = lease_lost();
            sleep(Duration::from_millis(600)).await;
            (before, lease_lost())
        })
        .await
        .expect("OnLost::Continue returns the body's result");
    assert!(!before, "lease reported lost while held");
    assert!(after, "lease_lost() false after the fixed lease ran out");
}

async fn reentering_a_lost_lease_fails_instead_of_running_unlocked(h: Harness) {
    let outer = fixed_lease(Duration::from_millis(200)).on_lost(OnLost::Continue);
    let (nested_with, nested_acquire) =
        h.a.with_lock("k", outer, async {
            sleep(Duration::from_millis(400)).await;
            let ran = AtomicBool::new(false);
            let nested_with =
                h.a.with_lock("k", long(), async { ran.store(true, Ordering::SeqCst) })
                    .await;
            assert!(
                !ran.load(Ordering::SeqCst),
                "a body ran re-entered into a lost lease"
            );
            (
                nested_with,
                h.a.try_acquire("k", long())
                    .await
                    .map(|guard| guard.is_some()),
            )
        })
        .await
        .expect("OnLost::Continue returns the body's result");
    assert_lease_lost(nested_with, "k");
    assert_lease_lost(nested_acquire, "k");
}

async fn reentered_scope_cancels_its_own_body_when_the_lease_is_lost(h: Harness) {
    let outer = fixed_lease(Duration::from_millis(300)).on_lost(OnLost::Continue);
    let finished = AtomicBool::new(false);
    let inner =
        h.a.with_lock("k", outer, async {
            timeout(
                Duration::from_secs(5),
                h.a.with_lock("k", long(), async {
                    sleep(Duration::from_secs(3)).await;
                    finished.store(true, Ordering::SeqCst);
                }),
            )
            .await
            .expect("the re-entered scope watches the lease")
        })
        .await
        .expect("OnLost::Continue returns the body's result");
    assert_lease_lost(inner, "k");
    assert!(
        !finished.load(Ordering::SeqCst),
        "the re-entered body went on after the lease was lost"
    );
}

async fn fencing_token_is_the_innermost_scopes_keys_token(h: Harness) {
    let (stock, order, innermost, stock_by_key) =
        h.a.with_lock("stock:1", long(), async {
            let stock = fencing_token().await.unwrap();
            h.a.with_lock("order:9", long(), async {
                let order = fencing_token().await.unwrap();
                h.a.with_lock("stock:1", long(), async {
                    (
                        stock,
                        order,
                        fencing_token().await.ok(),
                        fencing_token_for("stock:1").await.ok(),
                    )
                })
                .await
                .unwrap()
            })
            .await
            .unwrap()
        })
        .await
        .unwrap();
    assert_ne!(stock, order);
    assert_eq!(
        innermost,
        Some(stock),
        "fencing_token() in re-entered stock:1"
    );
    assert_eq!(stock_by_key, Some(stock));
    assert!(
        matches!(
            fencing_token_for("stock:1").await,
            Err(LockError::NotHeld { key: Some(key) }) if key == "stock:1"
        ),
        "outside every scope"
    );
}

async fn ttl_too_long_to_represent_is_rejected_not_a_panic(h: Harness) {
    for ttl in [Duration::MAX, Duration::from_secs(u64::MAX / 1000 + 1)] {
        let result = h.a.try_acquire("k", LockOptions::new().ttl(ttl)).await;
        assert!(
            matches!(result, Err(LockError::InvalidOptions(_))),
            "ttl {ttl:?} gave {result:?}"
        );
    }
    let waits_forever = LockOptions::new()
        .ttl(LONG_TTL_FOR_MAX_WAIT)
        .wait(Duration::MAX);
    let guard = h.a.acquire("k", waits_forever).await.expect("free lock");
    guard.release().await.unwrap();
}

/// Any ttl the waiting test can use: the lock is free, so nobody waits.
const LONG_TTL_FOR_MAX_WAIT: Duration = Duration::from_secs(30);

async fn release_future_dropped_after_first_poll_still_releases(h: Harness) {
    let guard =
        h.a.try_acquire("k", long())
            .await
            .unwrap()
            .expect("free lock");
    let cut_short = timeout(Duration::ZERO, guard.release()).await;
    assert!(cut_short.is_err() || cut_short.is_ok_and(|released| released.is_ok()));
    h.assert_freed_promptly("k").await;
}

async fn acquire_future_dropped_after_first_poll_leaves_no_lock(h: Harness) {
    for _ in 0..20 {
        if let Ok(acquired) = timeout(Duration::ZERO, h.a.try_acquire("k", long())).await {
            acquired
                .unwrap()
                .expect("free lock")
                .release()
                .await
                .unwrap();
        }
        h.assert_freed_promptly("k").await;
    }
}
