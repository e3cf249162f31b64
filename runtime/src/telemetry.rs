//! What the runtime reports about its locks: metrics through the `metrics`
//! facade (the application installs an exporter, or none) and the names of
//! its tracing spans.
//!
//! Every metric carries two labels: `lock`, the key *template* the attribute
//! knows (`stock:{sku}`), else the acquisition's `LockOptions::label`, else
//! `unlabelled`, never the key itself, so the number of series stays bounded
//! however many keys there are; and `kind`, what was acquired: `lock`,
//! `read` or `write` (a read/write lock's leases), `permit` (a semaphore's).
//! Acquisition and renewal outcomes add `outcome`.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `leasehold_acquisitions_total` | counter | acquisitions by `outcome`: `ok`, `busy` (one attempt, held elsewhere), `timeout` (waited `wait` in vain), `error` |
//! | `leasehold_wait_seconds` | histogram | from the call to holding the lock, for `ok` |
//! | `leasehold_hold_seconds` | histogram | from holding the lock to its release (or the guard's drop) |
//! | `leasehold_renewals_total` | counter | lease renewals by `outcome`: `ok`, `failed` (retried), `refused` (lost) |
//! | `leasehold_leases_lost_total` | counter | leases that ended lost (expired before renewal, or taken over) |
//! | `leasehold_handoffs_total` | counter | locks a release handed straight to a queued waiter of this process |
//! | `leasehold_waiters` | gauge | tasks of this process waiting for a lock now |

use std::future::Future;
use std::sync::{Arc, LazyLock, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use metrics::{Key, Label, Metadata, SharedString};

use tracing::Instrument;

use crate::hashing::FastMap;
use crate::kinds::kind::{Kind, KINDS};
use crate::{LockError, LockOptions};

/// Acquisitions by outcome.
pub(crate) const ACQUISITIONS: &str = "leasehold_acquisitions_total";
/// Time from the call to holding the lock.
pub(crate) const WAIT_SECONDS: &str = "leasehold_wait_seconds";
/// Time from holding the lock to its release.
pub(crate) const HOLD_SECONDS: &str = "leasehold_hold_seconds";
/// Lease renewals by outcome.
pub(crate) const RENEWALS: &str = "leasehold_renewals_total";
/// Leases that ended lost.
pub(crate) const LEASES_LOST: &str = "leasehold_leases_lost_total";
/// Locks handed straight to a waiter of this process.
pub(crate) const HANDOFFS: &str = "leasehold_handoffs_total";
/// Tasks of this process waiting for a lock now.
pub(crate) const WAITERS: &str = "leasehold_waiters";

/// Gives each metric above its description and unit (Prometheus `# HELP`
/// lines, seconds for the histograms) in the `metrics` recorder installed
/// now; without a recorder it does nothing. Every `LockManager` calls it
/// when it is built; call it again if you install your recorder after
/// building your managers. Idempotent.
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        ACQUISITIONS,
        "Lock, permit and read/write lease acquisitions by outcome: ok, busy (one attempt, held elsewhere), timeout (waited in vain), error"
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from the acquiring call to holding the lock, for acquisitions that got it"
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "Time from holding the lock to its release or the guard's drop"
    );
    describe_counter!(
        RENEWALS,
        "Lease renewals by outcome: ok, failed (retried until the lease's validity ends), refused (the lease is lost)"
    );
    describe_counter!(
        LEASES_LOST,
        "Leases that ended lost: expired before a renewal was granted, or taken over"
    );
    describe_counter!(
        HANDOFFS,
        "Locks a release handed straight to a queued waiter of this process"
    );
    describe_gauge!(WAITERS, "Tasks of this process waiting for a lock now");
}

/// The `lock` label of an acquisition with neither a key template nor a
/// label.
const UNLABELLED: &str = "unlabelled";

/// How many (`lock`, `kind`) label pairs keep their metric keys for the
/// life of the process; the labels past it build theirs per use. Far more
/// than a service has templates and labels: only labels made per call
/// (which also make a series each) reach it.
const KEPT_LABELS: usize = 4096;

/// Where the metrics are reported from, as the `metrics` macros would say.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The metric keys of every (`lock`, `kind`) label pair seen, by `lock`
/// then kind: a recording then costs no key construction (a label list and
/// a hash each), only the recorder's lookup of a ready key. The recorder is
/// asked on every recording, so one installed later is used from then on.
static KEPT: LazyLock<RwLock<KeptLabels>> = LazyLock::new(RwLock::default);

/// Each `lock` label's keys, by kind ([`Kind::index`]).
type KeptLabels = FastMap<Arc<str>, [Option<Arc<LabelKeys>>; KINDS]>;

