//! Keeps leases alive while their guards live, and reports the moment one is lost.
//!
//! One timer task per manager serves all of its leases: taking a lock costs a
//! map insert, not a task, and a lock released before its first renewal (most
//! of them) never touches the timer at all. A renewal that is due runs in its
//! own short task, so a slow server delays no other lease's renewal. The timer
//! task ends one second after the manager's last lease is gone.
//!
//! Renewals are sent every `ttl / 3`, counted from when the acquisition (or
//! the last successful renewal) was *sent*. A failed renewal is retried every
//! `ttl / 12`, but never past the lease's validity: once that is reached with
//! no renewal granted, whatever the failure (refused, reset, silent, slow), the
//! lease is reported lost. `Lease::lost` also wakes at the validity on its own,
//! so a stalled timer cannot delay the report either.
//!
//! The leases of one `acquire_all` are renewed together
//! ([`RenewalTimer::renew_together`]): one timer slot and one cycle for the
//! set, every key's renewal sent at the same moment and in flight together,
//! instead of one cycle per key at staggered times.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;
use tokio::time::timeout_at;

use crate::backend::{Backend, Claim};
use crate::keys::LockKey;
use crate::lease::{self, LeaseStatus};
use crate::telemetry::MetricLabel;
use crate::token::OwnerToken;

/// Shortest pause between two renewals, so a tiny TTL cannot spin.
const MIN_PERIOD: Duration = Duration::from_millis(5);

/// How long the timer task lingers with nothing to do before it ends.
const IDLE: Duration = Duration::from_secs(1);

/// The renewal timer of one manager.
#[derive(Default)]
pub(crate) struct RenewalTimer {
    schedule: Mutex<Schedule>,
    wake: Notify,
}

#[derive(Default)]
struct Schedule {
    due: BTreeMap<(Instant, u64), Arc<Watchdog>>,
    next_id: u64,
    timer_running: bool,
    timer_wakes_at: Option<Instant>,
}

/// The watchdog of one lease, or of a set of leases renewed together. Holds
/// no reference to the guards, so it never keeps a lock alive on its own.
pub(crate) struct Watchdog {
    backend: Arc<Backend>,
    ttl: Duration,
    renew: bool,
    leases: Vec<Arc<WatchedLease>>,
    timer: Weak<RenewalTimer>,
    state: Mutex<WatchState>,
}

/// One lease a watchdog keeps alive: the lock, its owner token, the status
/// to keep up to date, its metrics' label, and whether it has ended (its
/// guard released or dropped), which every watchdog renewing it heeds.
struct WatchedLease {
    key: Arc<LockKey>,
    token: OwnerToken,
    status: watch::Sender<LeaseStatus>,
    label: MetricLabel,
    ended: AtomicBool,
}

/// A lease to watch: the lock, its owner token and lease, whether to renew
/// it, the status to keep up to date, when it was acquired and its metrics'
/// label.
pub(crate) struct Watched {
    pub(crate) key: Arc<LockKey>,
    pub(crate) token: OwnerToken,
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) status: watch::Sender<LeaseStatus>,
    /// When the acquisition was sent.
    pub(crate) sent: Instant,
    pub(crate) label: MetricLabel,
}

