//! Many leases renewed in batches (one script call per batch): every kind
//! shares the batches, a refused lease is lost alone, a lock marked by a
//! queued waiter is still renewed, and a network fault that meets a batch
//! tells every one of its leases before its lease can have ended on the
//! server. Every test runs on Redis 7.0 and on Valkey 9.1.
//!
//! The holder `a` holds more leases than one batch takes (200), of every
//! kind, through a [`FaultProxy`]; the other side `b` connects directly.
//! Every wait is bounded, so a holder that is never told fails its test
//! instead of hanging it.

use crate::support;

use std::ops::Deref;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::stream::{self, StreamExt};
use leasehold::{HeldLease, LockError, LockGuard, LockManager, LockOptions};
use leasehold_testkit::{Engine, FaultProxy, RedisServer, RespValue};
use tokio::time::timeout;

use support::{connect, Fault, PROMPTLY};

/// Lease of every held lease: renewed each second.
const TTL: Duration = Duration::from_secs(3);
/// Response timeout of the holder's manager.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);
/// Plain locks held: two batches and part of a third.
const LOCKS: usize = 450;
/// Permits, read leases and write leases held, of each.
const SHARED: usize = 30;
/// How many of the plain locks are acquired at once while setting up.
const AT_ONCE: usize = 30;
/// Share of the ttl that the holder's and the server's clocks may drift
/// apart; the holder must be told this much before its certain validity
/// (as the server sees it) ends.
const DRIFT_PERCENT: u32 = 1;
/// The lease's safety margin (see `validity.rs`): the server keeps a
/// renewed lease this much longer than the holder counts on.
const SAFETY_MARGIN: Duration = Duration::from_millis(182);

fn options() -> LockOptions {
    LockOptions::new().ttl(TTL).wait(Duration::ZERO)
}

/// The lease of the test that watches two rounds of renewals with nothing
/// in the way (no proxy, no fault): long enough that a holder starved for a
/// few seconds on a loaded machine still renews in time, since what it
/// shows is that a marked lock is renewed, not how soon.
const UNHURRIED_TTL: Duration = Duration::from_secs(8);

/// A new server of `engine`.
fn start(engine: Engine) -> RedisServer {
    RedisServer::builder().engine(engine).start()
}

// Each test runs on Redis 7.0 and on Valkey 9.1: batches are
// `renew_batch.lua` on both (a pipeline of Valkey's `SET … IFEQ` was
// measured: it saves the server a fifth and costs the client three times
// as much, see BENCHMARKS.md), but a lone lease renews natively on Valkey.
support::on_every_engine!(
    batches_cut_off_tell_every_lease_before_it_ends,
    batches_blackholed_in_flight_tell_every_lease_before_it_ends,
    batches_delayed_past_the_ttl_tell_every_lease_before_it_ends,
    a_lease_taken_over_in_a_batch_is_lost_alone,
    a_lock_marked_by_a_queued_waiter_is_renewed_in_its_batch_and_handed_over,
);

/// A manager that reaches its one server through `proxy`.
async fn through(proxy: &FaultProxy) -> LockManager {
    LockManager::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy")
}

/// Every lease `a` holds: [`LOCKS`] plain locks, and [`SHARED`] each of
/// permits (of one semaphore), read leases (of one read/write lock) and
/// write leases (each of its own read/write lock).
struct Held {
    locks: Vec<leasehold::LockGuard>,
    permits: Vec<leasehold::Permit>,
    reads: Vec<leasehold::ReadGuard>,
    writes: Vec<leasehold::WriteGuard>,
}

impl Held {
    async fn take(a: &LockManager) -> Held {
        // A few dozen at a time: hundreds of acquiring scripts sent at once
        // to a server sharing a loaded machine can each take longer than
        // the holder's short response timeout, attempt after attempt.
        let names: Vec<String> = (0..LOCKS).map(|i| format!("batch-{i}")).collect();
        let locks: Vec<LockGuard> = stream::iter(&names)
            .map(|name| patiently(move || a.acquire(name, options())))
            .buffered(AT_ONCE)
            .collect()
            .await;
        let semaphore = a.semaphore("batch-sem", u32::try_from(SHARED).unwrap());
        let permits =
            join_all((0..SHARED).map(|_| patiently(|| semaphore.acquire(options())))).await;
        let shared = a.rwlock("batch-rw");
        let reads =
            join_all((0..SHARED).map(|_| patiently(|| shared.acquire_read(options())))).await;
        let writes = join_all((0..SHARED).map(|i| async move {
            let rwlock = a.rwlock(&format!("batch-w{i}"));
            patiently(|| rwlock.acquire_write(options())).await
        }))
        .await;
        Held {
            locks,
            permits,
            reads,
            writes,
        }
    }

