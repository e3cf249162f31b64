//! Network partitions between the holders of the shared-lock kinds (a
//! semaphore permit, a read lease, a write lease) and Redis, injected with
//! the testkit's [`FaultProxy`]: each holder must learn that its lease is
//! lost before the lease's certain validity ends, whatever the fault, and
//! the other side must then get the permit or the write lease, once the
//! server has expired the partitioned one and not before the holder knew,
//! and keep it while the partitioned holder's delayed renewals and releases
//! land. Single Redis and Redis Cluster.
//!
//! Every test partitions six holders of one manager `a` at once, one per
//! kind and way of holding: a guard watched with `lost()` (`Permit`,
//! `ReadGuard`, `WriteGuard`), and a body run by `with_permit`, `with_read`
//! or `with_write`, which must be cancelled with `LeaseLost`. `a` reaches
//! Redis only through proxies; the other side `b` connects directly (on the
//! Cluster, whose nodes announce their proxies, through the proxies once
//! they are restored, as in `partition.rs`). Every wait is bounded by a
//! timeout, so a holder that is never told fails its test instead of
//! hanging it.

use crate::support;

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{HeldLease, LockError, LockManager, LockOptions, Permit, ReadGuard, WriteGuard};
use leasehold_testkit::{FaultProxy, RedisServer};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use support::{assert_lease_lost, connect, holder_and_other_side, proxied_cluster, PROMPTLY};

/// Lease of the partitioned holders: a few seconds, so that
/// the lease's safety margin (6 % of it, see `lease.rs`), which a holder needs
/// to be told while every core is busy, is far above this machine's
/// scheduling delays under load (at 1.5 s, 77 ms of slack proved too little).
const TTL_MS: u64 = 3000;
const TTL: Duration = Duration::from_millis(TTL_MS);
/// Response timeout of the partitioned holders' manager.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);
/// Pause between two instants recorded by a holder's body.
const TICK: Duration = Duration::from_millis(20);
/// Ticks of a body meant to outlive any partition test (10 s).
const LONG_BODY_TICKS: usize = 500;
/// Bound on a holder being told, counted from its acquisition: the lease's
/// end plus plenty, so that a holder never told fails instead of hanging.
const TOLD_WITHIN: Duration = Duration::from_millis(2 * TTL_MS + 1000);
/// How long after the partition the other side must have taken over: the
/// server expires a lease one ttl after it last ran its acquisition or
/// renewal, which was before the partition.
const TAKEOVER_WITHIN: Duration = Duration::from_millis(TTL_MS + 1000);

/// The share of the ttl (in %) by which the server's clock may run ahead of
/// the holder's: the rate part of the lock's safety margin (`lease.rs`, 1 %
/// of the 6 %; the other 5 % are the body's time to stop). The server keeps
/// a lease for one ttl *of its clock* from when it ran the acquisition,
/// which is after the holder sent it, so the lease cannot end before
/// `sent + ttl - ttl * DRIFT_PERCENT / 100` by the holder's clock: the
/// certain validity end each holder must be told by.
const DRIFT_PERCENT: u32 = 1;

/// A network fault between the holders and Redis.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Cut,
    Blackhole,
    DelayPastTtl,
}

impl Fault {
    fn apply(self, proxy: &FaultProxy) {
        match self {
            Fault::Cut => proxy.cut(),
            Fault::Blackhole => proxy.blackhole(),
            Fault::DelayPastTtl => proxy.delay(2 * TTL),
        }
    }

    /// When every command the partitioned holders sent has reached the
    /// server, if the fault lets any through: they send renewals until
    /// their validity ends and releases when told, all before
    /// `partitioned_at + TTL` (see [`assert_partitioned_before_any_renewal`]),
    /// and a delay adds `2 * TTL`. The other side keeps what it took over
    /// until then, so that those late commands reach a server where it holds
    /// the lease: they must not take it from it.
    fn late_commands_landed(self, partitioned_at: Instant) -> Instant {
        match self {
            Fault::Cut | Fault::Blackhole => partitioned_at,
            Fault::DelayPastTtl => partitioned_at + 3 * TTL + Duration::from_millis(300),
        }
    }
}

/// The shared-lock kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A permit of a one-permit semaphore.
    Permit,
    Read,
    Write,
}

/// How a holder holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// A guard, whose `lost()` must resolve.
    Guard,
    /// A body run by `with_permit` / `with_read` / `with_write`, which must
    /// be cancelled.
    Scoped,
}

/// One partitioned holder: what it holds, and how.
#[derive(Debug, Clone, Copy)]
struct Holder {
    kind: Kind,
    hold: Hold,
}

