//! The state of one held lock, shared by its guard, its watchdog and the
//! lock scope of the body running under it, and how one starts.

pub(crate) mod body;
pub(crate) mod guard;
pub(crate) mod registry;
pub(crate) mod scope;
pub(crate) mod seats;
pub(crate) mod shutdown;
pub(crate) mod slab;
pub(crate) mod status;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use crate::backend::step::Claim;
use crate::backend::Backend;
use crate::keys::LockKey;
use crate::lease::registry::Leases;
use crate::lease::seats::Seat;
use crate::lease::status::{LeaseStatus, StatusCell};
use crate::lease::watchdog::{RenewalTimer, Watchdog, Watched};
use crate::telemetry::MetricLabel;
use crate::token::OwnerToken;
use crate::validity::validity;
use crate::{LockError, LockOptions};

/// What the leases of one manager (and its clones) share: the backend they
/// live in, the timer that renews them, the record `shutdown` releases
/// from, and the runtime the manager was built on. Each lease keeps it, so
/// it needs nothing of the manager's façade.
pub(crate) struct Leasing {
    pub(crate) backend: Arc<Backend>,
    pub(crate) renewals: Arc<RenewalTimer>,
    /// What it holds, for `shutdown`.
    pub(crate) leases: Arc<Leases<Lease>>,
    /// The Tokio runtime the manager was built on, if any: a release whose
    /// own runtime ended before it could be sent is sent from there.
    pub(crate) runtime: Option<tokio::runtime::Handle>,
}