    /// Every lease, plain locks first.
    fn all(&self) -> Vec<&HeldLease> {
        let locks = self.locks.iter().map(Deref::deref);
        let permits = self.permits.iter().map(Deref::deref);
        let reads = self.reads.iter().map(Deref::deref);
        let writes = self.writes.iter().map(Deref::deref);
        locks.chain(permits).chain(reads).chain(writes).collect()
    }
}

/// The lease `acquire` takes, tried again (up to 10 times) when its answer
/// did not come within the holder's short response timeout: hundreds of
/// acquisitions at once on a loaded machine may take longer. An attempt
/// whose answer was lost may have been granted; it is undone in the
/// background, so until then the next attempt finds the key `Busy` (held
/// by that abandoned owner token, nobody else's). The undo can be lost
/// too, on a machine that slow, and the key then stays held until its
/// ttl: the next attempt comes after the time left the `Busy` reports
/// (at most a ttl), not after a fixed pause that may be shorter.
async fn patiently<G, F, Fut>(acquire: F) -> G
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<G, LockError>>,
{
    let mut timed_out = false;
    for _ in 0..9 {
        match acquire().await {
            Ok(guard) => return guard,
            Err(LockError::Connection { .. }) => timed_out = true,
            Err(LockError::Busy { remaining, .. }) if timed_out => {
                let left = remaining.unwrap_or(TTL).min(TTL);
                tokio::time::sleep(left + Duration::from_millis(50)).await;
            }
            Err(err) => panic!("acquire: {err:?}"),
        }
    }
    acquire().await.expect("acquired within 10 attempts")
}

/// Waits (bounded) until every lease of `held` was renewed past `since`:
/// its validity ends later than it did then.
async fn until_renewed(held: &[&HeldLease], since: &[Option<Instant>], ttl: Duration) {
    let renewed = async {
        while held
            .iter()
            .zip(since)
            .any(|(lease, before)| lease.valid_until() <= *before)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    timeout(ttl, renewed)
        .await
        .expect("every lease is renewed within a ttl");
}

/// Holds every kind through a proxy; once every lease was renewed once,
/// partitions it with `fault` so that the next batches meet the fault (in
/// flight, for a blackhole or a delay). Each lease must be reported lost
/// before the server can have expired it: its last renewal the holder
/// knew of was sent at most `validity` before its `valid_until`, and the
/// server keeps it a full ttl from then.
async fn partitioned_batches_tell_every_lease(engine: Engine, fault: Fault) {
    let server = start(engine);
    let proxy = FaultProxy::start(server.addr());
    let a = through(&proxy).await;
    let held = Held::take(&a).await;
    let all = held.all();
    let acquired: Vec<Option<Instant>> = all.iter().map(|lease| lease.valid_until()).collect();
    until_renewed(&all, &acquired, TTL).await;

    let known: Vec<Instant> = all
        .iter()
        .map(|lease| {
            lease
                .valid_until()
                .expect("every lease is held before the fault")
        })
        .collect();
    fault.apply(&proxy, TTL);
    let told = join_all(all.iter().zip(&known).map(|(lease, known)| async move {
        let server_end = *known + SAFETY_MARGIN - TTL * DRIFT_PERCENT / 100;
        timeout(2 * TTL, told_before(lease, server_end))
            .await
            .expect("every lease is reported lost within two ttls of the fault")
    }))
    .await;
    for (index, told) in told.iter().enumerate() {
        assert!(
            told,
            "lease {index} ({fault:?}) was told after the server may have expired it"
        );
    }
}

/// Whether `lease` is reported lost before `server_end`, the earliest the
/// server may expire it (from its last renewal the holder knew of before
/// the fault): `lost()` resolves before a timer of the same runtime set at
/// `server_end` fires. A timer of the same runtime, not a reading of the
/// clock once this task runs again, keeps a starved machine's late wake-ups
/// (two CPU burners beside the rest of the suite) from counting as late
/// reports: `lost()` wakes at the lease's validity on its own timer, which
/// is due first.
async fn told_before(lease: &HeldLease, server_end: Instant) -> bool {
    tokio::select! {
        biased;
        () = lease.lost() => true,
        () = tokio::time::sleep_until(server_end.into()) => lease.is_lost(),
    }
}

async fn batches_cut_off_tell_every_lease_before_it_ends(engine: Engine) {
    partitioned_batches_tell_every_lease(engine, Fault::Cut).await;
}

async fn batches_blackholed_in_flight_tell_every_lease_before_it_ends(engine: Engine) {
    partitioned_batches_tell_every_lease(engine, Fault::Blackhole).await;
}

async fn batches_delayed_past_the_ttl_tell_every_lease_before_it_ends(engine: Engine) {
    partitioned_batches_tell_every_lease(engine, Fault::DelayPastTtl).await;
}

/// One plain lock of a batch is taken over by another manager (forced
/// release, then acquired): at its next renewal only it is lost; every
/// other lease of its batch, of every kind, is renewed and kept.
async fn a_lease_taken_over_in_a_batch_is_lost_alone(engine: Engine) {
    let server = start(engine);
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let held = Held::take(&a).await;
    let all = held.all();
    let taken = LOCKS / 2;

    b.force_release(&format!("batch-{taken}"))
        .await
        .expect("force release");
    let thief = b
        .acquire(&format!("batch-{taken}"), options())
        .await
        .expect("the other side takes the freed lock");
    timeout(TTL, all[taken].lost())
        .await
        .expect("the taken lease is reported lost at its next renewal");

    let renewed_since: Vec<Option<Instant>> = all.iter().map(|lease| lease.valid_until()).collect();
    let others: Vec<&HeldLease> = all
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != taken)
        .map(|(_, lease)| *lease)
        .collect();
    let since: Vec<Option<Instant>> = renewed_since
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != taken)
        .map(|(_, until)| *until)
        .collect();
    until_renewed(&others, &since, TTL).await;
    for (index, lease) in others.iter().enumerate() {
        assert!(
            !lease.is_lost(),
            "lease {index} was lost with the taken one"
        );
    }
    timeout(PROMPTLY, thief.release())
        .await
        .expect("release returns")
        .expect("the thief still holds what it took");
}