/// The `lock` and `kind` labels of an acquisition's metrics, with its
/// metric keys.
#[derive(Debug, Clone)]
pub(crate) struct MetricLabel(Arc<LabelKeys>);

/// One label pair's metric keys, each built on its first use.
#[derive(Debug)]
struct LabelKeys {
    lock: Arc<str>,
    kind: &'static str,
    acquisitions: [OnceLock<Key>; 4],
    wait: OnceLock<Key>,
    hold: OnceLock<Key>,
    lost: OnceLock<Key>,
    renewals: [OnceLock<Key>; 3],
    handoffs: OnceLock<Key>,
    waiters: OnceLock<Key>,
}

/// Acquisition outcomes, in the order of [`LabelKeys::acquisitions`].
const ACQUISITION_OUTCOMES: [&str; 4] = ["ok", "timeout", "busy", "error"];
/// How a lease's renewal ended, as `leasehold_renewals_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalOutcome {
    /// Renewed.
    Ok,
    /// Not answered or not decided: retried within the lease's validity.
    Failed,
    /// The lock was no longer ours: the lease is lost.
    Refused,
}

impl RenewalOutcome {
    /// The `outcome` label, and the index in [`LabelKeys::renewals`].
    fn label_and_index(self) -> (&'static str, usize) {
        match self {
            RenewalOutcome::Ok => ("ok", 0),
            RenewalOutcome::Failed => ("failed", 1),
            RenewalOutcome::Refused => ("refused", 2),
        }
    }
}

impl LabelKeys {
    fn new(lock: Arc<str>, kind: &'static str) -> Self {
        LabelKeys {
            lock,
            kind,
            acquisitions: Default::default(),
            wait: OnceLock::new(),
            hold: OnceLock::new(),
            lost: OnceLock::new(),
            renewals: Default::default(),
            handoffs: OnceLock::new(),
            waiters: OnceLock::new(),
        }
    }

    /// `slot`'s key, `name` with this pair's labels and `outcome` if any.
    fn key<'a>(
        &self,
        slot: &'a OnceLock<Key>,
        name: &'static str,
        outcome: Option<&'static str>,
    ) -> &'a Key {
        slot.get_or_init(|| {
            let mut labels = vec![
                Label::new("lock", SharedString::from(Arc::clone(&self.lock))),
                Label::from_static_parts("kind", self.kind),
            ];
            if let Some(outcome) = outcome {
                labels.push(Label::from_static_parts("outcome", outcome));
            }
            Key::from_parts(name, labels)
        })
    }
}