#[derive(Default)]
struct WatchState {
    slot: Option<(Instant, u64)>,
    in_flight: Option<AbortHandle>,
    stopped: bool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RenewalTimer {
    /// Starts watching a new lease whose acquisition was sent at `sent`:
    /// renewal every `ttl / 3` when `renew`, otherwise a loss report when its
    /// fixed validity ends.
    pub(crate) fn watch(self: &Arc<Self>, backend: Arc<Backend>, lease: Watched) -> Arc<Watchdog> {
        let Watched {
            key,
            token,
            ttl,
            renew,
            status,
            sent,
            label,
        } = lease;
        let watchdog = Arc::new(Watchdog {
            backend,
            ttl,
            renew,
            leases: vec![Arc::new(WatchedLease {
                key,
                token,
                status,
                label,
                ended: AtomicBool::new(false),
            })],
            timer: Arc::downgrade(self),
            state: Mutex::new(WatchState::default()),
        });
        let first = match watchdog.leases[0].valid_until() {
            Some(_) if renew => sent + watchdog.period(),
            Some(valid_until) => valid_until,
            None => return watchdog,
        };
        self.schedule(&watchdog, first);
        watchdog
    }

    /// Renews the leases of `watchdogs` together from now on: one watchdog
    /// takes them over, with one timer slot, and sends all their renewals
    /// at once each cycle. Its first cycle is when the earliest of theirs
    /// was due (at once if one of them was renewing just then), so no lease
    /// is renewed later than it would have been. Each lease still ends with
    /// its own guard, and is reported lost on its own. `watchdogs` are this
    /// timer's, of leases with one ttl (as one `acquire_all` takes them);
    /// those without renewal and ended ones are left as they are. Returns
    /// the new watchdog, to [`stop`](Watchdog::stop) once the set is
    /// released; `None` when fewer than two leases could be joined.
    pub(crate) fn renew_together(
        self: &Arc<Self>,
        watchdogs: &[&Arc<Watchdog>],
    ) -> Option<Arc<Watchdog>> {
        let joinable: Vec<&Arc<Watchdog>> = watchdogs
            .iter()
            .copied()
            .filter(|watchdog| watchdog.renew)
            .collect();
        let first = *joinable.first()?;
        if joinable.len() < 2 {
            return None;
        }
        let mut due = None::<Instant>;
        let mut leases = Vec::new();
        for watchdog in &joinable {
            let Some(was_due) = watchdog.retire() else {
                continue;
            };
            due = Some(due.map_or(was_due, |earliest| earliest.min(was_due)));
            leases.extend(watchdog.leases.iter().cloned());
        }
        let together = Arc::new(Watchdog {
            backend: Arc::clone(&first.backend),
            ttl: first.ttl,
            renew: true,
            leases,
            timer: Arc::downgrade(self),
            state: Mutex::new(WatchState::default()),
        });
        self.schedule(&together, due.unwrap_or_else(Instant::now));
        Some(together)
    }

    fn schedule(self: &Arc<Self>, watchdog: &Arc<Watchdog>, at: Instant) {
        let (slot, wake, start_timer) = {
            let mut schedule = locked(&self.schedule);
            schedule.next_id += 1;
            let slot = (at, schedule.next_id);
            schedule.due.insert(slot, Arc::clone(watchdog));
            let start_timer = !schedule.timer_running;
            schedule.timer_running = true;
            let wake = !start_timer && schedule.timer_wakes_at.is_none_or(|wakes| at < wakes);
            (slot, wake, start_timer)
        };
        let stopped = {
            let mut state = locked(&watchdog.state);
            state.slot = Some(slot);
            state.stopped
        };
        if stopped {
            locked(&self.schedule).due.remove(&slot);
        }
        if start_timer {
            self.start_timer();
        } else if wake {
            self.wake.notify_one();
        }
    }

    fn start_timer(self: &Arc<Self>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Arc::clone(self).run_timer());
            }
            Err(_) => locked(&self.schedule).timer_running = false,
        }
    }

    /// Fires due watchdogs until nothing is left to watch for [`IDLE`].
    async fn run_timer(self: Arc<Self>) {
        let _running = TimerRunning(Arc::clone(&self));
        let mut idle_since = None;
        loop {
            let now = Instant::now();
            let (fired, wakes_at) = {
                let mut schedule = locked(&self.schedule);
                let later = schedule.due.split_off(&(now, u64::MAX));
                let fired = std::mem::replace(&mut schedule.due, later);
                let next = schedule.due.keys().next().map(|slot| slot.0);
                if next.is_none() && fired.is_empty() {
                    let since = *idle_since.get_or_insert(now);
                    if now >= since + IDLE {
                        schedule.timer_running = false;
                        return;
                    }
                } else {
                    idle_since = None;
                }
                let wakes_at = next.unwrap_or(now + IDLE);
                schedule.timer_wakes_at = Some(wakes_at);
                (fired, wakes_at)
            };
            for watchdog in fired.into_values() {
                watchdog.fire();
            }
            tokio::select! {
                () = tokio::time::sleep_until(wakes_at.into()) => {}
                () = self.wake.notified() => {}
            }
        }
    }
}

/// Marks the timer as gone when its task ends, also when its runtime shuts
/// down, so the next lease starts a new one.
struct TimerRunning(Arc<RenewalTimer>);

impl Drop for TimerRunning {
    fn drop(&mut self) {
        let mut schedule = locked(&self.0.schedule);
        schedule.timer_running = false;
        schedule.timer_wakes_at = None;
    }
}

impl Watchdog {
    fn period(&self) -> Duration {
        (self.ttl / 3).max(MIN_PERIOD)
    }

    /// Stops watching: no renewal is sent after this returns, by this
    /// watchdog or by one renewing its leases together with others; its
    /// leases have ended. Idempotent.
    pub(crate) fn stop(&self) {
        for lease in &self.leases {
            lease.ended.store(true, Ordering::SeqCst);
        }
        let slot = {
            let mut state = locked(&self.state);
            state.stopped = true;
            if let Some(in_flight) = state.in_flight.take() {
                in_flight.abort();
            }
            state.slot.take()
        };
        self.unschedule(slot);
    }

    /// Hands this watchdog's leases over to another: it schedules nothing
    /// more, and a renewal of its still in flight completes (its answer
    /// still counts) without scheduling the next. Returns when its next
    /// renewal was due (now, if one is in flight), or `None` if it was
    /// stopped already.
    fn retire(&self) -> Option<Instant> {
        let (slot, in_flight) = {
            let mut state = locked(&self.state);
            if state.stopped {
                return None;
            }
            state.stopped = true;
            (state.slot.take(), state.in_flight.take())
        };
        self.unschedule(slot);
        match slot {
            Some((due, _)) if in_flight.is_none_or(|task| task.is_finished()) => Some(due),
            _ => Some(Instant::now()),
        }
    }