/// [`LOCKS`] plain locks are renewed in batches while a waiter of another
/// manager queues for one of them, which marks its value (so the server's
/// own compare would fail): the holder keeps it through two rounds, and
/// hands it to that waiter when it lets go.
async fn a_lock_marked_by_a_queued_waiter_is_renewed_in_its_batch_and_handed_over(engine: Engine) {
    let server = start(engine);
    let a = connect(&server.url()).await;
    let b = connect(&server.url()).await;
    let names: Vec<String> = (0..LOCKS).map(|i| format!("marked-{i}")).collect();
    let mut locks: Vec<LockGuard> = join_all(
        names
            .iter()
            .map(|name| patiently(|| a.acquire(name, options().ttl(UNHURRIED_TTL)))),
    )
    .await;
    let all: Vec<&HeldLease> = locks.iter().map(Deref::deref).collect();

    let marked = 7;
    let waiter = tokio::spawn({
        let (b, name) = (b.clone(), names[marked].clone());
        async move {
            b.acquire(&name, options().ttl(UNHURRIED_TTL).wait(4 * UNHURRIED_TTL))
                .await
                .map(|guard| guard.token().to_owned())
        }
    });
    let lock_key = format!("lock:{}", names[marked]);
    let ours = locks[marked].token().to_owned();
    let queued = support::poll_async(PROMPTLY, || async {
        matches!(server.command(&["GET", &lock_key]), Ok(RespValue::Bulk(value)) if value != ours.as_bytes())
    })
    .await;
    assert!(queued, "the waiter never marked the lock");
    for _ in 0..2 {
        let before: Vec<Option<Instant>> = all.iter().map(|lease| lease.valid_until()).collect();
        until_renewed(&all, &before, UNHURRIED_TTL).await;
    }
    assert!(
        !all[marked].is_lost(),
        "the marked lock was lost while the waiter queued"
    );

    let handed = locks.remove(marked);
    timeout(PROMPTLY, handed.release())
        .await
        .expect("release returns")
        .expect("still ours");
    let taken = timeout(UNHURRIED_TTL, waiter)
        .await
        .expect("the waiter is served within a ttl")
        .expect("the waiter's task")
        .expect("the waiter gets the lock");
    assert_ne!(taken, ours, "the waiter holds under its own token");
}