impl Leasing {
    /// The leasing of a manager over `backend`, built on the current Tokio
    /// runtime if there is one.
    pub(crate) fn new(backend: Backend) -> Self {
        Leasing {
            backend: Arc::new(backend),
            renewals: Arc::default(),
            leases: Arc::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

/// When a lease was taken, and for how long at first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    /// When the attempt that took it was sent: the lease counts from then.
    pub(crate) sent: Instant,
    /// How long the lease lasts until its first renewal, when shorter than
    /// the options' ttl: a grant counted from a place refresh (see
    /// `release.lua` and `refresh_places.lua`).
    pub(crate) first_lease: Option<Duration>,
    /// Whether it was taken after waiting: the backend may keep a record of
    /// the grant, which the lease's release clears (see `LockKey::record`).
    pub(crate) waited: bool,
}

/// One acquisition: who, what, for how long, its fencing token once asked
/// for, and how it is doing.
pub(crate) struct Lease {
    /// Its id among the manager's leases (see `shutdown`).
    id: u64,
    /// What it shares with the other leases of its manager.
    pub(crate) leasing: Arc<Leasing>,
    pub(crate) key: Arc<LockKey>,
    pub(crate) token: OwnerToken,
    ttl: Duration,
    /// Issued by the backend on first request, then kept.
    fence: OnceCell<u64>,
    pub(crate) status: StatusCell,
    watchdog: Option<Arc<Watchdog>>,
    /// Until when a release keeps the lock (`LockOptions::hold_at_least`).
    hold_until: OnceLock<Instant>,
    /// The `lock` and `kind` labels of this lease's metrics.
    pub(crate) label: MetricLabel,
    /// When the lock was granted (its answer arrived).
    granted_at: Instant,
    /// Whether it was granted after a wait: its release then clears the
    /// backend's record of the grant (see `LockKey::record`).
    pub(crate) waited: bool,
    /// Whether the hold has ended (released or its guard dropped).
    ended: AtomicBool,
    /// Whether its release was started, by its guard or by `shutdown`.
    release_claimed: AtomicBool,
    /// The `lock.hold` span, open from the grant to the end of the hold.
    span: Mutex<Option<tracing::Span>>,
    /// Its key's seat in this process, given up when the hold ends.
    seat: Mutex<Option<Seat>>,
}

impl Lease {
    /// Starts the lease on `key` (a lock or a semaphore's permit) `taken`
    /// by an attempt: watched by the manager's renewal timer (renewed every
    /// `ttl / 3` when the options renew, reported lost otherwise when its
    /// validity ends), recorded for `shutdown`, counted in the metrics under
    /// `label`. Its [`validity`] counts conservatively from when the
    /// acquiring command was sent, for its first grant: the ttl, or a
    /// shorter grant that its first renewal extends to the ttl.
    pub(crate) fn start(
        leasing: &Arc<Leasing>,
        key: LockKey,
        token: OwnerToken,
        options: &LockOptions,
        taken: Taken,
        label: MetricLabel,
    ) -> Arc<Lease> {
        let key = Arc::new(key);
        let id = leasing.leases.next_id();
        let first_lease = taken.first_lease.unwrap_or(options.ttl).min(options.ttl);
        let status = StatusCell::held_until(taken.sent + validity(first_lease));
        let watchdog = leasing.renewals.watch(
            Arc::clone(&leasing.backend),
            Watched {
                key: Arc::clone(&key),
                token: token.clone(),
                ttl: options.ttl,
                renew: options.renew,
                status: status.clone(),
                sent: taken.sent,
                first_lease,
                label: label.clone(),
            },
        );
        let span = tracing::info_span!(
            "lock.hold",
            key = %key.user(),
            lock = %label,
            kind = label.kind(),
            fencing_token = tracing::field::Empty,
            held_ms = tracing::field::Empty,
            lost = tracing::field::Empty,
        );
        let hold_until = OnceLock::new();
        if let Some(hold) = options.hold_at_least {
            let _ = hold_until.set(Instant::now() + hold);
        }
        let lease = Arc::new(Lease {
            id,
            leasing: Arc::clone(leasing),
            key,
            token,
            ttl: options.ttl,
            fence: OnceCell::new(),
            status,
            watchdog: Some(watchdog),
            hold_until,
            label,
            granted_at: Instant::now(),
            waited: taken.waited,
            ended: AtomicBool::new(false),
            release_claimed: AtomicBool::new(false),
            span: Mutex::new(Some(span)),
            seat: Mutex::new(None),
        });
        leasing.leases.record(id, &lease);
        lease
    }

    /// Keeps `seat` of this lease's key in this process until the hold
    /// ends; it is free for another task of this manager once the lease is
    /// lost.
    pub(crate) fn sit(&self, seat: Seat) {
        seat.set_lease(self.status.clone());
        *self.seat.lock().unwrap_or_else(PoisonError::into_inner) = Some(seat);
    }

    /// This lease as a backend step's claim, for a lease of `ttl_ms`.
    pub(crate) fn claim(&self, ttl_ms: u64) -> Claim<'_> {
        Claim {
            key: &self.key,
            token: &self.token,
            ttl_ms,
        }
    }

    /// The `lock.hold` span while the hold lasts: the body runs in it.
    pub(crate) fn span(&self) -> tracing::Span {
        self.span
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(tracing::Span::none)
    }

    /// Ends the hold, once: records how long it lasted and whether the lease
    /// was lost (metrics, and the `lock.hold` span, which closes).
    pub(crate) fn end_hold(&self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.leasing.leases.forget(self.id);
        drop(
            self.seat
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let held = self.granted_at.elapsed();
        let lost = self.is_lost();
        self.label.held(held, lost);
        let span = self
            .span
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(span) = span {
            span.record("held_ms", held.as_millis());
            span.record("lost", lost);
            if let Some(fence) = self.issued_fence() {
                span.record("fencing_token", fence);
            }
        }
    }

    /// Whether the caller is the one to release this lease: `true` once,
    /// for its guard or for `shutdown`, whichever comes first.
    pub(crate) fn claim_release(&self) -> bool {
        !self.release_claimed.swap(true, Ordering::AcqRel)
    }

    /// Keeps the lock until `until` even if released sooner (see
    /// `LockOptions::hold_at_least`). Set once: later calls change nothing.
    pub(crate) fn hold_until(&self, until: Instant) {
        // A second hold is ignored by design: the first one set it.
        let _ = self.hold_until.set(until);
    }

    /// How much longer a release must keep the lock: the time left until
    /// `hold_until`, if at least a millisecond is.
    pub(crate) fn hold_left(&self) -> Option<Duration> {
        self.hold_until
            .get()
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| *left >= Duration::from_millis(1))
    }

    /// Ends the lock on the server: deletes it, or, within its
    /// `hold_at_least`, sets its TTL to the time left (compare-and-`PEXPIRE`,
    /// noted as released in the lock's record). Whether it was still ours.
    pub(crate) async fn end(&self) -> Result<bool, LockError> {
        let backend = &self.leasing.backend;
        match self.hold_left() {
            Some(left) => {
                let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
                let kept = backend.hold_down(self.claim(left_ms)).await?;
                if kept {
                    tracing::debug!(key = %self.key.user(), ?left, "lock kept for the rest of its hold_at_least");
                }
                Ok(kept)
            }
            None => backend.release(&self.key, &self.token, self.waited).await,
        }
    }

    /// The fencing token of this lease: issued by the backend on the first
    /// call (one round trip; two on Redlock) while the lease is held, then the
    /// same on every call. `LeaseLost` once the lease is lost, also when a
    /// token was issued before, and when the backend finds the lock no longer
    /// ours (then the lease is marked lost). A token counts only if its issue
    /// ended within the lease's validity: until then a quorum of Redlock nodes
    /// still had our lock, so every later holder's token, issued after that,
    /// is above it (see `backend/redlock.rs`). A read lease of a read/write
    /// lock has none: `InvalidOptions`.
    pub(crate) async fn fencing_token(&self) -> Result<u64, LockError> {
        self.key.kind.carries_fence(self.key.user())?;
        let issue = || async {
            self.ensure_held()?;
            let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
            let issued = self.leasing.backend.fence(self.claim(ttl_ms)).await?;
            let Some(fence) = issued else {
                self.mark_lost();
                return Err(self.lost_error());
            };
            self.ensure_held()?;
            Ok(fence)
        };
        let fence = *self.fence.get_or_try_init(issue).await?;
        self.ensure_held()?;
        Ok(fence)
    }

    /// Keeps `fence`, issued for this lease's lock together with its
    /// acquisition and answered at `issued_at`, as the lease's fencing
    /// token, under the rule of [`fencing_token`](Self::fencing_token): only
    /// if the answer came within the lease's validity. Otherwise, or when a
    /// token is cached already, it is dropped (unused tokens are harmless).
    pub(crate) fn keep_fence(&self, fence: u64, issued_at: Instant) {
        let valid = matches!(
            self.status.get(),
            LeaseStatus::Held { valid_until } if issued_at < valid_until
        );
        if valid {
            let _ = self.fence.set(fence);
        }
    }

    /// The fencing token if one was issued already.
    pub(crate) fn issued_fence(&self) -> Option<u64> {
        self.fence.get().copied()
    }

    fn ensure_held(&self) -> Result<(), LockError> {
        if self.is_lost() {
            self.mark_lost();
            return Err(self.lost_error());
        }
        Ok(())
    }

    fn lost_error(&self) -> LockError {
        LockError::LeaseLost {
            key: self.key.user().to_owned(),
        }
    }

    /// The watchdog renewing this lease (on its own, until handed over to
    /// one that renews a set together).
    pub(crate) fn watchdog(&self) -> Option<&Arc<Watchdog>> {
        self.watchdog.as_ref()
    }

    /// Stops renewal now, also by a watchdog this lease was handed over to.
    /// Idempotent.
    pub(crate) fn stop_watchdog(&self) {
        if let Some(watchdog) = &self.watchdog {
            watchdog.stop();
        }
    }

    /// Lost once reported so, and also as soon as the lease is past its
    /// validity, even if the watchdog task has not run yet to report it.
    pub(crate) fn is_lost(&self) -> bool {
        match self.status.get() {
            LeaseStatus::Held { valid_until } => valid_until <= Instant::now(),
            LeaseStatus::Lost => true,
        }
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.status.valid_until()
    }

    /// Resolves once the lease is lost: reported so by renewal or release, or
    /// its validity reached without a renewal, whether or not the watchdog
    /// got to run (a stalled renewal cannot hold this back). Pending while the
    /// lease is held.
    pub(crate) async fn lost(&self) {
        self.status.lost().await;
    }

    /// Marks the lease lost for good: a late renewal cannot revive it.
    pub(crate) fn mark_lost(&self) {
        self.status.mark_lost();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}
