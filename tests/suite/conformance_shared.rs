//! Behaviour of the shared-lock kinds that every backend with them must
//! show: counting semaphores (`LockManager::semaphore` → `Permit`) and
//! read/write locks (`acquire_read` / `acquire_write` → `ReadGuard` /
//! `WriteGuard`, `with_read` / `with_write`). Written once and run, as the
//! plain locks' `conformance.rs` is, against a real `redis-server`
//! (`redis::…`), a real `valkey-server` 9.1 (`valkey::…`), the primary of a
//! Sentinel-managed set-up (`sentinel::…`), a Redis Cluster (`cluster::…`)
//! and `LockManager::in_memory()` (`memory::…`).
//! Redlock refuses both kinds; `semaphore.rs` and `rwlock.rs` test that, and
//! what needs one backend's internals (a member removed behind the holder's
//! back, a SIGKILLed process, the attribute).
//!
//! Leases that must not run out during a test have the 30 s `LONG_TTL`:
//! a permit or lease that comes back well within it was released, not
//! expired. Probes look from another manager (`Harness::b`) and from a task
//! of their own, outside every lock scope. Every loop is bounded in count
//! and time.

use crate::conformance::WATCHDOG_TTL;
use crate::support;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    fencing_token, fencing_token_for, lease_lost, LockError, LockManager, LockOptions, Permit,
    WriteGuard,
};
use support::{
    assert_lease_lost, fixed_lease, is_owner_token, join_within, long, poll_async,
    readers_kept_out, waiting, Harness, Occupancy, Visit, VisitLog, LONG_TTL, NO_HANG,
};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout};

support::conformance!(
    // Semaphores.
    n_permits_admit_exactly_n_holders_across_managers,
    permits_bound_concurrent_holders_across_managers,
    released_and_dropped_permits_come_back_promptly,
    early_return_from_with_permit_gives_the_permit_back_promptly,
    question_mark_in_with_permit_gives_the_permit_back_promptly,
    panic_in_with_permit_body_gives_the_permit_back_promptly,
    permit_waiter_is_woken_by_release_not_by_holders_ttl,
    permit_waiter_gives_up_with_timeout_while_permits_stay_held,
    one_attempt_on_a_full_semaphore_or_a_written_rwlock_is_busy,
    crashed_holders_permit_comes_back_by_its_ttl_not_before,
    watchdog_keeps_permit_across_three_ttls,
    zero_permits_zero_ttl_and_lock_only_options_are_invalid_not_panics,
    nested_acquire_of_the_same_semaphore_fails_at_once_inside_with_permit,
    expired_permit_is_reported_lost_and_cannot_free_the_next_holders,
    lost_permit_cancels_with_permit_body_with_lease_lost,
    lowering_permits_revokes_nobody_and_holds_newcomers_back,
    waiting_without_limit_does_not_overflow_the_deadline,
    release_futures_dropped_after_first_poll_still_release,
    // Read/write locks.
    readers_share_the_lock_across_managers,
    writer_excludes_readers_and_other_writers,
    mixed_readers_and_writers_never_overlap_a_writer,
    waiting_writer_holds_back_new_readers,
    released_reader_wakes_a_waiting_writer_not_its_ttl,
    released_writer_wakes_waiting_readers_not_its_ttl,
    dropped_read_and_write_guards_release_promptly,
    with_read_and_with_write_release_after_body_and_panic,
    read_inside_write_re_enters_the_write_lease,
    write_inside_read_fails_at_once_with_upgrade_refused,
    writers_fencing_tokens_strictly_increase_across_holders_and_managers,
    fenced_read_is_invalid_options_and_readers_get_no_token,
    zero_ttl_and_lock_only_options_are_invalid_for_readers_and_writers,
    crashed_readers_fixed_lease_blocks_writers_only_until_its_ttl,
    expired_rw_leases_are_reported_lost_and_cannot_free_the_next_writers,
    lost_lease_cancels_with_read_and_with_write_bodies,
    watchdog_keeps_read_and_write_leases_across_three_ttls,
    fencing_token_for_a_key_names_its_plain_lock_not_a_read_write_lock_on_it,
);

// ---------------------------------------------------------------------------
// Semaphores
// ---------------------------------------------------------------------------

/// One `try_acquire` of a permit of the semaphore `key` of `permits` by
/// `manager`: whether it got one (released again at once).
async fn permit_granted(manager: &LockManager, key: &str, permits: u32) -> bool {
    match manager.semaphore(key, permits).try_acquire(long()).await {
        Ok(Some(permit)) => {
            permit.release().await.expect("a fresh permit is ours");
            true
        }
        Ok(None) => false,
        Err(err) => panic!("try_acquire of semaphore `{key}` failed: {err}"),
    }
}

async fn n_permits_admit_exactly_n_holders_across_managers(h: Harness) {
    let mut held = Vec::new();
    for i in 0..3 {
        let permit = h
            .alternate(i)
            .semaphore("k", 3)
            .try_acquire(long())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("permit {} of 3 refused", i + 1));
        assert_eq!(permit.key(), "k");
        assert!(
            is_owner_token(permit.token()),
            "permit token {:?} is not an owner token",
            permit.token()
        );
        held.push(permit);
    }
    let tokens: HashSet<&str> = held.iter().map(|permit| permit.token()).collect();
    assert_eq!(tokens.len(), 3, "two holders share an owner token");
    for manager in [&h.a, &h.b] {
        assert!(
            !permit_granted(manager, "k", 3).await,
            "a fourth holder got one of 3 permits"
        );
    }

    held.pop().unwrap().release().await.expect("a held permit");
    let newcomer =
        h.b.semaphore("k", 3)
            .try_acquire(long())
            .await
            .unwrap()
            .expect("the released permit is free at once");
    assert!(
        !permit_granted(&h.a, "k", 3).await,
        "one release let two newcomers in"
    );
    assert!(held.iter().all(|permit| !permit.is_lost()));
    newcomer.release().await.unwrap();
    for permit in held {
        permit.release().await.unwrap();
    }
    h.assert_permits_back_promptly("k").await;
}