impl Holder {
    /// Every kind, held both ways.
    fn all() -> Vec<Holder> {
        [Kind::Permit, Kind::Read, Kind::Write]
            .into_iter()
            .flat_map(|kind| [Hold::Guard, Hold::Scoped].map(|hold| Holder { kind, hold }))
            .collect()
    }

    /// A key of this holder alone.
    fn key(self) -> String {
        format!("partitioned:{:?}:{:?}", self.kind, self.hold).to_lowercase()
    }
}

/// The guards of the shared kinds, as far as a partitioned holder needs.
trait SharedGuard {
    fn lost(&self) -> impl Future<Output = ()>;
    fn is_lost(&self) -> bool;
}

impl SharedGuard for Permit {
    fn lost(&self) -> impl Future<Output = ()> {
        HeldLease::lost(self)
    }
    fn is_lost(&self) -> bool {
        HeldLease::is_lost(self)
    }
}

impl SharedGuard for ReadGuard {
    fn lost(&self) -> impl Future<Output = ()> {
        HeldLease::lost(self)
    }
    fn is_lost(&self) -> bool {
        HeldLease::is_lost(self)
    }
}

impl SharedGuard for WriteGuard {
    fn lost(&self) -> impl Future<Output = ()> {
        HeldLease::lost(self)
    }
    fn is_lost(&self) -> bool {
        HeldLease::is_lost(self)
    }
}

/// What happened to one holder that was partitioned.
struct Partitioned {
    holder: Holder,
    /// Taken just before the acquisition was called: no later than its send
    /// time, so the lease cannot end on the server before
    /// `acquire_sent + TTL` less the clock-rate drift.
    acquire_sent: Instant,
    /// When the holder was told: `lost()` resolved, or the scoped call
    /// returned.
    told_at: Instant,
    /// `Ok` for a guard whose `lost()` resolved and whose `is_lost()` then
    /// held; the scoped call's result otherwise (`LeaseLost` expected).
    result: Result<(), LockError>,
    /// The instants a scoped body recorded, every [`TICK`].
    ticks: Vec<Instant>,
}

impl Partitioned {
    /// The end of the lease's certain validity (see [`DRIFT_PERCENT`]).
    fn certain_validity_end(&self) -> Instant {
        self.acquire_sent + TTL - TTL * DRIFT_PERCENT / 100
    }

    #[track_caller]
    fn assert_told_before_the_lease_ends(&self) {
        let holder = self.holder;
        match holder.hold {
            Hold::Guard => assert!(self.result.is_ok(), "{holder:?}: {:?}", self.result),
            Hold::Scoped => assert_lease_lost(self.result.clone(), &holder.key()),
        }
        let end = self.certain_validity_end();
        assert!(
            self.told_at < end,
            "{holder:?} was told {:?} after its lease could have ended on the server",
            self.told_at - end
        );
        if let Some(&last) = self.ticks.last() {
            assert!(
                last < end,
                "{holder:?}'s body still ran {:?} after its lease could have ended on the server",
                last - end
            );
        }
    }
}

/// Options of the partitioned leases.
fn options() -> LockOptions {
    LockOptions::new().ttl(TTL).wait(Duration::ZERO)
}

/// A test's own failure, carried as a lock error.
fn failed(detail: String) -> LockError {
    LockError::Server {
        detail,
        source: None,
    }
}

/// Waits (bounded by [`TOLD_WITHIN`]) for `guard` to be reported lost.
async fn until_told(guard: &impl SharedGuard) -> Result<(), LockError> {
    match timeout(TOLD_WITHIN, guard.lost()).await {
        Ok(()) if guard.is_lost() => Ok(()),
        Ok(()) => Err(failed("lost() resolved, is_lost() false".into())),
        Err(_) => Err(failed(format!(
            "lost() pending {TOLD_WITHIN:?} after the acquisition"
        ))),
    }
}

/// A body that reports on `started` that it runs, then records
/// `Instant::now()` into `ticks` every [`TICK`], [`LONG_BODY_TICKS`] times.
async fn ticking_body(started: oneshot::Sender<()>, ticks: Arc<Mutex<Vec<Instant>>>) {
    // The test awaits the receiver; a dropped one only means it failed already.
    let _ = started.send(());
    for _ in 0..LONG_BODY_TICKS {
        ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Instant::now());
        tokio::time::sleep(TICK).await;
    }
}

