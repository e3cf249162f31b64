//! Counting semaphores (`LockManager::semaphore`, `#[distributed_lock(permits
//! = N)]`) against a real redis-server, a Redis Cluster, a Sentinel-managed
//! primary and in memory: at
//! most N holders, a crashed holder's permit back by its TTL, waiters woken
//! by releases, N lowered while held, lost permits reported, cancellation.
//!
//! The names follow the default namespace: the semaphore on `k` is the sorted
//! set `lock-sem:k`. Every loop is bounded in count and time.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distributed_lock::{distributed_lock, LockError, LockManager, LockOptions};
use distributed_lock_testkit::{poll_until, RedisServer};
use support::{
    connect, drop_after_polls, join_within, long, poll_async, redlock, waiting, within, Harness,
    PROMPTLY,
};

/// How many holders are inside at once, and the most there ever were.
#[derive(Default)]
struct Occupancy {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    /// Enters, stays a little (yielding to the others), leaves.
    async fn visit(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// `tasks` tasks spread over `managers` each take one of `permits` permits of
/// one semaphore (waiting up to 30 s), visit, and release: all done within
/// 60 s, never more than `permits` inside at once, and `permits` reached.
async fn permits_bound_the_holders(managers: &[LockManager], permits: u32, tasks: usize) {
    let occupancy = Arc::new(Occupancy::default());
    let handles = (0..tasks)
        .map(|task| {
            let semaphore = managers[task % managers.len()].semaphore("api:payments", permits);
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
    join_within(handles, Duration::from_secs(60), "every task's visit").await;
    let permits = usize::try_from(permits).unwrap();
    assert!(
        occupancy.most() <= permits,
        "{} holders at once",
        occupancy.most()
    );
    assert_eq!(occupancy.most(), permits, "the semaphore was never full");
}

/// A holder with a 30 s lease releases its only permit 300 ms after a waiter
/// of another manager started waiting: the waiter gets it well within a
/// second of the release, long before the lease (or any TTL retry) would
/// have let it in.
async fn a_release_wakes_a_waiter_promptly(holder: &LockManager, waiter: &LockManager) {
    let held = within(holder.semaphore("single", 1).acquire(long()))
        .await
        .unwrap();
    let semaphore = waiter.semaphore("single", 1);
    let waiting_task = tokio::spawn(async move {
        let permit = semaphore
            .acquire(waiting(Duration::from_secs(20)))
            .await
            .expect("a permit once the holder releases");
        let got = Instant::now();
        permit.release().await.unwrap();
        got
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting_task.is_finished(), "the waiter got a held permit");
    let released = Instant::now();
    held.release().await.unwrap();
    let got = within(waiting_task).await.unwrap();
    let after = got.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(1),
        "the waiter got the permit {after:?} after its release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_permits_bound_fifty_tasks_over_three_managers() {
    let server = RedisServer::start();
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(connect(&server.url()).await);
    }
    permits_bound_the_holders(&managers, 5, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_permits_bound_the_holders() {
    let harness = Harness::cluster().await;
    permits_bound_the_holders(&[harness.a.clone(), harness.b.clone()], 3, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_permits_bound_the_holders() {
    let harness = Harness::memory();
    permits_bound_the_holders(std::slice::from_ref(&harness.a), 5, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_permit_wakes_a_waiter_promptly() {
    let harness = Harness::redis().await;
    a_release_wakes_a_waiter_promptly(&harness.a, &harness.b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_released_permit_wakes_a_waiter_promptly() {
    let harness = Harness::cluster().await;
    a_release_wakes_a_waiter_promptly(&harness.a, &harness.b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_released_permit_wakes_a_waiter_promptly() {
    let harness = Harness::sentinel().await;
    a_release_wakes_a_waiter_promptly(&harness.a, &harness.b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_released_permit_wakes_a_waiter_promptly() {
    let harness = Harness::memory();
    a_release_wakes_a_waiter_promptly(&harness.a, &harness.b).await;
}

/// Lowering N from 3 to 2 while three permits are held revokes none of them;
/// newcomers with N = 2 get in only once the holders are down to one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_permits_makes_newcomers_wait_until_holders_drop_below_it() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let three = locks.semaphore("pool", 3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(within(three.try_acquire(long())).await.unwrap().unwrap());
    }
    let two = locks.semaphore("pool", 2);
    assert!(within(two.try_acquire(long())).await.unwrap().is_none());

    held.pop().unwrap().release().await.unwrap();
    assert!(
        within(two.try_acquire(long())).await.unwrap().is_none(),
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!newcomer.is_finished(), "the newcomer waits at two holders");
    held.pop().unwrap().release().await.unwrap();
    let permit = within(newcomer)
        .await
        .unwrap()
        .expect("one holder is below N = 2");
    let members = server.command(&["ZCARD", "lock-sem:pool"]).unwrap();
    assert_eq!(members.as_integer(), Some(2));
    permit.release().await.unwrap();
    held.pop().unwrap().release().await.unwrap();
}

/// A permit whose member is deleted behind its back is reported lost by its
/// next renewal, and its release says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_member_is_reported_lost() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let options = LockOptions::new().ttl(Duration::from_millis(900));
    let permit = within(locks.semaphore("api", 2).acquire(options))
        .await
        .unwrap();
    let removed = server
        .command(&["ZREM", "lock-sem:api", permit.token()])
        .unwrap();
    assert_eq!(removed.as_integer(), Some(1));
    tokio::time::timeout(Duration::from_secs(2), permit.lost())
        .await
        .expect("the loss is reported by the next renewal");
    assert!(permit.is_lost());
    assert!(matches!(
        permit.release().await,
        Err(LockError::LeaseLost { .. })
    ));
}

/// An acquisition dropped at each of its `.await` points in turn, on a free
/// semaphore and on a full one, leaves no permit behind: a probe of the same
/// one-permit semaphore gets it within [`PROMPTLY`].
async fn cancelled_acquisitions_leave_no_permit(locks: &LockManager) {
    let semaphore = locks.semaphore("cancel", 1);
    let is_free = || async {
        match semaphore.try_acquire(long()).await.unwrap() {
            Some(permit) => {
                permit.release().await.unwrap();
                true
            }
            None => false,
        }
    };
    let mut completed = false;
    for polls in 1..=30 {
        let acquire = semaphore.acquire(long());
        if let Some(permit) = drop_after_polls(acquire, polls).await {
            permit.unwrap().release().await.unwrap();
            completed = true;
            break;
        }
        assert!(
            poll_async(PROMPTLY, is_free).await,
            "a permit is left behind by an acquisition dropped after {polls} polls"
        );
    }
    assert!(completed, "an acquisition completes within 30 polls");

    // A waiter is polled again only when woken (by its timer here, at its
    // deadline): dropped asleep, or timed out.
    let held = semaphore.acquire(long()).await.unwrap();
    for polls in 1..=3 {
        let acquire = semaphore.acquire(waiting(Duration::from_millis(300)));
        let outcome = within(drop_after_polls(acquire, polls)).await;
        assert!(
            matches!(outcome, None | Some(Err(LockError::Timeout { .. }))),
            "a waiter behind a held permit got {outcome:?}"
        );
    }
    held.release().await.unwrap();
    assert!(
        poll_async(PROMPTLY, is_free).await,
        "a dropped waiter kept a permit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_leaves_no_permit_behind() {
    let harness = Harness::redis().await;
    cancelled_acquisitions_leave_no_permit(&harness.a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_cancelled_acquire_leaves_no_permit_behind() {
    cancelled_acquisitions_leave_no_permit(&LockManager::in_memory()).await;
}

/// Inside a body run under a permit, the same semaphore fails at once rather
/// than wait for a permit its caller may be keeping from itself; another
/// semaphore, or the lock of the same key, is taken as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_acquire_of_the_same_semaphore_fails_at_once() {
    let locks = LockManager::in_memory();
    let outer = locks.semaphore("nested", 1);
    let inner_locks = locks.clone();
    let nested = within(outer.with_permit(long(), async move {
        let same = inner_locks
            .semaphore("nested", 1)
            .acquire(waiting(Duration::from_secs(30)))
            .await;
        let other = inner_locks.semaphore("other", 1).acquire(long()).await;
        let lock = inner_locks.acquire("nested", long()).await;
        (same.map(drop), other.is_ok(), lock.is_ok())
    }))
    .await
    .unwrap();
    assert!(
        matches!(nested, (Err(LockError::AlreadyHeld { .. }), true, true)),
        "{nested:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_permits_and_lock_only_options_are_invalid() {
    let locks = LockManager::in_memory();
    let refused = [
        locks.semaphore("k", 0).acquire(long()).await.map(drop),
        locks
            .semaphore("k", 1)
            .acquire(long().fenced(true))
            .await
            .map(drop),
        locks
            .semaphore("k", 1)
            .acquire(long().hold_at_least(Duration::from_secs(1)))
            .await
            .map(drop),
    ];
    for result in refused {
        assert!(
            matches!(result, Err(LockError::InvalidOptions(_))),
            "{result:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_semaphores() {
    let nodes = [RedisServer::start()];
    let locks = redlock(&nodes).await;
    let result = locks.semaphore("k", 2).try_acquire(long()).await;
    match result {
        Err(LockError::InvalidOptions(message)) => assert!(message.contains("Redlock")),
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

/// Calls that share a rate-limited API through the attribute.
struct Api {
    locks: LockManager,
    occupancy: Arc<Occupancy>,
}

impl Api {
    #[distributed_lock(key = "api:{name}", permits = 2, wait = "30s", manager = self.locks)]
    async fn call(&self, name: &str) -> Result<(), LockError> {
        let _ = name;
        self.occupancy.visit().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn annotated_calls_never_exceed_their_permits() {
    let server = RedisServer::start();
    let occupancy = Arc::new(Occupancy::default());
    let mut calls = Vec::new();
    for _ in 0..12 {
        let api = Api {
            locks: connect(&server.url()).await,
            occupancy: Arc::clone(&occupancy),
        };
        calls.push(tokio::spawn(async move {
            api.call("payments").await.expect("a permit within 30 s");
        }));
    }
    join_within(calls, Duration::from_secs(30), "the annotated calls").await;
    assert_eq!(occupancy.most(), 2);
}

/// The permit's lease in the holder process below.
const DYING_TTL: Duration = Duration::from_millis(1500);

/// The holder process of the test below: takes the only permit of `dying`
/// and holds it until it is killed. Run only as a child process.
#[tokio::test]
#[ignore = "a child process of `killed_holders_permit_comes_back_by_its_ttl`"]
async fn permit_holder_process() {
    let Ok(url) = std::env::var("SEMAPHORE_CHILD_URL") else {
        return;
    };
    let locks = LockManager::connect(&url).await.expect("connect");
    let _permit = locks
        .semaphore("dying", 1)
        .acquire(LockOptions::new().ttl(DYING_TTL))
        .await
        .expect("the permit is free");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

fn start_holder_process(url: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "permit_holder_process", "--ignored", "--quiet"])
        .env("SEMAPHORE_CHILD_URL", url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holder process")
}

/// A holder killed with SIGKILL gives its permit back when its lease ends:
/// not before (its last renewal was at most ttl/3 before the kill, so the
/// lease ran at least 2/3 ttl past it), and not much after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holders_permit_comes_back_by_its_ttl() {
    let server = RedisServer::start();
    let mut child = start_holder_process(&server.url());
    let held = || {
        server
            .command(&["ZCARD", "lock-sem:dying"])
            .is_ok_and(|members| members.as_integer() == Some(1))
    };
    assert!(
        poll_until(Duration::from_secs(20), held),
        "the holder process took its permit"
    );
    // Past its first renewal, so the lease runs a full ttl from a renewal.
    tokio::time::sleep(DYING_TTL / 2).await;
    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap it");
    let killed = Instant::now();

    let locks = connect(&server.url()).await;
    let permit = within(
        locks
            .semaphore("dying", 1)
            .acquire(waiting(Duration::from_secs(10))),
    )
    .await
    .expect("the permit comes back");
    let waited = killed.elapsed();
    assert!(
        waited >= DYING_TTL * 2 / 3 - Duration::from_millis(50),
        "the permit of a holder whose lease still ran came back after {waited:?}"
    );
    assert!(
        waited < DYING_TTL + Duration::from_secs(1),
        "the permit of a dead holder stayed taken {waited:?}"
    );
    permit.release().await.unwrap();
}
