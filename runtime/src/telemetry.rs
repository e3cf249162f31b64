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
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::keys::KeyKind;
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
/// label: one string shared by all of them, so that [`MetricLabel::same`]
/// finds them alike without comparing bytes.
static UNLABELLED: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("unlabelled"));

/// The `lock` and `kind` labels of an acquisition's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetricLabel {
    lock: Arc<str>,
    kind: &'static str,
}

impl MetricLabel {
    /// `lock`: the options' key template if known, else their label, else
    /// `unlabelled`; `kind`: what a key of `kind` holds.
    pub(crate) fn new(options: &LockOptions, kind: KeyKind) -> Self {
        let lock = options
            .template
            .as_ref()
            .or(options.label.as_ref())
            .cloned()
            .unwrap_or_else(|| Arc::clone(&UNLABELLED));
        let kind = match kind {
            KeyKind::Lock => "lock",
            KeyKind::Semaphore => "permit",
            KeyKind::Read => "read",
            KeyKind::Write => "write",
        };
        MetricLabel { lock, kind }
    }

    /// The `lock` label's value, shared rather than copied: a renewal
    /// counts one per lease and second.
    fn value(&self) -> Arc<str> {
        Arc::clone(&self.lock)
    }

    /// Whether `other` is known, without comparing bytes, to carry the same
    /// labels: it shares this label's string (labels cloned from one set
    /// of options, or both unlabelled) and kind.
    pub(crate) fn same(&self, other: &MetricLabel) -> bool {
        Arc::ptr_eq(&self.lock, &other.lock) && std::ptr::eq(self.kind, other.kind)
    }

    /// The `kind` label: `lock`, `read`, `write` or `permit`.
    pub(crate) fn kind(&self) -> &'static str {
        self.kind
    }

    /// Runs `acquisition` of `key`, which waits up to `wait`, in a
    /// `lock.acquire` span, and counts its outcome and, when it acquired,
    /// its wait.
    pub(crate) async fn observe<T>(
        &self,
        key: &str,
        wait: Duration,
        acquisition: impl Future<Output = Result<Option<T>, LockError>>,
    ) -> Result<Option<T>, LockError> {
        let span = tracing::debug_span!(
            "lock.acquire",
            key,
            lock = %self,
            kind = self.kind,
            waited_ms = tracing::field::Empty,
            acquired = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = acquisition.instrument(span.clone()).await;
        self.acquisition(&result, !wait.is_zero());
        let waited = started.elapsed();
        span.record("waited_ms", waited.as_millis());
        span.record("acquired", matches!(result, Ok(Some(_))));
        if matches!(result, Ok(Some(_))) {
            self.waited(waited);
        }
        result
    }

    /// Counts one acquisition that ended with `result`: `Ok(Some(_))` held,
    /// `Ok(None)` busy or timed out (`waited` says which), `Busy` busy.
    fn acquisition<T>(&self, result: &Result<Option<T>, LockError>, waited: bool) {
        let outcome = match result {
            Ok(Some(_)) => "ok",
            Ok(None) if waited => "timeout",
            Ok(None) => "busy",
            Err(LockError::Timeout { .. }) => "timeout",
            Err(LockError::Busy { .. }) => "busy",
            Err(_) => "error",
        };
        metrics::counter!(ACQUISITIONS, "lock" => self.value(), "kind" => self.kind, "outcome" => outcome).increment(1);
    }

    /// Records how long an acquisition waited for its lock.
    fn waited(&self, wait: Duration) {
        metrics::histogram!(WAIT_SECONDS, "lock" => self.value(), "kind" => self.kind)
            .record(wait.as_secs_f64());
    }

    /// Records a hold that ended after `held`, lost or not.
    pub(crate) fn held(&self, held: Duration, lost: bool) {
        metrics::histogram!(HOLD_SECONDS, "lock" => self.value(), "kind" => self.kind)
            .record(held.as_secs_f64());
        if lost {
            metrics::counter!(LEASES_LOST, "lock" => self.value(), "kind" => self.kind)
                .increment(1);
        }
    }

    /// Counts `count` renewals of one outcome: `ok`, `failed` (will be
    /// retried) or `refused`.
    pub(crate) fn renewals(&self, outcome: &'static str, count: u64) {
        metrics::counter!(RENEWALS, "lock" => self.value(), "kind" => self.kind, "outcome" => outcome).increment(count);
    }

    /// Counts a lock a release handed to a waiter of this process.
    pub(crate) fn handoff(&self) {
        metrics::counter!(HANDOFFS, "lock" => self.value(), "kind" => self.kind).increment(1);
    }

    /// Counts a task as waiting until the returned value is dropped.
    pub(crate) fn waiting(&self) -> Waiting {
        let gauge = metrics::gauge!(WAITERS, "lock" => self.value(), "kind" => self.kind);
        gauge.increment(1.0);
        Waiting(gauge)
    }
}

impl std::fmt::Display for MetricLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lock)
    }
}

/// A task counted in `leasehold_waiters` while this lives.
pub(crate) struct Waiting(metrics::Gauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