/// Takes `holder`'s lease through `a`, says so on `started`, and waits
/// until it is told the lease is lost (or [`TOLD_WITHIN`] passes).
async fn hold(a: LockManager, holder: Holder, started: oneshot::Sender<()>) -> Partitioned {
    let key = holder.key();
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let acquire_sent = Instant::now();
    let result = match holder.hold {
        Hold::Guard => {
            let acquired = "the holder acquires at once";
            // `started` is sent once the guard is held; the guard is dropped
            // only after `lost()` resolved.
            match holder.kind {
                Kind::Permit => {
                    let guard = a
                        .semaphore(&key, 1)
                        .acquire(options())
                        .await
                        .expect(acquired);
                    let _ = started.send(());
                    until_told(&guard).await
                }
                Kind::Read => {
                    let guard = a
                        .rwlock(&key)
                        .acquire_read(options())
                        .await
                        .expect(acquired);
                    let _ = started.send(());
                    until_told(&guard).await
                }
                Kind::Write => {
                    let guard = a
                        .rwlock(&key)
                        .acquire_write(options())
                        .await
                        .expect(acquired);
                    let _ = started.send(());
                    until_told(&guard).await
                }
            }
        }
        Hold::Scoped => {
            let body = ticking_body(started, Arc::clone(&ticks));
            let scoped = async {
                match holder.kind {
                    Kind::Permit => a.semaphore(&key, 1).with_permit(options(), body).await,
                    Kind::Read => a.rwlock(&key).with_read(options(), body).await,
                    Kind::Write => a.rwlock(&key).with_write(options(), body).await,
                }
            };
            timeout(TOLD_WITHIN, scoped).await.unwrap_or_else(|_| {
                Err(failed(format!(
                    "the scoped call still ran {TOLD_WITHIN:?} after it was made"
                )))
            })
        }
    };
    let told_at = Instant::now();
    let ticks = ticks.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Partitioned {
        holder,
        acquire_sent,
        told_at,
        result,
        ticks,
    }
}

/// Starts every [`Holder`] on `a`, each in its own task, and returns once
/// all of them hold their lease.
async fn start_holders(a: &LockManager) -> Vec<JoinHandle<Partitioned>> {
    let mut tasks = Vec::new();
    for holder in Holder::all() {
        let (started, holding) = oneshot::channel();
        tasks.push(tokio::spawn(hold(a.clone(), holder, started)));
        timeout(PROMPTLY, holding)
            .await
            .unwrap_or_else(|_| panic!("{holder:?} did not acquire within {PROMPTLY:?}"))
            .unwrap_or_else(|_| panic!("{holder:?} failed to acquire"));
    }
    tasks
}

/// Awaits the holders' tasks (each bounds itself by [`TOLD_WITHIN`]) and
/// checks that every one was told in time.
async fn holders_told_in_time(tasks: Vec<JoinHandle<Partitioned>>) -> Vec<Partitioned> {
    let mut outcomes = Vec::new();
    for task in tasks {
        let outcome = timeout(TOLD_WITHIN + PROMPTLY, task)
            .await
            .expect("a holder's task ends within its own bound")
            .expect("holder task");
        outcome.assert_told_before_the_lease_ends();
        outcomes.push(outcome);
    }
    outcomes
}

/// Asserts that the partition came before the first renewal of any holder
/// (sent a third of the ttl after its acquisition) could have been sent: so
/// no renewal was granted, and each lease's certain validity ends as
/// [`Partitioned::certain_validity_end`] says.
#[track_caller]
fn assert_partitioned_before_any_renewal(first_sent: Instant, partitioned_at: Instant) {
    assert!(
        partitioned_at < first_sent + TTL / 3,
        "starting the holders took {:?}: a renewal may have been granted before the partition",
        partitioned_at - first_sent
    );
}

/// `b` takes over `holder`'s key: the permit of the one-permit semaphore,
/// or the write lease (which neither a reader nor a writer may hold), waiting
/// until `deadline`; it keeps it until `keep_until` at least, then releases
/// it, which must find it still its own. Returns when it got it (the
/// answer's arrival).
async fn take_over(
    b: LockManager,
    holder: Holder,
    deadline: Instant,
    keep_until: Instant,
) -> Instant {
    let key = holder.key();
    let wait = deadline.saturating_duration_since(Instant::now());
    let waiting = options().wait(wait);
    let kept = |lost: bool| {
        assert!(
            !lost,
            "{holder:?}: the other side lost what it took over while the old holder's late commands landed"
        );
    };
    let taken = async {
        match holder.kind {
            Kind::Permit => {
                let permit = b.semaphore(&key, 1).acquire(waiting).await?;
                let at = Instant::now();
                tokio::time::sleep_until(keep_until.into()).await;
                kept(permit.is_lost());
                permit.release().await?;
                Ok(at)
            }
            Kind::Read | Kind::Write => {
                let guard = b.rwlock(&key).acquire_write(waiting).await?;
                let at = Instant::now();
                tokio::time::sleep_until(keep_until.into()).await;
                kept(guard.is_lost());
                guard.release().await?;
                Ok::<_, LockError>(at)
            }
        }
    };
    let limit = keep_until
        .saturating_duration_since(Instant::now())
        .max(wait)
        + PROMPTLY;
    timeout(limit, taken)
        .await
        .unwrap_or_else(|_| panic!("{holder:?}: the other side's takeover did not return"))
        .unwrap_or_else(|err| {
            panic!(
                "{holder:?}: the other side did not take over within {wait:?}, or lost it: {err}"
            )
        })
}