async fn permits_bound_concurrent_holders_across_managers(h: Harness) {
    let occupancy = Arc::new(Occupancy::filling(3));
    let tasks = (0..24)
        .map(|task| {
            let semaphore = h.alternate(task).semaphore("k", 3);
            let occupancy = Arc::clone(&occupancy);
            tokio::spawn(async move {
                let permit = semaphore
                    .acquire(waiting(Duration::from_secs(30)))
                    .await
                    .expect("a permit within 30 s");
                occupancy.visit().await;
                permit.release().await.expect("still our permit");
            })
        })
        .collect();
    join_within(tasks, Duration::from_secs(40), "24 visits under 3 permits").await;
    assert!(
        occupancy.most() <= 3,
        "{} holders of 3 permits at once",
        occupancy.most()
    );
    assert_eq!(occupancy.most(), 3, "24 tasks never filled 3 permits");
}

async fn released_and_dropped_permits_come_back_promptly(h: Harness) {
    let semaphore = h.a.semaphore("k", 2);
    let first = semaphore.acquire(long()).await.unwrap();
    let second = semaphore.acquire(long()).await.unwrap();
    assert!(!permit_granted(&h.b, "k", 2).await, "a third holder of 2");

    first.release().await.expect("release of a held permit");
    assert!(
        permit_granted(&h.b, "k", 2).await,
        "an explicitly released permit is free once release() returned"
    );
    drop(second);
    h.assert_permits_back_promptly("k").await;
}

/// Returns early, from inside a `with_permit` body, with the first even item.
async fn first_even_under_permit(h: &Harness, items: &[u32]) -> Result<u32, LockError> {
    h.a.semaphore("k", 1)
        .with_permit(long(), async {
            assert!(h.permit_held_elsewhere("k").await, "body runs holding it");
            for &item in items {
                if item % 2 == 0 {
                    return item;
                }
            }
            0
        })
        .await
}

async fn early_return_from_with_permit_gives_the_permit_back_promptly(h: Harness) {
    assert_eq!(first_even_under_permit(&h, &[1, 4, 5]).await.unwrap(), 4);
    h.assert_permits_back_promptly("k").await;
}

/// Leaves a `with_permit` body through `?`, and the caller through `?`.
async fn parse_under_permit(
    h: &Harness,
    input: &str,
) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let parsed =
        h.a.semaphore("k", 1)
            .with_permit(long(), async {
                assert!(h.permit_held_elsewhere("k").await, "body runs holding it");
                let number: u32 = input.parse()?;
                Ok::<u32, std::num::ParseIntError>(number)
            })
            .await?;
    Ok(parsed?)
}

async fn question_mark_in_with_permit_gives_the_permit_back_promptly(h: Harness) {
    let result = parse_under_permit(&h, "not a number").await;
    assert!(result.is_err(), "parse should fail, got {result:?}");
    h.assert_permits_back_promptly("k").await;
}

async fn panic_in_with_permit_body_gives_the_permit_back_promptly(h: Harness) {
    let semaphore = h.a.semaphore("k", 1);
    let (entered, has_entered) = oneshot::channel();
    let task = tokio::spawn(async move {
        semaphore
            .with_permit(long(), async move {
                entered.send(()).unwrap();
                panic!("deliberate panic in a with_permit body (expected by the test)");
            })
            .await
    });
    let err = task.await.expect_err("the body panics");
    assert!(err.is_panic());
    has_entered.await.expect("the body ran holding the permit");
    h.assert_permits_back_promptly("k").await;
}

async fn permit_waiter_is_woken_by_release_not_by_holders_ttl(h: Harness) {
    let holder = h.a.semaphore("k", 1).acquire(long()).await.unwrap();
    let releaser = tokio::spawn(async move {
        sleep(Duration::from_millis(200)).await;
        holder.release().await
    });
    let started = Instant::now();
    // Woken only by its deadline, the waiter would get the permit after
    // 20 s; by the holder's 30 s lease, not at all.
    let waiter =
        h.b.semaphore("k", 1)
            .acquire(waiting(Duration::from_secs(20)))
            .await;
    let elapsed = started.elapsed();
    let waiter = waiter.expect("the waiter gets the permit once the holder releases");
    assert!(
        elapsed < Duration::from_secs(10),
        "waiter took {elapsed:?}: it waited for its deadline, not the release"
    );
    releaser.await.unwrap().expect("the holder's own permit");
    waiter.release().await.unwrap();
}

/// `result` is `Busy` on `key` with a time left in (0, [`LONG_TTL`]].
fn assert_busy<T: std::fmt::Debug>(result: Result<T, LockError>, key: &str) {
    match result {
        Err(LockError::Busy {
            key: busy,
            remaining: Some(remaining),
            lock_delay: None,
        }) => {
            assert_eq!(busy, key);
            assert!(
                remaining > Duration::ZERO && remaining <= LONG_TTL,
                "{remaining:?}"
            );
        }
        other => panic!("expected Busy with the time left, got {other:?}"),
    }
}

