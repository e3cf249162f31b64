//! Counting semaphores (`LockManager::semaphore`, `#[distributed_lock(permits
//! = N)]`) beyond what `conformance_shared.rs` runs on every backend: 50
//! tasks over three managers, a member removed behind its holder's back, a
//! SIGKILLed holder process, cancellation at every `.await`, Redlock's
//! refusal, and the attribute.
//!
//! The names follow the default namespace: the semaphore on `k` is the sorted
//! set `lock-sem:k`. Every loop is bounded in count and time.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};
use leasehold_testkit::{poll_until, RedisServer};
use support::{
    connect, drop_after_polls, join_within, long, poll_async, redlock, waiting, within, Harness,
    Occupancy, PROMPTLY,
};

/// `tasks` tasks spread over `managers` each take one of `permits` permits of
/// one semaphore (waiting up to 30 s), visit, and release: all done within
/// 60 s, never more than `permits` inside at once, and `permits` reached.
async fn permits_bound_the_holders(managers: &[LockManager], permits: u32, tasks: usize) {
    let occupancy = Arc::new(Occupancy::filling(usize::try_from(permits).unwrap()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_permits_bound_fifty_tasks_over_three_managers() {
    let server = RedisServer::start();
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(connect(&server.url()).await);
    }
    permits_bound_the_holders(&managers, 5, 50).await;
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
    let occupancy = Arc::new(Occupancy::filling(2));
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
        .args([
            "--exact",
            "semaphore::permit_holder_process",
            "--ignored",
            "--quiet",
        ])
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