/// Asserts that each takeover came after the partitioned holder of its key
/// had been told (never two holders believing they have it at once), and
/// not before the partitioned lease could have ended on the server: nothing
/// the partitioned holder sent freed it early, so only its expiry did.
fn assert_taken_over_after_the_holder_knew(partitioned: &[Partitioned], taken_at: &[Instant]) {
    for (outcome, &taken_at) in partitioned.iter().zip(taken_at) {
        let holder = outcome.holder;
        assert!(
            taken_at > outcome.told_at,
            "{holder:?}: the other side got it {:?} before the holder was told",
            outcome.told_at - taken_at
        );
        let end = outcome.certain_validity_end();
        assert!(
            taken_at >= end,
            "{holder:?}: the other side got it {:?} before the partitioned lease could have expired",
            end - taken_at
        );
    }
}

/// Partitions holders on one redis-server with `fault` right after they
/// acquired. The other side, connected directly, starts waiting at once, so
/// it gets each key as soon as the server expires the partitioned lease.
async fn partitioned_single_holders_are_told(fault: Fault) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let a = LockManager::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let b = connect(&server.url()).await;

    let first_sent = Instant::now();
    let holders = start_holders(&a).await;
    let partitioned_at = Instant::now();
    fault.apply(&proxy);
    assert_partitioned_before_any_renewal(first_sent, partitioned_at);
    let keep_until = fault.late_commands_landed(partitioned_at);
    let takeovers: Vec<_> = Holder::all()
        .into_iter()
        .map(|holder| {
            let deadline = partitioned_at + TAKEOVER_WITHIN;
            tokio::spawn(take_over(b.clone(), holder, deadline, keep_until))
        })
        .collect();
    let partitioned = holders_told_in_time(holders).await;
    let mut taken_at = Vec::new();
    for takeover in takeovers {
        taken_at.push(takeover.await.expect("takeover task"));
    }
    assert_taken_over_after_the_holder_knew(&partitioned, &taken_at);
}

/// Partitions holders on a Redis Cluster from every node with `fault` right
/// after they acquired. Every client of the cluster goes through the proxies
/// (see [`proxied_cluster`]), so the other side is cut off too until the
/// holders have been told; the proxies are restored then.
async fn partitioned_cluster_holders_are_told(fault: Fault) {
    let (_cluster, proxies) = proxied_cluster().await;
    let (a, b) = holder_and_other_side(&proxies, RESPONSE_TIMEOUT).await;

    let first_sent = Instant::now();
    let holders = start_holders(&a).await;
    let partitioned_at = Instant::now();
    for proxy in &proxies {
        fault.apply(proxy);
    }
    assert_partitioned_before_any_renewal(first_sent, partitioned_at);
    let partitioned = holders_told_in_time(holders).await;
    // Restored once every partitioned lease could have ended: a told holder
    // drops its guard, and the release it sends then (retried by the cluster
    // client) would otherwise free its own lease early on restore, and the
    // takeover would no longer show that only the expiry freed it.
    if let Some(last_end) = partitioned
        .iter()
        .map(Partitioned::certain_validity_end)
        .max()
    {
        tokio::time::sleep_until(last_end.into()).await;
    }
    for proxy in &proxies {
        proxy.restore();
    }
    // Every partitioned lease has ended by now, so the other side gets each
    // key as soon as it has reconnected.
    let deadline = Instant::now() + PROMPTLY;
    let mut taken_at = Vec::new();
    for holder in Holder::all() {
        taken_at.push(take_over(b.clone(), holder, deadline, Instant::now()).await);
    }
    assert_taken_over_after_the_holder_knew(&partitioned, &taken_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_permit_and_rw_holders_are_told_before_their_leases_end_when_cut() {
    partitioned_single_holders_are_told(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_permit_and_rw_holders_are_told_before_their_leases_end_when_blackholed() {
    partitioned_single_holders_are_told(Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_permit_and_rw_holders_are_told_before_their_leases_end_when_delayed_past_the_ttl(
) {
    partitioned_single_holders_are_told(Fault::DelayPastTtl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_permit_and_rw_holders_are_told_before_their_leases_end_when_cut() {
    partitioned_cluster_holders_are_told(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_permit_and_rw_holders_are_told_before_their_leases_end_when_blackholed(
) {
    partitioned_cluster_holders_are_told(Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_permit_and_rw_holders_are_told_before_their_leases_end_when_delayed_past_the_ttl(
) {
    partitioned_cluster_holders_are_told(Fault::DelayPastTtl).await;
}