/// A zero `wait` on a full semaphore, or on a read/write lock a writer
/// holds, is `Busy` with the earliest lease's time left; the `try_` forms
/// say `None`.
async fn one_attempt_on_a_full_semaphore_or_a_written_rwlock_is_busy(h: Harness) {
    let _permit = h.a.semaphore("s", 1).acquire(long()).await.unwrap();
    assert_busy(h.b.semaphore("s", 1).acquire(long()).await, "s");
    assert!(h
        .b
        .semaphore("s", 1)
        .try_acquire(long())
        .await
        .unwrap()
        .is_none());
    let _writer = h.a.rwlock("rw").acquire_write(long()).await.unwrap();
    assert_busy(h.b.rwlock("rw").acquire_read(long()).await, "rw");
    assert_busy(h.b.rwlock("rw").acquire_write(long()).await, "rw");
    assert!(h
        .b
        .rwlock("rw")
        .try_acquire_read(long())
        .await
        .unwrap()
        .is_none());
}

async fn permit_waiter_gives_up_with_timeout_while_permits_stay_held(h: Harness) {
    let first = h.a.semaphore("k", 2).acquire(long()).await.unwrap();
    let second = h.b.semaphore("k", 2).acquire(long()).await.unwrap();
    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(5),
        h.b.semaphore("k", 2)
            .acquire(waiting(Duration::from_millis(300))),
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
    assert!(!first.is_lost() && !second.is_lost());
    first.release().await.expect("the holder kept its permit");
    second.release().await.expect("the holder kept its permit");
}

async fn crashed_holders_permit_comes_back_by_its_ttl_not_before(h: Harness) {
    let ttl = Duration::from_millis(600);
    let taken = Instant::now();
    let crashed =
        h.a.semaphore("k", 1)
            .acquire(fixed_lease(ttl))
            .await
            .unwrap();
    // A crashed process neither releases nor renews: its permit only expires.
    std::mem::forget(crashed);
    let waiter =
        h.b.semaphore("k", 1)
            .acquire(waiting(Duration::from_secs(10)))
            .await
            .expect("the permit comes back once the crashed holder's lease ran out");
    let after = taken.elapsed();
    assert!(
        after >= ttl - Duration::from_millis(50),
        "the permit came back {after:?} after it was taken, before its {ttl:?} lease ended"
    );
    waiter.release().await.unwrap();
}

async fn watchdog_keeps_permit_across_three_ttls(h: Harness) {
    let permit =
        h.a.semaphore("k", 1)
            .acquire(LockOptions::new().ttl(WATCHDOG_TTL))
            .await
            .unwrap();
    for sample in 0..6 {
        sleep(WATCHDOG_TTL / 2).await;
        assert!(
            h.permit_held_elsewhere("k").await,
            "sample {sample}: permit free while its holder lived"
        );
    }
    assert!(!permit.is_lost(), "renewal kept the permit");
    permit
        .release()
        .await
        .expect("the watchdog kept the permit for 3 ttls");
}

async fn zero_permits_zero_ttl_and_lock_only_options_are_invalid_not_panics(h: Harness) {
    let semaphore = h.a.semaphore("k", 1);
    let ran = AtomicBool::new(false);
    let refused = [
        (
            "0 permits",
            h.a.semaphore("k", 0).acquire(long()).await.map(drop),
        ),
        (
            "0 permits, try",
            h.a.semaphore("k", 0).try_acquire(long()).await.map(drop),
        ),
        (
            "0 permits, with_permit",
            h.a.semaphore("k", 0)
                .with_permit(long(), async { ran.store(true, Ordering::SeqCst) })
                .await,
        ),
        (
            "zero ttl",
            semaphore
                .acquire(LockOptions::new().ttl(Duration::ZERO))
                .await
                .map(drop),
        ),
        (
            "ttl too long",
            semaphore
                .try_acquire(LockOptions::new().ttl(Duration::MAX))
                .await
                .map(drop),
        ),
        (
            "fenced",
            semaphore.acquire(long().fenced(true)).await.map(drop),
        ),
        (
            "hold_at_least",
            semaphore
                .acquire(long().hold_at_least(Duration::from_secs(1)))
                .await
                .map(drop),
        ),
        (
            "min_replicas",
            semaphore
                .acquire(long().min_replicas(1, Duration::from_millis(100)))
                .await
                .map(drop),
        ),
    ];
    for (what, result) in refused {
        assert!(
            matches!(result, Err(LockError::InvalidOptions(_))),
            "{what} gave {result:?}"
        );
    }
    assert!(!ran.load(Ordering::SeqCst), "a refused body ran");
    assert!(
        !h.permit_held_elsewhere("k").await,
        "a refused acquisition left a permit"
    );
}

async fn nested_acquire_of_the_same_semaphore_fails_at_once_inside_with_permit(h: Harness) {
    let outer = h.a.semaphore("k", 1);
    let inner = h.a.clone();
    let nested = timeout(
        NO_HANG,
        outer.with_permit(long(), async move {
            // A 30 s wait: only an at-once refusal ends this well within it.
            let same = inner.semaphore("k", 1);
            let waited = same.acquire(waiting(Duration::from_secs(30))).await;
            let tried = same.try_acquire(long()).await;
            let scoped = same.with_permit(long(), async {}).await;
            let other = inner.semaphore("other", 1).acquire(long()).await;
            let lock = inner.acquire("k", long()).await;
            (
                waited.map(drop),
                tried.map(drop),
                scoped,
                other.is_ok(),
                lock.is_ok(),
            )
        }),
    )
    .await
    .expect("the nested acquisition fails at once instead of waiting for itself")
    .expect("the outer permit");
    let (waited, tried, scoped, other, lock) = nested;
    for (what, result) in [
        ("acquire", waited),
        ("try_acquire", tried),
        ("with_permit", scoped),
    ] {
        assert!(
            matches!(&result, Err(LockError::AlreadyHeld { key }) if key == "k"),
            "nested {what} of the same semaphore gave {result:?}"
        );
    }
    assert!(other, "another semaphore is taken as usual");
    assert!(lock, "the lock of the same key is independent");
    h.assert_permits_back_promptly("k").await;
}