    fn unschedule(&self, slot: Option<(Instant, u64)>) {
        if let (Some(slot), Some(timer)) = (slot, self.timer.upgrade()) {
            locked(&timer.schedule).due.remove(&slot);
        }
    }

    fn fire(self: Arc<Self>) {
        if !self.renew {
            for lease in &self.leases {
                if !lease.has_ended() {
                    tracing::warn!(key = %lease.key.user, "fixed lease expired while its guard was still alive");
                    lease.status.send_replace(LeaseStatus::Lost);
                }
            }
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut state = locked(&self.state);
        if state.stopped {
            return;
        }
        state.slot = None;
        state.in_flight = Some(runtime.spawn(Arc::clone(&self).renew_once()).abort_handle());
    }

    /// One renewal of every lease still held, all sent at once and bounded
    /// by the earliest validity among them; schedules the next cycle (a
    /// retry no later than that validity) or reports the losses. A lease
    /// whose renewal is unanswered when its validity ends is lost; the
    /// others are tried again at once.
    async fn renew_once(self: Arc<Self>) {
        let held: Vec<(&WatchedLease, Instant)> = self
            .leases
            .iter()
            .filter(|lease| !lease.has_ended())
            .filter_map(|lease| Some((&**lease, lease.valid_until()?)))
            .collect();
        let Some(bound) = held.iter().map(|(_, valid_until)| *valid_until).min() else {
            return;
        };
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let sent = Instant::now();
        let backend = &self.backend;
        let mut renewals: FuturesUnordered<_> = held
            .iter()
            .filter(|(_, valid_until)| *valid_until > sent)
            .map(|&(lease, valid_until)| async move {
                let claim = Claim {
                    key: &lease.key,
                    token: &lease.token,
                    ttl_ms,
                };
                let renewal = backend.renew(claim).await;
                (lease, valid_until, renewal)
            })
            .collect();
        let mut next = None::<Instant>;
        let mut earliest = |at: Instant| next = Some(next.map_or(at, |next| next.min(at)));
        while let Ok(Some((lease, valid_until, renewal))) =
            timeout_at(bound.into(), renewals.next()).await
        {
            match renewal {
                Ok(true) if lease.extend(sent + lease::validity(self.ttl)) => {
                    lease.label.renewal("ok");
                    tracing::trace!(key = %lease.key.user, "lease renewed");
                    earliest(sent + self.period());
                }
                Ok(true) => {}
                Ok(false) => {
                    lease.label.renewal("refused");
                    lease.report_lost("the lock expired or was taken over by another owner");
                }
                Err(err) => {
                    lease.label.renewal("failed");
                    tracing::debug!(key = %lease.key.user, error = %err, "renewal failed; retrying until the lease's validity ends");
                    let retry = Instant::now() + (self.period() / 4).max(MIN_PERIOD);
                    earliest(retry.min(valid_until));
                }
            }
        }
        if !renewals.is_empty() {
            earliest(Instant::now());
        }
        drop(renewals);
        for (lease, valid_until) in &held {
            if *valid_until <= Instant::now() && !lease.is_renewed_past(*valid_until) {
                lease.report_lost("no renewal was granted before the lease's validity ended");
            }
        }
        if let (Some(next), Some(timer)) = (next, self.timer.upgrade()) {
            if self.leases.iter().any(|lease| lease.is_held()) {
                timer.schedule(&self, next);
            }
        }
    }
}

impl WatchedLease {
    fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    fn valid_until(&self) -> Option<Instant> {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            LeaseStatus::Lost => None,
        }
    }

    /// Held, not ended, and not reported lost.
    fn is_held(&self) -> bool {
        !self.has_ended() && self.valid_until().is_some()
    }

    /// Whether a renewal has moved the validity past `valid_until`.
    fn is_renewed_past(&self, valid_until: Instant) -> bool {
        self.valid_until()
            .is_some_and(|now_valid| now_valid > valid_until)
    }

    /// Extends the validity to `renewed_until` unless it has ended already
    /// (a late renewal cannot revive a lost lease). Whether it was extended.
    fn extend(&self, renewed_until: Instant) -> bool {
        self.status.send_if_modified(|status| match status {
            LeaseStatus::Held { valid_until } if *valid_until > Instant::now() => {
                *valid_until = renewed_until;
                true
            }
            _ => false,
        })
    }

    fn report_lost(&self, why: &str) {
        if !self.has_ended() {
            tracing::warn!(key = %self.key.user, "lease lost: {why}");
        }
        self.status.send_replace(LeaseStatus::Lost);
    }
}
