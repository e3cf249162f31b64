//! The state of one held lock, shared by its guard, its watchdog and the
//! lock scope of the body running under it.

pub(crate) mod body;
pub(crate) mod guard;
pub(crate) mod scope;
pub(crate) mod seats;
pub(crate) mod shutdown;
pub(crate) mod status;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use crate::backend::step::Claim;
use crate::keys::LockKey;
use crate::lease::seats::Seat;
use crate::lease::status::{LeaseStatus, StatusCell};
use crate::lease::watchdog::Watchdog;
use crate::telemetry::MetricLabel;
use crate::token::OwnerToken;
use crate::{LockError, LockManager};

pub(crate) use crate::validity::validity;

/// One acquisition: who, what, for how long, its fencing token once asked
/// for, and how it is doing.
pub(crate) struct Lease {
    /// Its id among the manager's leases (see `shutdown`).
    id: u64,
    pub(crate) manager: LockManager,
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
    /// A lease granted by the backend for `first_lease` (its `ttl`, or a
    /// shorter grant that its first renewal extends to the ttl);
    /// `requested_at` is when the acquiring command was sent, so its
    /// [`validity`] is counted conservatively from then.
    pub(crate) fn new(
        id: u64,
        manager: LockManager,
        key: Arc<LockKey>,
        token: OwnerToken,
        (ttl, first_lease): (Duration, Duration),
        requested_at: Instant,
        label: MetricLabel,
    ) -> Self {
        let status = StatusCell::held_until(requested_at + validity(first_lease));
        let span = tracing::info_span!(
            "lock.hold",
            key = %key.user(),
            lock = %label,
            kind = label.kind(),
            fencing_token = tracing::field::Empty,
            held_ms = tracing::field::Empty,
            lost = tracing::field::Empty,
        );
        Lease {
            id,
            manager,
            key,
            token,
            ttl,
            fence: OnceCell::new(),
            status,
            watchdog: None,
            hold_until: OnceLock::new(),
            label,
            granted_at: Instant::now(),
            waited: false,
            ended: AtomicBool::new(false),
            release_claimed: AtomicBool::new(false),
            span: Mutex::new(Some(span)),
            seat: Mutex::new(None),
        }
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
        self.manager.leases().forget(self.id);
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
        let backend = self.manager.backend();
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
            let issued = self.manager.backend().fence(self.claim(ttl_ms)).await?;
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

    /// Attaches the watchdog so it stops with the lease.
    pub(crate) fn set_watchdog(&mut self, watchdog: Arc<Watchdog>) {
        self.watchdog = Some(watchdog);
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