async fn expired_permit_is_reported_lost_and_cannot_free_the_next_holders(h: Harness) {
    let stale =
        h.a.semaphore("k", 1)
            .acquire(fixed_lease(Duration::from_millis(200)))
            .await
            .unwrap();
    timeout(Duration::from_secs(3), stale.lost())
        .await
        .expect("a 200 ms lease that is not renewed is reported lost");
    assert!(stale.is_lost());
    assert!(stale.valid_until().is_none());
    let semaphore = h.b.semaphore("k", 1);
    let next: Permit = first_within_3s(|| semaphore.try_acquire(long())).await;
    assert_lease_lost(stale.release().await, "k");
    assert!(
        !permit_granted(&h.a, "k", 1).await,
        "the expired holder's release freed the next holder's permit"
    );
    assert!(!next.is_lost());
    next.release()
        .await
        .expect("the next holder still holds it");
}

async fn lost_permit_cancels_with_permit_body_with_lease_lost(h: Harness) {
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(10),
        h.a.semaphore("k", 1)
            .with_permit(fixed_lease(Duration::from_millis(200)), async {
                sleep(Duration::from_secs(5)).await;
                finished.store(true, Ordering::SeqCst);
            }),
    )
    .await
    .expect("with_permit returns by itself");
    let elapsed = started.elapsed();
    assert_lease_lost(result, "k");
    assert!(
        elapsed < Duration::from_secs(3),
        "loss reported after {elapsed:?}, not before the 5 s body would end"
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body went on after losing its permit"
    );
}

async fn lowering_permits_revokes_nobody_and_holds_newcomers_back(h: Harness) {
    let three = h.a.semaphore("k", 3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(three.try_acquire(long()).await.unwrap().unwrap());
    }
    let two = h.b.semaphore("k", 2);
    assert!(two.try_acquire(long()).await.unwrap().is_none());

    held.pop().unwrap().release().await.unwrap();
    assert!(
        !permit_granted(&h.b, "k", 2).await,
        "two holders are not below N = 2"
    );
    assert!(
        held.iter().all(|permit| !permit.is_lost()),
        "no holder is revoked"
    );

    let newcomer = {
        let two = two.clone();
        tokio::spawn(async move { two.acquire(waiting(Duration::from_secs(10))).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!newcomer.is_finished(), "the newcomer waits at two holders");
    held.pop().unwrap().release().await.unwrap();
    let permit = timeout(NO_HANG, newcomer)
        .await
        .expect("the newcomer is woken")
        .unwrap()
        .expect("one holder is below N = 2");
    assert!(
        !permit_granted(&h.b, "k", 2).await,
        "the newcomer made two holders"
    );
    assert!(
        permit_granted(&h.b, "k", 3).await,
        "two holders are below 3"
    );
    permit.release().await.unwrap();
    held.pop().unwrap().release().await.unwrap();
    h.assert_permits_back_promptly("k").await;
}

/// The semaphore's, then a writer's, then a reader's wait with
/// `wait(Duration::MAX)` (no limit), each behind a holder that releases
/// after 100 ms: woken by the release, not a panic on the deadline.
async fn waiting_without_limit_does_not_overflow_the_deadline(h: Harness) {
    let forever = || waiting(Duration::MAX);

    let holder = h.a.semaphore("s", 1).acquire(long()).await.unwrap();
    let waiter = h.b.semaphore("s", 1);
    let waiter = tokio::spawn(async move { waiter.acquire(forever()).await });
    release_after_100ms(holder.release()).await;
    timeout(NO_HANG, waiter)
        .await
        .expect("the permit waiter is woken by the release")
        .expect("`wait(Duration::MAX)` means no limit, not a panic")
        .expect("the waiter gets the permit")
        .release()
        .await
        .unwrap();

    let reader = h.a.rwlock("rw").acquire_read(long()).await.unwrap();
    let locks = h.b.clone();
    let writer = tokio::spawn(async move { locks.rwlock("rw").acquire_write(forever()).await });
    release_after_100ms(reader.release()).await;
    let writer = timeout(NO_HANG, writer)
        .await
        .expect("the writer is woken by the reader's release")
        .expect("`wait(Duration::MAX)` means no limit, not a panic")
        .expect("the writer gets in");

    let locks = h.b.clone();
    let reader = tokio::spawn(async move { locks.rwlock("rw").acquire_read(forever()).await });
    release_after_100ms(writer.release()).await;
    timeout(NO_HANG, reader)
        .await
        .expect("the reader is woken by the writer's release")
        .expect("`wait(Duration::MAX)` means no limit, not a panic")
        .expect("the reader gets in")
        .release()
        .await
        .unwrap();
}

/// Awaits `release` 100 ms from now, while a waiter waits.
async fn release_after_100ms(release: impl Future<Output = Result<(), LockError>>) {
    sleep(Duration::from_millis(100)).await;
    release.await.expect("the holder's own lease");
}

/// A permit's, a reader's and a writer's `release()` dropped after one poll
/// (before its answer) still gives the permit or lease back.
async fn release_futures_dropped_after_first_poll_still_release(h: Harness) {
    let permit = h.a.semaphore("s", 1).acquire(long()).await.unwrap();
    let cut_short = timeout(Duration::ZERO, permit.release()).await;
    assert!(cut_short.is_err() || cut_short.is_ok_and(|released| released.is_ok()));
    h.assert_permits_back_promptly("s").await;

    let reader = h.a.rwlock("rw").acquire_read(long()).await.unwrap();
    let cut_short = timeout(Duration::ZERO, reader.release()).await;
    assert!(cut_short.is_err() || cut_short.is_ok_and(|released| released.is_ok()));
    h.assert_rw_freed_promptly("rw").await;

    let writer = h.a.rwlock("rw").acquire_write(long()).await.unwrap();
    let cut_short = timeout(Duration::ZERO, writer.release()).await;
    assert!(cut_short.is_err() || cut_short.is_ok_and(|released| released.is_ok()));
    h.assert_rw_freed_promptly("rw").await;
}

// ---------------------------------------------------------------------------
// Read/write locks
// ---------------------------------------------------------------------------

async fn readers_share_the_lock_across_managers(h: Harness) {
    let mut readers = Vec::new();
    for i in 0..4 {
        let reader = h
            .alternate(i)
            .rwlock("k")
            .try_acquire_read(long())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("reader {} kept out by readers", i + 1));
        assert_eq!(reader.key(), "k");
        assert!(!reader.is_reentered());
        readers.push(reader);
    }
    let tokens: HashSet<&str> = readers.iter().map(|reader| reader.token()).collect();
    assert_eq!(tokens.len(), 4, "two readers share an owner token");
    for manager in [&h.a, &h.b] {
        assert!(
            manager
                .rwlock("k")
                .try_acquire_write(long())
                .await
                .unwrap()
                .is_none(),
            "a writer got in beside readers"
        );
    }
    while readers.len() > 1 {
        readers.pop().unwrap().release().await.unwrap();
        assert!(
            h.rw_held_elsewhere("k").await,
            "a writer got in beside {} reader(s)",
            readers.len()
        );
    }
    readers.pop().unwrap().release().await.unwrap();
    let writer =
        h.b.rwlock("k")
            .try_acquire_write(long())
            .await
            .unwrap()
            .expect("the last reader's release lets a writer in at once");
    writer.release().await.unwrap();
}

async fn writer_excludes_readers_and_other_writers(h: Harness) {
    let writer =
        h.a.rwlock("k")
            .try_acquire_write(long())
            .await
            .unwrap()
            .expect("a free lock");
    assert_eq!(writer.key(), "k");
    assert!(!writer.is_reentered());
    for manager in [&h.a, &h.b] {
        assert!(
            readers_kept_out(manager, "k").await,
            "a reader got in beside a writer"
        );
        assert!(
            manager
                .rwlock("k")
                .try_acquire_write(long())
                .await
                .unwrap()
                .is_none(),
            "a second writer got in"
        );
    }
    writer.release().await.expect("the writer's own lease");
    let reader =
        h.b.rwlock("k")
            .try_acquire_read(long())
            .await
            .unwrap()
            .expect("readers get in once the writer released");
    reader.release().await.unwrap();
}

async fn mixed_readers_and_writers_never_overlap_a_writer(h: Harness) {
    let log = Arc::new(VisitLog::default());
    let tasks = (0..40)
        .map(|task| {
            let locks = h.alternate(task).clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let options = waiting(Duration::from_secs(30));
                if task % 5 == 0 {
                    let guard = locks.rwlock("k").acquire_write(options).await.unwrap();
                    log.visit(Visit::Write).await;
                    guard.release().await.expect("still our write lease");
                } else {
                    let guard = locks.rwlock("k").acquire_read(options).await.unwrap();
                    log.visit(Visit::Read).await;
                    guard.release().await.expect("still our read lease");
                }
            })
        })
        .collect();
    join_within(tasks, Duration::from_secs(40), "40 reads and writes").await;
    assert_eq!(log.count(Visit::Write), 8);
    assert_eq!(log.count(Visit::Read), 32);
    assert!(log.check() > 0, "no two reads ever shared the lock");
}

