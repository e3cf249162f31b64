//! What the runtime reports through the `metrics` facade, read back from a
//! debugging recorder installed for this test binary: acquisitions by
//! outcome, wait and hold times, hand-offs, waiters, renewals and lost
//! leases, each labelled with the key template or the acquisition's label,
//! never with the key, and with the kind of lease (`lock`, `read`, `write`,
//! `permit`). Against a real `redis-server`.

use leasehold_test_support as support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::{poll_async, within, NO_HANG, PROMPTLY};

/// The recorder of this binary, installed by the first test that asks.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        snapshotter
    })
}

/// A metric as name and sorted `label=value` pairs.
type Series = (String, Vec<(String, String)>);

/// A metric's unit and description, by metric name.
type Descriptions = HashMap<String, (Option<Unit>, String)>;

/// The unit and description of each metric seen with one so far.
fn descriptions() -> &'static Mutex<Descriptions> {
    static DESCRIPTIONS: OnceLock<Mutex<Descriptions>> = OnceLock::new();
    DESCRIPTIONS.get_or_init(Mutex::default)
}

/// Everything reported so far: a snapshot drains the recorder (counters and
/// gauges are swapped to zero, histograms cleared), so every snapshot is
/// added up here. Counters and gauges sum their deltas, histograms count
/// their samples.
fn totals() -> HashMap<Series, f64> {
    static TOTALS: OnceLock<Mutex<HashMap<Series, f64>>> = OnceLock::new();
    let mut totals = TOTALS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (key, unit, description, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        if let Some(description) = description {
            descriptions()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key.name().to_owned(), (unit, description.into_owned()));
        }
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        labels.sort();
        let delta = match value {
            DebugValue::Counter(count) => count as f64,
            DebugValue::Gauge(level) => level.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        *totals.entry((key.name().to_owned(), labels)).or_default() += delta;
    }
    totals.clone()
}

/// One metric's total (see [`totals`]); `None` if it was never reported
/// with exactly these labels.
fn value(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    labels.sort();
    totals().get(&(name.to_owned(), labels)).copied()
}

/// Every label value of every metric reported so far.
fn every_label_value() -> Vec<String> {
    totals()
        .into_keys()
        .flat_map(|(_, labels)| labels.into_iter().map(|(_, value)| value))
        .collect()
}

