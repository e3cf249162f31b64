//! Network partitions between a lock holder and Redis, injected with the
//! testkit's [`FaultProxy`]: the holder must stop working before its lease
//! can have run out on the server, the other side must get the lock once it
//! has, and fencing tokens must reject the old holder's late writes. Single
//! Redis (one key, and a set of keys renewed together), Redlock and Redis
//! Cluster.
//!
//! The partitioned holder `a` reaches Redis only through proxies; the other
//! side `b` connects directly. Every wait is bounded by a timeout, so a
//! holder that is never told fails its test instead of hanging it.

use crate::support;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{fencing_token, LockError, LockManager, LockOptions};
use leasehold_testkit::{FaultProxy, RedisServer};
use tokio::sync::oneshot;
use tokio::time::timeout;

use support::{
    assert_lease_lost, connect, holder_and_other_side, proxied_cluster, redlock, Fault,
    FencedStore, StaleWrite, PROMPTLY,
};

const KEY: &str = "partitioned";
/// Lease of the partitioned holder: a few seconds, so that
/// the lease's safety margin (6 % of it, see `lease.rs`), which a holder needs
/// to be told while every core is busy, is far above this machine's
/// scheduling delays under load (at 1.5 s, 77 ms of slack proved too little).
const TTL_MS: u64 = 3000;
const TTL: Duration = Duration::from_millis(TTL_MS);
/// Response timeout of the partitioned holder's manager.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);
/// Pause between two instants recorded by a holder's body.
const TICK: Duration = Duration::from_millis(20);
/// Ticks of a body meant to outlive any partition test (10 s).
const LONG_BODY_TICKS: usize = 500;
/// Ticks of a body meant to complete: two ttls, so it needs renewals.
const SHORT_BODY_TICKS: usize = 2 * TTL_MS as usize / 20;

/// What happened to one holder that was partitioned while its body ran.
struct Partitioned {
    /// Taken just before `with_lock` was called: no later than the send time
    /// of the acquisition, so `acquire_sent + TTL` bounds the lease from above.
    acquire_sent: Instant,
    partitioned_at: Instant,
    fence: u64,
    result: Result<(), LockError>,
    /// The instants the body recorded, every [`TICK`].
    ticks: Vec<Instant>,
}

impl Partitioned {
    #[track_caller]
    fn assert_cancelled_before_the_lease_ends(&self) {
        assert_lease_lost(self.result.clone(), KEY);
        let last = *self.ticks.last().expect("the body ran");
        let lease_end = self.acquire_sent + TTL;
        assert!(
            last < lease_end,
            "the body still ran {:?} after the lease could have expired on the server",
            last - lease_end
        );
    }
}

/// A manager that reaches its one server through `proxy`.
async fn through(proxy: &FaultProxy) -> LockManager {
    LockManager::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy")
}

/// A Redlock manager that reaches its nodes through `proxies`.
async fn redlock_through(proxies: &[FaultProxy]) -> LockManager {
    LockManager::builder()
        .response_timeout(RESPONSE_TIMEOUT)
        .redlock(proxies.iter().map(FaultProxy::url))
        .await
        .expect("connect through the proxies")
}

fn proxies_for(nodes: &[RedisServer]) -> Vec<FaultProxy> {
    nodes
        .iter()
        .map(|node| FaultProxy::start(node.addr()))
        .collect()
}

fn options() -> LockOptions {
    LockOptions::new().ttl(TTL).wait(Duration::ZERO)
}

/// A body that reports its fencing token on `started`, then records
/// `Instant::now()` into `ticks` every [`TICK`], `count` times.
async fn ticking_body(
    started: oneshot::Sender<u64>,
    ticks: Arc<Mutex<Vec<Instant>>>,
    count: usize,
) {
    let fence = fencing_token()
        .await
        .expect("the body runs in its lock scope");
    // The test awaits the receiver; a dropped one only means it failed already.
    let _ = started.send(fence);
    for _ in 0..count {
        ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Instant::now());
        tokio::time::sleep(TICK).await;
    }
}

/// Runs a [`ticking_body`] of `count` ticks under `a.with_lock`, calls
/// `partition` as soon as the body started, and waits (bounded) for
/// `with_lock` to return.
async fn hold_and_partition(
    a: &LockManager,
    count: usize,
    partition: impl FnOnce(),
) -> Partitioned {
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let (started, fence) = oneshot::channel();
    let body = ticking_body(started, Arc::clone(&ticks), count);
    let a = a.clone();
    let acquire_sent = Instant::now();
    let holder = tokio::spawn(async move { a.with_lock(KEY, options(), body).await });
    let fence = timeout(PROMPTLY, fence)
        .await
        .expect("the holder acquires at once")
        .expect("the body starts");
    let partitioned_at = Instant::now();
    partition();
    let limit = TICK * u32::try_from(count).expect("tick count") + 2 * TTL;
    let result = timeout(limit, holder)
        .await
        .unwrap_or_else(|_| panic!("with_lock still running {limit:?} after it was called"))
        .expect("holder task");
    let ticks = ticks.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Partitioned {
        acquire_sent,
        partitioned_at,
        fence,
        result,
        ticks,
    }
}