async fn waiting_writer_holds_back_new_readers(h: Harness) {
    let reader = h.a.rwlock("k").acquire_read(long()).await.unwrap();
    let writer = {
        let locks = h.b.clone();
        tokio::spawn(async move {
            locks
                .rwlock("k")
                .acquire_write(waiting(Duration::from_secs(20)))
                .await
        })
    };
    // Once the writer waits, its intent keeps new readers out, from either
    // manager; until then a probe may still get in.
    let held_back = poll_async(NO_HANG, || readers_kept_out(&h.a, "k")).await;
    assert!(held_back, "new readers still got in while a writer waited");
    assert!(
        readers_kept_out(&h.b, "k").await,
        "the waiting writer's own manager let a reader in"
    );
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    assert!(!reader.is_lost(), "the reader inside is not revoked");

    reader.release().await.unwrap();
    let writer = timeout(NO_HANG, writer)
        .await
        .expect("the writer is woken by the reader's release")
        .unwrap()
        .expect("the writer gets in once the reader left");
    writer.release().await.unwrap();
    assert!(
        !readers_kept_out(&h.a, "k").await,
        "the writer's intent outlived it"
    );
}

async fn released_reader_wakes_a_waiting_writer_not_its_ttl(h: Harness) {
    let reader = h.a.rwlock("k").acquire_read(long()).await.unwrap();
    let releaser = tokio::spawn(async move {
        sleep(Duration::from_millis(200)).await;
        reader.release().await
    });
    let started = Instant::now();
    // Woken only by its deadline, the writer would get in after 20 s; by the
    // reader's 30 s lease, not at all.
    let writer =
        h.b.rwlock("k")
            .acquire_write(waiting(Duration::from_secs(20)))
            .await;
    let elapsed = started.elapsed();
    let writer = writer.expect("the writer gets in once the reader releases");
    assert!(
        elapsed < Duration::from_secs(10),
        "writer took {elapsed:?}: it waited for its deadline, not the release"
    );
    releaser.await.unwrap().expect("the reader's own lease");
    writer.release().await.unwrap();
}