#[distributed_lock(key = "mstock:{sku}", ttl = "20s", wait = "10s", manager = locks)]
async fn buy(locks: &LockManager, sku: u32, hold: Duration) -> Result<(), LockError> {
    tokio::time::sleep(hold).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_waits_holds_handoffs_and_waiters_are_labelled_by_template() {
    snapshotter();
    let server = RedisServer::start();
    let (a, b) = (
        LockManager::connect(&server.url()).await.unwrap(),
        LockManager::connect(&server.url()).await.unwrap(),
    );
    let first = {
        let a = a.clone();
        tokio::spawn(async move { buy(&a, 1, Duration::from_millis(300)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = {
        let b = b.clone();
        tokio::spawn(async move { buy(&b, 1, Duration::ZERO).await })
    };
    let template = [("lock", "mstock:{sku}"), ("kind", "lock")];
    let waiting = poll_async(PROMPTLY, || async {
        value("leasehold_waiters", &template) == Some(1.0)
    })
    .await;
    assert!(waiting, "the second buyer does not show as waiting");
    within(first).await.unwrap().unwrap();
    within(second).await.unwrap().unwrap();

    let busy_options = LockOptions::new().key_template("mstock:{sku}");
    let holder = a.acquire("mstock:2", busy_options.clone()).await.unwrap();
    assert!(b
        .try_acquire("mstock:2", busy_options.clone())
        .await
        .unwrap()
        .is_none());
    let timed_out = b
        .acquire("mstock:2", busy_options.wait(Duration::from_millis(50)))
        .await;
    assert!(matches!(timed_out, Err(LockError::Timeout { .. })));
    holder.release().await.unwrap();

    let outcome = |outcome| {
        value(
            "leasehold_acquisitions_total",
            &[template[0], template[1], ("outcome", outcome)],
        )
    };
    assert_eq!(outcome("ok"), Some(3.0));
    assert_eq!(outcome("busy"), Some(1.0));
    assert_eq!(outcome("timeout"), Some(1.0));
    assert_eq!(value("leasehold_wait_seconds", &template), Some(3.0));
    assert_eq!(value("leasehold_hold_seconds", &template), Some(3.0));
    assert_eq!(value("leasehold_handoffs_total", &template), Some(1.0));
    assert_eq!(value("leasehold_waiters", &template), Some(0.0));
    assert_eq!(value("leasehold_leases_lost_total", &template), None);
    let labels = every_label_value();
    assert!(
        !labels
            .iter()
            .any(|label| label.starts_with("mstock:") && label != "mstock:{sku}"),
        "a key became a label: {labels:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_a_lost_lease_are_counted_under_the_acquisitions_label() {
    snapshotter();
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.unwrap();
    let label = [("lock", "metrics::renewing"), ("kind", "lock")];
    let options = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .label("metrics::renewing");
    let guard = within(locks.acquire("renewing", options)).await.unwrap();
    let renewed = poll_async(NO_HANG, || async {
        value(
            "leasehold_renewals_total",
            &[label[0], label[1], ("outcome", "ok")],
        )
        .is_some_and(|count| count >= 2.0)
    })
    .await;
    assert!(renewed, "no renewals counted");
    server
        .command(&["DEL", "lock:renewing"])
        .expect("DEL the lock under its holder");
    tokio::time::timeout(NO_HANG, guard.lost())
        .await
        .expect("the holder learns it lost the lease");
    assert_eq!(
        value(
            "leasehold_renewals_total",
            &[label[0], label[1], ("outcome", "refused")]
        ),
        Some(1.0)
    );
    assert!(matches!(
        within(guard.release()).await,
        Err(LockError::LeaseLost { .. })
    ));
    assert_eq!(value("leasehold_leases_lost_total", &label), Some(1.0));
    assert_eq!(value("leasehold_hold_seconds", &label), Some(1.0));
}

/// Acquisitions, waits, waiters and holds of one lease `kind` under `lock`:
/// (ok, busy, timeout, waits, holds, waiters now).
fn kind_totals(lock: &str, kind: &str) -> [Option<f64>; 6] {
    let labels = [("lock", lock), ("kind", kind)];
    let outcome = |outcome| {
        value(
            "leasehold_acquisitions_total",
            &[labels[0], labels[1], ("outcome", outcome)],
        )
    };
    [
        outcome("ok"),
        outcome("busy"),
        outcome("timeout"),
        value("leasehold_wait_seconds", &labels),
        value("leasehold_hold_seconds", &labels),
        value("leasehold_waiters", &labels),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_reads_and_writes_are_counted_under_their_own_kind() {
    snapshotter();
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.unwrap();
    let options = |label: &str| LockOptions::new().label(label);

    let api = locks.semaphore("m-api", 1);
    let permit = within(api.acquire(options("m-api"))).await.unwrap();
    assert!(within(api.try_acquire(options("m-api")))
        .await
        .unwrap()
        .is_none());
    let waiter = {
        let api = api.clone();
        tokio::spawn(async move { api.acquire(options("m-api").wait(NO_HANG)).await })
    };
    let waiting = poll_async(PROMPTLY, || async {
        kind_totals("m-api", "permit")[5] == Some(1.0)
    })
    .await;
    assert!(waiting, "the permit's waiter does not show as waiting");
    within(permit.release()).await.unwrap();
    within(within(waiter).await.unwrap().unwrap().release())
        .await
        .unwrap();
    assert_eq!(
        kind_totals("m-api", "permit"),
        [Some(2.0), Some(1.0), None, Some(2.0), Some(2.0), Some(0.0)]
    );

    let reader = within(locks.rwlock("m-doc").acquire_read(options("m-doc")))
        .await
        .unwrap();
    let writer_timed_out = locks
        .rwlock("m-doc")
        .acquire_write(options("m-doc").wait(Duration::from_millis(50)))
        .await;
    assert!(matches!(writer_timed_out, Err(LockError::Timeout { .. })));
    within(reader.release()).await.unwrap();
    let writer = within(locks.rwlock("m-doc").acquire_write(options("m-doc")))
        .await
        .unwrap();
    within(writer.release()).await.unwrap();
    assert_eq!(
        kind_totals("m-doc", "read"),
        [Some(1.0), None, None, Some(1.0), Some(1.0), None]
    );
    assert_eq!(
        kind_totals("m-doc", "write"),
        [Some(1.0), None, Some(1.0), Some(1.0), Some(1.0), Some(0.0)]
    );
}

/// Every metric comes with a description (Prometheus `# HELP`), and the
/// wait and hold histograms with their unit, seconds: a manager describes
/// them when it is built, to the recorder installed then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_is_described_and_times_are_in_seconds() {
    snapshotter();
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.unwrap();
    let options = LockOptions::new()
        .label("described")
        .ttl(Duration::from_millis(300));
    let guard = locks.acquire("described", options).await.unwrap();
    let renewed = poll_async(NO_HANG, || async {
        value(
            "leasehold_renewals_total",
            &[("lock", "described"), ("kind", "lock"), ("outcome", "ok")],
        )
        .is_some()
    })
    .await;
    assert!(renewed, "no renewal was counted");
    guard.release().await.unwrap();
    totals();

    let described = descriptions()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for name in [
        "leasehold_acquisitions_total",
        "leasehold_wait_seconds",
        "leasehold_hold_seconds",
        "leasehold_renewals_total",
    ] {
        let (_, description) = described
            .get(name)
            .unwrap_or_else(|| panic!("{name} has no description: {described:?}"));
        assert!(!description.is_empty(), "{name}");
    }
    for histogram in ["leasehold_wait_seconds", "leasehold_hold_seconds"] {
        assert_eq!(described[histogram].0, Some(Unit::Seconds), "{histogram}");
    }
}