/// Asserts that `b` gets the lock within ttl + 1 s of the partition, with a
/// higher fencing token that makes a fenced store reject the old holder.
async fn assert_taken_over_and_old_token_fenced(b: &LockManager, partitioned: &Partitioned) {
    let deadline = partitioned.partitioned_at + TTL + Duration::from_secs(1);
    let wait = deadline.saturating_duration_since(Instant::now());
    let guard = timeout(wait + PROMPTLY, b.acquire(KEY, options().wait(wait)))
        .await
        .expect("acquire returns within its wait")
        .expect("the other side gets the lock within ttl + 1 s of the partition");
    assert!(
        guard.fencing_token().await.unwrap() > partitioned.fence,
        "new fencing token {} not above the old holder's {}",
        guard.fencing_token().await.unwrap(),
        partitioned.fence
    );
    let store = FencedStore::default();
    store
        .write(
            guard.fencing_token().await.unwrap(),
            "written by the new holder",
        )
        .expect("the new holder writes");
    assert_eq!(
        store.write(partitioned.fence, "late write of the old holder"),
        Err(StaleWrite {
            token: partitioned.fence,
            highest: guard.fencing_token().await.unwrap()
        }),
        "the old holder's late write must be rejected"
    );
    guard.release().await.expect("release by the new holder");
}

/// Partitions a single-Redis holder with `fault` right after it acquired.
async fn partitioned_single_holder_is_cancelled(fault: Fault) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let a = through(&proxy).await;
    let b = connect(&server.url()).await;

    let partitioned = hold_and_partition(&a, LONG_BODY_TICKS, || fault.apply(&proxy, TTL)).await;
    partitioned.assert_cancelled_before_the_lease_ends();
    assert_taken_over_and_old_token_fenced(&b, &partitioned).await;
}