async fn released_writer_wakes_waiting_readers_not_its_ttl(h: Harness) {
    let writer = h.a.rwlock("k").acquire_write(long()).await.unwrap();
    let (got_in, mut readers_in) = tokio::sync::mpsc::channel(3);
    let readers: Vec<_> = (0..3)
        .map(|i| {
            let (locks, got_in) = (h.alternate(i).clone(), got_in.clone());
            tokio::spawn(async move {
                let reader = locks
                    .rwlock("k")
                    .acquire_read(waiting(Duration::from_secs(20)))
                    .await
                    .expect("a reader gets in once the writer releases");
                got_in.send(()).await.unwrap();
                reader.release().await.unwrap();
            })
        })
        .collect();
    drop(got_in);
    sleep(Duration::from_millis(200)).await;
    assert!(
        readers_in.try_recv().is_err(),
        "a reader got in beside the writer"
    );
    writer.release().await.expect("the writer's own lease");
    // Woken only by their deadlines, the readers would get in after 20 s; by
    // the writer's 30 s lease, not at all.
    let woken = timeout(Duration::from_secs(10), async {
        for _ in 0..3 {
            readers_in.recv().await.expect("a reader got in");
        }
    })
    .await;
    assert!(
        woken.is_ok(),
        "the readers waited for their deadline, not the writer's release"
    );
    join_within(readers, NO_HANG, "the readers").await;
}

async fn dropped_read_and_write_guards_release_promptly(h: Harness) {
    let reader = h.a.rwlock("k").acquire_read(long()).await.unwrap();
    assert!(h.rw_held_elsewhere("k").await);
    drop(reader);
    h.assert_rw_freed_promptly("k").await;

    let writer = h.a.rwlock("k").acquire_write(long()).await.unwrap();
    assert!(h.rw_held_elsewhere("k").await);
    drop(writer);
    h.assert_rw_freed_promptly("k").await;
    assert!(
        !readers_kept_out(&h.b, "k").await,
        "a dropped writer keeps readers out"
    );
}

async fn with_read_and_with_write_release_after_body_and_panic(h: Harness) {
    let read =
        h.a.rwlock("k")
            .with_read(long(), async {
                assert!(
                    h.rw_held_elsewhere("k").await,
                    "body runs under the read lease"
                );
                assert!(
                    !readers_kept_out(&h.b, "k").await,
                    "another reader shares it"
                );
                7
            })
            .await
            .unwrap();
    assert_eq!(read, 7);
    h.assert_rw_freed_promptly("k").await;

    let written =
        h.a.rwlock("k")
            .with_write(long(), async {
                assert!(
                    readers_kept_out(&h.b, "k").await,
                    "body runs under the write lease"
                );
                8
            })
            .await
            .unwrap();
    assert_eq!(written, 8);
    h.assert_rw_freed_promptly("k").await;

    for write in [false, true] {
        let locks = h.a.clone();
        let (entered, has_entered) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let body = async move {
                entered.send(()).unwrap();
                panic!("deliberate panic in a with_read/with_write body (expected by the test)");
            };
            if write {
                locks.rwlock("k").with_write(long(), body).await
            } else {
                locks.rwlock("k").with_read(long(), body).await
            }
        });
        let err = task.await.expect_err("the body panics");
        assert!(err.is_panic());
        has_entered.await.expect("the body ran under the lease");
        h.assert_rw_freed_promptly("k").await;
    }
}

async fn read_inside_write_re_enters_the_write_lease(h: Harness) {
    let inner = h.a.clone();
    let outcome = timeout(
        NO_HANG,
        h.a.rwlock("k").with_write(long(), async {
            let written = fencing_token().await.unwrap();
            // A 30 s wait: only re-entry ends this well within it.
            let read = inner
                .rwlock("k")
                .acquire_read(waiting(Duration::from_secs(30)))
                .await
                .unwrap();
            let readers = inner.rwlock("k").inspect().await.unwrap().reader_count;
            let nested = inner
                .rwlock("k")
                .with_read(long(), async { fencing_token().await.unwrap() })
                .await
                .unwrap();
            let again = inner.rwlock("k").try_acquire_write(long()).await.unwrap();
            let rewritten = again.as_ref().map(|guard| guard.is_reentered());
            drop(again);
            read.release().await.expect("releasing a re-entered read");
            let still_held = readers_kept_out(&h.b, "k").await && h.rw_held_elsewhere("k").await;
            (still_held, readers, written, nested, rewritten)
        }),
    )
    .await
    .expect("re-entry never waits for itself")
    .unwrap();
    let (still_held, readers, written, nested, rewritten) = outcome;
    assert!(still_held, "the inner read's release freed the write lease");
    assert_eq!(readers, 0, "the downgrade took a read lease of its own");
    assert_eq!(written, nested, "the nested read sees the writer's token");
    assert_eq!(rewritten, Some(true), "a write inside the write re-enters");
    h.assert_rw_freed_promptly("k").await;
}