fn counter(key: &Key) -> metrics::Counter {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

fn histogram(key: &Key) -> metrics::Histogram {
    metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
}

impl MetricLabel {
    /// `lock`: the options' key template if known, else their label, else
    /// `unlabelled`; `kind`: what a key of `kind` holds.
    pub(crate) fn new(options: &LockOptions, kind: Kind) -> Self {
        let lock: &str = options
            .template
            .as_deref()
            .or(options.label.as_deref())
            .unwrap_or(UNLABELLED);
        let index = kind.index();
        let kept = KEPT
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(lock)
            .and_then(|kinds| kinds[index].clone());
        if let Some(keys) = kept {
            return MetricLabel(keys);
        }
        let mut kept = KEPT.write().unwrap_or_else(PoisonError::into_inner);
        let full = kept.len() >= KEPT_LABELS;
        let kinds = match kept.get_mut(lock) {
            Some(kinds) => kinds,
            None if full => {
                return MetricLabel(Arc::new(LabelKeys::new(lock.into(), kind.name())));
            }
            None => kept.entry(Arc::from(lock)).or_default(),
        };
        let keys =
            kinds[index].get_or_insert_with(|| Arc::new(LabelKeys::new(lock.into(), kind.name())));
        MetricLabel(Arc::clone(keys))
    }

    /// Whether `other` is known, without comparing bytes, to carry the same
    /// labels: both share one pair's keys (every pair kept shares them).
    pub(crate) fn same(&self, other: &MetricLabel) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The `kind` label: `lock`, `read`, `write` or `permit`.
    pub(crate) fn kind(&self) -> &'static str {
        self.0.kind
    }

    /// Runs the acquisition that `start` makes of `key` in a `lock.acquire`
    /// span, and counts its outcome and, when it
    /// acquired, its wait. Made here rather than passed in, the acquisition's
    /// future is kept once in this one's state, not twice (as an argument
    /// and as what is awaited), which halves what every caller moves.
    pub(crate) async fn observe<T, A>(
        &self,
        key: &str,
        start: impl FnOnce() -> A,
    ) -> Result<T, LockError>
    where
        A: Future<Output = Result<T, LockError>>,
    {
        let span = tracing::debug_span!(
            "lock.acquire",
            key,
            lock = %self,
            kind = self.0.kind,
            waited_ms = tracing::field::Empty,
            acquired = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = start().instrument(span.clone()).await;
        self.acquisition(&result);
        let waited = started.elapsed();
        span.record("waited_ms", waited.as_millis());
        span.record("acquired", result.is_ok());
        if result.is_ok() {
            self.waited(waited);
        }
        result
    }

    /// Counts one acquisition that ended with `result`: `Ok` held,
    /// `Timeout` timed out, `Busy` busy.
    fn acquisition<T>(&self, result: &Result<T, LockError>) {
        let outcome = match result {
            Ok(_) => 0,
            Err(LockError::Timeout { .. }) => 1,
            Err(LockError::Busy { .. }) => 2,
            Err(_) => 3,
        };
        let keys = &self.0;
        let key = keys.key(
            &keys.acquisitions[outcome],
            ACQUISITIONS,
            Some(ACQUISITION_OUTCOMES[outcome]),
        );
        counter(key).increment(1);
    }

    /// Records how long an acquisition waited for its lock.
    fn waited(&self, wait: Duration) {
        let keys = &self.0;
        histogram(keys.key(&keys.wait, WAIT_SECONDS, None)).record(wait.as_secs_f64());
    }

    /// Records a hold that ended after `held`, lost or not.
    pub(crate) fn held(&self, held: Duration, lost: bool) {
        let keys = &self.0;
        histogram(keys.key(&keys.hold, HOLD_SECONDS, None)).record(held.as_secs_f64());
        if lost {
            counter(keys.key(&keys.lost, LEASES_LOST, None)).increment(1);
        }
    }

    /// Counts `count` renewals of one outcome.
    pub(crate) fn renewals(&self, outcome: RenewalOutcome, count: u64) {
        let keys = &self.0;
        let (outcome, index) = outcome.label_and_index();
        counter(keys.key(&keys.renewals[index], RENEWALS, Some(outcome))).increment(count);
    }

    /// Counts a lock a release handed to a waiter of this process.
    pub(crate) fn handoff(&self) {
        let keys = &self.0;
        counter(keys.key(&keys.handoffs, HANDOFFS, None)).increment(1);
    }

    /// Counts a task as waiting until the returned value is dropped.
    pub(crate) fn waiting(&self) -> Waiting {
        let keys = &self.0;
        let key = keys.key(&keys.waiters, WAITERS, None);
        let gauge = metrics::with_recorder(|recorder| recorder.register_gauge(key, &METADATA));
        gauge.increment(1.0);
        Waiting(gauge)
    }
}

impl std::fmt::Display for MetricLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.lock)
    }
}

/// A task counted in `leasehold_waiters` while this lives.
pub(crate) struct Waiting(metrics::Gauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use metrics::{Counter, Gauge, Histogram, KeyName, Recorder, Unit};

    use super::*;
    use crate::kinds::kind::Side;

    /// A recorder that writes down each key registered with it.
    #[derive(Default)]
    struct Registrations(Mutex<Vec<String>>);

    impl Registrations {
        fn note(&self, key: &Key) {
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let noted = format!("{} {}", key.name(), labels.join(","));
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(noted);
        }

        fn taken(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
        }
    }

    impl Recorder for Registrations {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.note(key);
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            self.note(key);
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            self.note(key);
            Histogram::noop()
        }
    }

    /// Keys are kept per label, but the recorder is asked at every
    /// recording: one installed after a label's first use gets everything
    /// from then on, with the same labels.
    #[test]
    fn kept_keys_go_to_whichever_recorder_is_installed_at_each_recording() {
        let options = LockOptions::new().label("kept-keys-test");
        let (first, second) = (Registrations::default(), Registrations::default());
        for recorder in [&first, &second] {
            let label = MetricLabel::new(&options, Kind::ReadWrite(Side::Write));
            metrics::with_local_recorder(recorder, || {
                label.held(Duration::from_millis(5), true);
                label.renewals(RenewalOutcome::Refused, 2);
            });
        }
        let expected = [
            "leasehold_hold_seconds lock=kept-keys-test,kind=write",
            "leasehold_leases_lost_total lock=kept-keys-test,kind=write",
            "leasehold_renewals_total lock=kept-keys-test,kind=write,outcome=refused",
        ];
        assert_eq!(first.taken(), expected);
        assert_eq!(second.taken(), expected);
        assert!(MetricLabel::new(&options, Kind::ReadWrite(Side::Write))
            .same(&MetricLabel::new(&options, Kind::ReadWrite(Side::Write))));
        assert!(!MetricLabel::new(&options, Kind::ReadWrite(Side::Write))
            .same(&MetricLabel::new(&options, Kind::ReadWrite(Side::Read))));
    }
}
