//! Jobs that every instance of a fleet schedules and one of them runs, per
//! period: `#[distributed_lock(on_busy = "skip", hold_at_least = "...")]`
//! (with `key` and with `keys`), the same keyed by its period (`period =
//! "..."`), and `LockManager::try_with_lock` against a real redis-server.
//!
//! Each test starts its own server on a free 127.0.0.1 port. Every loop is
//! bounded in count and time.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use support::{becomes_free, connect, is_free, long, within};
use tokio::sync::{oneshot, Notify};

/// One service instance with a scheduled job.
struct Instance {
    locks: LockManager,
    name: usize,
    runs: Arc<Mutex<Vec<(u64, usize)>>>,
    entered: Notify,
}

impl Instance {
    async fn new(url: &str, name: usize, runs: &Arc<Mutex<Vec<(u64, usize)>>>) -> Instance {
        Instance {
            locks: connect(url).await,
            name,
            runs: Arc::clone(runs),
            entered: Notify::new(),
        }
    }

    /// The nightly report of `period`: the first instance in runs it, the
    /// others skip; the key stays held 700 ms after it started.
    #[distributed_lock(
        key = "job:report",
        on_busy = "skip",
        hold_at_least = "700ms",
        manager = self.locks
    )]
    async fn report(&self, period: u64) -> Result<(), LockError> {
        self.runs.lock().unwrap().push((period, self.name));
        Ok(())
    }

    /// A job over two keys: skipped when either is held elsewhere.
    #[distributed_lock(
        keys = ["job:ledger", "job:ledger-export"],
        on_busy = "skip",
        manager = self.locks
    )]
    async fn export(&self) -> Result<Option<usize>, LockError> {
        Ok(Some(self.name))
    }

    /// A job with a result: `Ok(None)` when skipped.
    #[distributed_lock(key = "job:count", on_busy = "skip", manager = self.locks)]
    async fn count(&self, resume: oneshot::Receiver<()>) -> Result<Option<usize>, LockError> {
        self.entered.notify_one();
        resume.await.ok();
        Ok(Some(self.name))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_job_is_skipped_at_once_and_says_so() {
    let server = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let a = Arc::new(Instance::new(&server.url(), 1, &runs).await);
    let b = Instance::new(&server.url(), 2, &runs).await;
    let (resume, resumed) = oneshot::channel();
    let running = tokio::spawn({
        let a = Arc::clone(&a);
        async move { a.count(resumed).await }
    });
    within(a.entered.notified()).await;

    let (_unused, never) = oneshot::channel();
    assert_eq!(within(b.count(never)).await.unwrap(), None, "skipped");

    resume.send(()).unwrap();
    assert_eq!(within(running).await.unwrap().unwrap(), Some(1));
    assert!(becomes_free(&b.locks, "job:count").await);
}

/// A job over several keys is skipped, without running, when any one of
/// them is held elsewhere; it gives back the keys it took, and runs once
/// every key is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_over_several_keys_is_skipped_when_any_key_is_busy() {
    let server = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let instance = Instance::new(&server.url(), 1, &runs).await;
    let other = connect(&server.url()).await;
    let held = other.acquire("job:ledger-export", long()).await.unwrap();

    assert_eq!(within(instance.export()).await.unwrap(), None, "skipped");
    assert!(
        is_free(&other, "job:ledger").await,
        "the key taken was given back"
    );
    held.release().await.unwrap();
    assert_eq!(within(instance.export()).await.unwrap(), Some(1), "ran");
    assert!(is_free(&other, "job:ledger").await && is_free(&other, "job:ledger-export").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_at_least_keeps_the_key_after_an_early_return_then_frees_it() {
    let server = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let instance = Instance::new(&server.url(), 1, &runs).await;
    let other = connect(&server.url()).await;

    within(instance.report(0)).await.unwrap();
    let returned = Instant::now();
    assert!(
        !is_free(&other, "job:report").await,
        "held on after the body returned"
    );
    assert!(becomes_free(&other, "job:report").await, "freed by its TTL");
    let held = returned.elapsed();
    assert!(
        held >= Duration::from_millis(300),
        "kept only {held:?} of its 700 ms"
    );
    assert_eq!(*runs.lock().unwrap(), vec![(0, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_running_past_hold_at_least_releases_at_once() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let options = long().hold_at_least(Duration::from_millis(50));
    let ran = locks
        .try_with_lock(
            "job:slow",
            options,
            tokio::time::sleep(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    assert_eq!(ran, Some(()));
    assert!(is_free(&locks, "job:slow").await, "released at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_long_hold_at_least_is_rejected_not_a_panic() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let options = long().hold_at_least(Duration::from_secs(366 * 24 * 3600));
    let result = locks.try_with_lock("job:x", options, async {}).await;
    assert!(
        matches!(result, Err(LockError::InvalidOptions(_))),
        "{result:?}"
    );
    let zero = locks
        .try_with_lock(
            "job:x",
            LockOptions::new().hold_at_least(Duration::ZERO),
            async {},
        )
        .await;
    assert_eq!(zero.unwrap(), Some(()), "zero is off");
    assert!(is_free(&locks, "job:x").await);
}

/// 3 instances fire the job every 1 s, 50 ms apart, for 5 periods: each
/// period's job runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_period_runs_once_across_three_instances() {
    const PERIODS: u64 = 5;
    let server = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let skipped = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut instances = Vec::new();
    for name in 0..3 {
        let instance = Instance::new(&server.url(), name, &runs).await;
        let skipped = Arc::clone(&skipped);
        instances.push(tokio::spawn(async move {
            let offset = Duration::from_millis(50) * u32::try_from(name).unwrap();
            let mut ticks = tokio::time::interval_at(start + offset, Duration::from_secs(1));
            for period in 0..PERIODS {
                ticks.tick().await;
                within(instance.report(period)).await.unwrap();
                // Its own run of this period, which no other instance can
                // record: counting all runs before and after would see another
                // instance's run as this one's when a busy machine bunches the
                // instances' ticks together.
                let ran = instance.runs.lock().unwrap().contains(&(period, name));
                if !ran {
                    skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for instance in instances {
        within(instance).await.unwrap();
    }

    let runs = runs.lock().unwrap();
    for period in 0..PERIODS {
        let runners: Vec<usize> = runs
            .iter()
            .filter(|(ran, _)| *ran == period)
            .map(|(_, name)| *name)
            .collect();
        assert_eq!(runners.len(), 1, "period {period} ran on {runners:?}");
    }
    assert_eq!(
        skipped.load(Ordering::Relaxed),
        usize::try_from(PERIODS).unwrap() * 2
    );
}

/// One instance of a fleet with an hourly-style job keyed by its period:
/// `period = "3s"`, its own hold only 100 ms.
struct PeriodicInstance {
    locks: LockManager,
    runs: Arc<Mutex<Vec<Vec<String>>>>,
}

impl PeriodicInstance {
    /// The job: records the keys it ran under (`job:digest@START`).
    #[distributed_lock(
        key = "job:digest",
        period = "3s",
        on_busy = "skip",
        hold_at_least = "100ms",
        manager = self.locks
    )]
    async fn digest(&self) -> Result<(), LockError> {
        self.runs.lock().unwrap().push(leasehold::held_locks());
        Ok(())
    }
}

/// Issue 42, item 6: with `on_busy = "skip"` and `hold_at_least` alone, an
/// instance whose timer fires more than the hold after another's runs the
/// period again. With `period`, three instances firing one after another,
/// each more than the hold after the one before, run each period once: the
/// first of each period runs, the others skip, and the next period runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_with_offset_timers_run_each_period_once() {
    let server = RedisServer::start();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(PeriodicInstance {
            locks: connect(&server.url()).await,
            runs: Arc::clone(&runs),
        });
    }
    let period = 3u64;
    let period_of = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / period
    };
    for _round in 0..3 {
        // A period no call has touched yet: wait for the next one to begin.
        let current = period_of();
        for _ in 0..500 {
            if period_of() != current {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_ne!(period_of(), current, "the next period never began");
        for instance in &fleet {
            instance.digest().await.expect("ran or skipped");
            // The next instance's timer fires later than this hold ends.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let runs = runs.lock().unwrap().clone();
    let keys: Vec<String> = runs.iter().flatten().cloned().collect();
    assert!(
        keys.iter().all(|key| key.starts_with("job:digest@")),
        "{keys:?}"
    );
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), keys.len(), "a period ran twice: {keys:?}");
    assert!(keys.len() >= 3, "each round's new period ran: {keys:?}");
}