async fn write_inside_read_fails_at_once_with_upgrade_refused(h: Harness) {
    let inner = h.a.clone();
    let (waited, tried, scoped, read, still_held) = timeout(
        NO_HANG,
        h.a.rwlock("k").with_read(long(), async {
            // A 30 s wait: only an at-once refusal ends this well within it.
            let waited = inner
                .rwlock("k")
                .acquire_write(waiting(Duration::from_secs(30)))
                .await
                .map(drop);
            let tried = inner.rwlock("k").try_acquire_write(long()).await.map(drop);
            let scoped = inner.rwlock("k").with_write(long(), async {}).await;
            let read = inner.rwlock("k").acquire_read(long()).await.unwrap();
            let reentered = read.is_reentered();
            drop(read);
            (
                waited,
                tried,
                scoped,
                reentered,
                h.rw_held_elsewhere("k").await,
            )
        }),
    )
    .await
    .expect("the upgrade fails at once instead of waiting for its own reader")
    .unwrap();
    for (what, result) in [
        ("acquire_write", waited),
        ("try_acquire_write", tried),
        ("with_write", scoped),
    ] {
        match result {
            Err(err @ LockError::UpgradeRefused { .. }) => assert!(
                err.to_string()
                    .contains("write lock around the whole scope"),
                "{what}: {err}"
            ),
            other => panic!("{what} inside a read gave {other:?}, not UpgradeRefused"),
        }
    }
    assert!(read, "a read inside a read re-enters");
    assert!(still_held, "the refused upgrade freed the read lease");
    h.assert_rw_freed_promptly("k").await;
}

async fn writers_fencing_tokens_strictly_increase_across_holders_and_managers(h: Harness) {
    let mut last = 0;
    for round in 0..8 {
        let manager = h.alternate(round);
        let token = if round % 2 == 0 {
            let guard = manager
                .rwlock("k")
                .acquire_write(long().fenced(true))
                .await
                .unwrap();
            let token = guard.fencing_token().await.unwrap();
            assert_eq!(guard.fencing_token().await.unwrap(), token, "asked twice");
            assert!(
                readers_kept_out(h.alternate(round + 1), "k").await,
                "a reader got in beside fenced writer {round}"
            );
            guard.release().await.unwrap();
            token
        } else {
            manager
                .rwlock("k")
                .with_write(long(), async { fencing_token().await })
                .await
                .unwrap()
                .expect("with_write body runs in a lock scope")
        };
        assert!(token > last, "writer {round}: token {token} after {last}");
        last = token;
    }
}

async fn fenced_read_is_invalid_options_and_readers_get_no_token(h: Harness) {
    let ran = AtomicBool::new(false);
    let refused = [
        (
            "acquire_read",
            h.a.rwlock("k")
                .acquire_read(long().fenced(true))
                .await
                .map(drop),
        ),
        (
            "try_acquire_read",
            h.a.rwlock("k")
                .try_acquire_read(long().fenced(true))
                .await
                .map(drop),
        ),
        (
            "with_read",
            h.a.rwlock("k")
                .with_read(long().fenced(true), async {
                    ran.store(true, Ordering::SeqCst);
                })
                .await,
        ),
    ];
    for (what, result) in refused {
        assert!(
            matches!(result, Err(LockError::InvalidOptions(_))),
            "fenced {what} gave {result:?}"
        );
    }
    assert!(!ran.load(Ordering::SeqCst), "a refused read body ran");
    let in_read_scope =
        h.a.rwlock("k")
            .with_read(long(), fencing_token())
            .await
            .expect("an unfenced read");
    assert!(
        matches!(in_read_scope, Err(LockError::InvalidOptions(_))),
        "fencing_token() in a read scope gave {in_read_scope:?}"
    );
    assert!(
        !h.rw_held_elsewhere("k").await,
        "a refused read left a lease"
    );
}

async fn zero_ttl_and_lock_only_options_are_invalid_for_readers_and_writers(h: Harness) {
    let invalid = [
        ("zero ttl", LockOptions::new().ttl(Duration::ZERO)),
        ("ttl too long", LockOptions::new().ttl(Duration::MAX)),
        (
            "hold_at_least",
            long().hold_at_least(Duration::from_secs(1)),
        ),
        (
            "min_replicas",
            long().min_replicas(1, Duration::from_millis(100)),
        ),
    ];
    for (what, options) in invalid {
        let read =
            h.a.rwlock("k")
                .try_acquire_read(options.clone())
                .await
                .map(drop);
        // A writer that would wait would leave an intent, were it let through.
        let rwlock = h.a.rwlock("k");
        let write = rwlock.acquire_write(options.clone().wait(Duration::from_secs(5)));
        let write = write.await.map(drop);
        let scoped = h.a.rwlock("k").with_write(options, async {}).await;
        for (kind, result) in [("read", read), ("write", write), ("with_write", scoped)] {
            assert!(
                matches!(result, Err(LockError::InvalidOptions(_))),
                "{what} for a {kind} gave {result:?}"
            );
        }
    }
    assert!(
        !h.rw_held_elsewhere("k").await,
        "a refused acquisition left a lease"
    );
    assert!(
        !readers_kept_out(&h.b, "k").await,
        "a refused writer left an intent"
    );
}

async fn crashed_readers_fixed_lease_blocks_writers_only_until_its_ttl(h: Harness) {
    let ttl = Duration::from_millis(600);
    let taken = Instant::now();
    let crashed =
        h.a.rwlock("k")
            .acquire_read(fixed_lease(ttl))
            .await
            .unwrap();
    // A crashed process neither releases nor renews: its lease only expires.
    std::mem::forget(crashed);
    let writer =
        h.b.rwlock("k")
            .acquire_write(waiting(Duration::from_secs(10)))
            .await
            .expect("the writer gets in once the crashed reader's lease ran out");
    let after = taken.elapsed();
    assert!(
        after >= ttl - Duration::from_millis(50),
        "a writer got in {after:?} after the read, before its {ttl:?} lease ended"
    );
    writer.release().await.unwrap();
}