/// Partitions a holder on a Redis Cluster from every node with `fault` right
/// after it acquired. Every client of the cluster goes through the proxies
/// (see [`proxied_cluster`]), so the other side `b` is cut off too until the
/// holder has been cancelled; the proxies are restored then.
async fn partitioned_cluster_holder_is_cancelled(fault: Fault) {
    let (_cluster, proxies) = proxied_cluster().await;
    let (a, b) = holder_and_other_side(&proxies, RESPONSE_TIMEOUT).await;

    let partitioned = hold_and_partition(&a, LONG_BODY_TICKS, || {
        for proxy in &proxies {
            fault.apply(proxy, TTL);
        }
    })
    .await;
    partitioned.assert_cancelled_before_the_lease_ends();
    for proxy in &proxies {
        proxy.restore();
    }
    assert_taken_over_and_old_token_fenced(&b, &partitioned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_holder_is_cancelled_before_its_lease_ends_when_cut() {
    partitioned_cluster_holder_is_cancelled(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_holder_is_cancelled_before_its_lease_ends_when_blackholed() {
    partitioned_cluster_holder_is_cancelled(Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_holder_is_cancelled_before_its_lease_ends_when_delayed_past_the_ttl() {
    partitioned_cluster_holder_is_cancelled(Fault::DelayPastTtl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_is_cancelled_before_its_lease_ends_when_cut() {
    partitioned_single_holder_is_cancelled(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_is_cancelled_before_its_lease_ends_when_blackholed() {
    partitioned_single_holder_is_cancelled(Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_is_cancelled_before_its_lease_ends_when_delayed_past_the_ttl() {
    partitioned_single_holder_is_cancelled(Fault::DelayPastTtl).await;
}

/// The keys of the set a `with_locks` holder takes in the set tests.
const SET: [&str; 2] = ["set-x", "set-y"];

/// Partitions, with `fault`, a single-Redis holder of two keys renewed
/// together, whose first key was taken 300 ms before the second (the other
/// side held it until then): its body is cancelled before the *first* key's
/// lease can have run out on the server, and the other side then gets both
/// keys.
async fn partitioned_holder_of_a_set_is_cancelled(fault: Fault) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let a = through(&proxy).await;
    let b = connect(&server.url()).await;
    let second = b.acquire(SET[1], options()).await.unwrap();
    let stagger = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        second.release().await.unwrap();
    });

    let ticks = Arc::new(Mutex::new(Vec::new()));
    let (started, body_started) = oneshot::channel();
    let body = {
        let ticks = Arc::clone(&ticks);
        async move {
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
    };
    let acquire_sent = Instant::now();
    let holder = {
        let a = a.clone();
        let waiting = options().wait(PROMPTLY);
        tokio::spawn(async move { a.with_locks(SET, waiting, body).await })
    };
    timeout(2 * PROMPTLY, body_started)
        .await
        .expect("the holder gets both keys once the other side let go")
        .expect("the body starts");
    stagger.await.unwrap();
    fault.apply(&proxy, TTL);

    let result = timeout(3 * TTL, holder)
        .await
        .expect("with_locks returns once the set is lost")
        .expect("holder task");
    assert!(
        matches!(result, Err(LockError::LeaseLost { ref key }) if SET.contains(&key.as_str())),
        "{result:?}"
    );
    let last = *ticks
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .last()
        .expect("the body ran");
    let first_lease_end = acquire_sent + TTL;
    assert!(
        last < first_lease_end,
        "the body still ran {:?} after the first key's lease could have expired on the server",
        last - first_lease_end
    );
    let both = timeout(
        TTL + PROMPTLY,
        b.acquire_all(SET, options().wait(TTL + Duration::from_secs(1))),
    )
    .await
    .expect("acquire_all returns within its wait")
    .expect("the other side gets both keys once their leases ran out");
    both.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_of_a_set_is_cancelled_before_its_first_lease_ends_when_cut() {
    partitioned_holder_of_a_set_is_cancelled(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_of_a_set_is_cancelled_before_its_first_lease_ends_when_blackholed() {
    partitioned_holder_of_a_set_is_cancelled(Fault::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_of_a_set_is_cancelled_before_its_first_lease_ends_when_delayed_past_the_ttl(
) {
    partitioned_holder_of_a_set_is_cancelled(Fault::DelayPastTtl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holder_cut_from_a_majority_is_cancelled_before_its_lease_ends() {
    let nodes = RedisServer::start_independent(3);
    let proxies = proxies_for(&nodes);
    let a = redlock_through(&proxies).await;
    let b = redlock(&nodes).await;

    let partitioned = hold_and_partition(&a, LONG_BODY_TICKS, || {
        proxies[0].cut();
        proxies[1].cut();
    })
    .await;
    partitioned.assert_cancelled_before_the_lease_ends();
    assert_taken_over_and_old_token_fenced(&b, &partitioned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holder_cut_from_one_of_three_nodes_keeps_its_lease() {
    let nodes = RedisServer::start_independent(3);
    let proxies = proxies_for(&nodes);
    let a = redlock_through(&proxies).await;
    let b = redlock(&nodes).await;

    let outsider = {
        let b = b.clone();
        async move {
            // Past the first lease: only renewals on the two reachable nodes keep it.
            tokio::time::sleep(TTL + Duration::from_millis(200)).await;
            b.try_acquire(KEY, options()).await
        }
    };
    let outsider = tokio::spawn(outsider);
    let partitioned = hold_and_partition(&a, SHORT_BODY_TICKS, || proxies[2].cut()).await;
    assert!(
        partitioned.result.is_ok(),
        "a quorum was reachable all along, yet with_lock returned {:?}",
        partitioned.result
    );
    assert_eq!(
        partitioned.ticks.len(),
        SHORT_BODY_TICKS,
        "the body ran to the end"
    );
    let outsider = timeout(PROMPTLY, outsider)
        .await
        .expect("the outsider's attempt returns")
        .expect("outsider task");
    assert!(
        matches!(outsider, Ok(None)),
        "the other side got {outsider:?} while the holder kept a quorum"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_at_valid_until_well_before_the_server_expires_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let a = through(&proxy).await;

    let sent_no_earlier_than = Instant::now();
    let guard = timeout(PROMPTLY, a.acquire(KEY, options()))
        .await
        .expect("acquire returns at once")
        .expect("acquire through the proxy");
    let valid_until = guard.valid_until().expect("a fresh lease is valid");
    assert!(
        valid_until < sent_no_earlier_than + TTL,
        "valid_until keeps a safety margin before the server's expiry"
    );
    proxy.blackhole();
    timeout(TTL + PROMPTLY, guard.lost())
        .await
        .expect("lost() resolves once renewals cannot get through");
    let noticed = Instant::now();
    assert!(
        noticed >= valid_until,
        "lost() resolved while the lease was still certainly valid"
    );
    assert!(
        noticed < sent_no_earlier_than + TTL,
        "lost() resolved {:?} after the server may have expired the lock",
        noticed - (sent_no_earlier_than + TTL)
    );
    assert!(guard.is_lost());
    assert_eq!(guard.valid_until(), None, "a lost lease has no validity");
}

/// A process pause (SIGSTOP, a VM migration, swapping) freezes every task of
/// the holder, the watchdog included, here by blocking the only thread of a
/// current-thread runtime for longer than the ttl. On waking, the body must
/// not take one more step under the expired lease: it is cancelled at its
/// first `.await`, and the call reports the loss.
#[tokio::test(flavor = "current_thread")]
async fn paused_holder_is_cancelled_at_its_first_await_after_resuming() {
    let server = RedisServer::start();
    let a = connect(&server.url()).await;
    let wrote_after_pause = Arc::new(Mutex::new(false));
    let wrote = Arc::clone(&wrote_after_pause);
    let result = a
        .with_lock(KEY, options(), async move {
            std::thread::sleep(TTL + TTL / 5);
            tokio::task::yield_now().await;
            *wrote.lock().unwrap_or_else(PoisonError::into_inner) = true;
        })
        .await;
    assert_lease_lost(result, KEY);
    assert!(
        !*wrote_after_pause
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
        "the body wrote after its lease ran out during the pause"
    );
}