async fn expired_rw_leases_are_reported_lost_and_cannot_free_the_next_writers(h: Harness) {
    let short = || fixed_lease(Duration::from_millis(200));

    let stale_writer = h.a.rwlock("k").acquire_write(short()).await.unwrap();
    timeout(Duration::from_secs(3), stale_writer.lost())
        .await
        .expect("a 200 ms write lease that is not renewed is reported lost");
    let rwlock = h.b.rwlock("k");
    let next: WriteGuard = first_within_3s(|| rwlock.try_acquire_write(long())).await;
    assert_lease_lost(stale_writer.release().await, "k");
    assert!(
        h.rw_held_elsewhere("k").await,
        "the expired writer's release freed the next writer's lease"
    );
    assert!(!next.is_lost());
    next.release()
        .await
        .expect("the next writer still holds it");

    let stale_reader = h.a.rwlock("k").acquire_read(short()).await.unwrap();
    timeout(Duration::from_secs(3), stale_reader.lost())
        .await
        .expect("a 200 ms read lease that is not renewed is reported lost");
    assert!(stale_reader.valid_until().is_none());
    let rwlock = h.b.rwlock("k");
    let next: WriteGuard = first_within_3s(|| rwlock.try_acquire_write(long())).await;
    assert_lease_lost(stale_reader.release().await, "k");
    assert!(
        h.rw_held_elsewhere("k").await,
        "the expired reader's release freed the next writer's lease"
    );
    next.release()
        .await
        .expect("the next writer still holds it");
}

/// What `attempt` yields first, trying every 10 ms for at most 3 s: the
/// permit or lease another holder's expired lease gave back.
async fn first_within_3s<T, E, F, Fut>(mut attempt: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
{
    let deadline = Instant::now() + Duration::from_secs(3);
    for _ in 0..300 {
        if let Some(taken) = attempt().await.expect("an attempt") {
            return taken;
        }
        assert!(
            Instant::now() < deadline,
            "the expired lease still held after 3 s"
        );
        sleep(Duration::from_millis(10)).await;
    }
    panic!("the expired lease still held after 300 attempts");
}

async fn lost_lease_cancels_with_read_and_with_write_bodies(h: Harness) {
    // Keys of their own: the lost read lease still stands on the server for
    // the safety margin after its holder was told.
    for (write, key) in [(false, "r"), (true, "w")] {
        let finished = AtomicBool::new(false);
        let body = async {
            sleep(Duration::from_secs(5)).await;
            finished.store(true, Ordering::SeqCst);
        };
        let options = fixed_lease(Duration::from_millis(200));
        let started = Instant::now();
        let result = timeout(Duration::from_secs(10), async {
            if write {
                h.a.rwlock(key).with_write(options, body).await
            } else {
                h.a.rwlock(key).with_read(options, body).await
            }
        })
        .await
        .expect("with_read/with_write returns by itself");
        let elapsed = started.elapsed();
        let kind = if write { "write" } else { "read" };
        assert_lease_lost(result, key);
        assert!(
            elapsed < Duration::from_secs(3),
            "{kind} loss reported after {elapsed:?}, not before the 5 s body would end"
        );
        assert!(
            !finished.load(Ordering::SeqCst),
            "the {kind} body went on after losing its lease"
        );
    }
}

async fn watchdog_keeps_read_and_write_leases_across_three_ttls(h: Harness) {
    let options = LockOptions::new().ttl(WATCHDOG_TTL);
    let (read_entered, read_has_entered) = oneshot::channel();
    let (write_entered, write_has_entered) = oneshot::channel();
    let reader = {
        let (locks, options) = (h.a.clone(), options.clone());
        tokio::spawn(async move {
            locks
                .rwlock("r")
                .with_read(options, async move {
                    read_entered.send(()).unwrap();
                    sleep(3 * WATCHDOG_TTL).await;
                    lease_lost()
                })
                .await
        })
    };
    let writer = {
        let locks = h.a.clone();
        tokio::spawn(async move {
            locks
                .rwlock("w")
                .with_write(options, async move {
                    write_entered.send(()).unwrap();
                    sleep(3 * WATCHDOG_TTL).await;
                    lease_lost()
                })
                .await
        })
    };
    read_has_entered.await.expect("read body started");
    write_has_entered.await.expect("write body started");
    for sample in 0..5 {
        sleep(WATCHDOG_TTL / 2).await;
        assert!(
            h.rw_held_elsewhere("r").await,
            "sample {sample}: read lease gone while its body ran"
        );
        assert!(
            readers_kept_out(&h.b, "w").await,
            "sample {sample}: write lease gone while its body ran"
        );
    }
    for (kind, body) in [("read", reader), ("write", writer)] {
        let lost = body
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("the {kind} lease was not kept for the body: {err}"));
        assert!(
            !lost,
            "lease_lost() true in the {kind} body although renewal kept it"
        );
    }
}

/// Issue 25: inside `with_lock("k")`, a nested `with_read("k")` made
/// `fencing_token_for("k")` fail and a nested `with_write("k")` made it answer
/// the write lock's counter: the lookup matched the user key alone.
async fn fencing_token_for_a_key_names_its_plain_lock_not_a_read_write_lock_on_it(h: Harness) {
    let locks = h.a.clone();
    let (plain, in_read, in_write, writer) = locks
        .clone()
        .with_lock("k", long(), async move {
            let plain = fencing_token_for("k").await.unwrap();
            let in_read = locks
                .rwlock("k")
                .with_read(long(), async { fencing_token_for("k").await })
                .await
                .unwrap();
            let in_write = locks
                .rwlock("k")
                .with_write(long(), async {
                    (fencing_token_for("k").await, fencing_token().await)
                })
                .await
                .unwrap();
            (plain, in_read, in_write.0, in_write.1)
        })
        .await
        .unwrap();
    assert_eq!(
        in_read.unwrap(),
        plain,
        "inside a read lease on the same key"
    );
    assert_eq!(
        in_write.unwrap(),
        plain,
        "inside a write lease on the same key"
    );
    assert!(
        writer.is_ok(),
        "the innermost scope's own token: {writer:?}"
    );
}
