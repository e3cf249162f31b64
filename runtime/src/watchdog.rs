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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;
use tokio::time::timeout_at;

use crate::backend::{Backend, LockKey};
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

/// The watchdog of one lease. Holds no reference to the guard, so it never
/// keeps a lock alive on its own.
pub(crate) struct Watchdog {
    backend: Arc<Backend>,
    key: Arc<LockKey>,
    token: OwnerToken,
    ttl: Duration,
    renew: bool,
    status: watch::Sender<LeaseStatus>,
    label: MetricLabel,
    timer: Weak<RenewalTimer>,
    state: Mutex<WatchState>,
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
    #[allow(clippy::too_many_arguments)]
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
            key,
            token,
            ttl,
            renew,
            status,
            label,
            timer: Arc::downgrade(self),
            state: Mutex::new(WatchState::default()),
        });
        let first = match watchdog.valid_until() {
            Some(_) if renew => sent + watchdog.period(),
            Some(valid_until) => valid_until,
            None => return watchdog,
        };
        self.schedule(&watchdog, first);
        watchdog
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

    fn valid_until(&self) -> Option<Instant> {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            LeaseStatus::Lost => None,
        }
    }

    /// Stops watching: no renewal is sent after this returns. Idempotent.
    pub(crate) fn stop(&self) {
        let slot = {
            let mut state = locked(&self.state);
            state.stopped = true;
            if let Some(in_flight) = state.in_flight.take() {
                in_flight.abort();
            }
            state.slot.take()
        };
        if let (Some(slot), Some(timer)) = (slot, self.timer.upgrade()) {
            locked(&timer.schedule).due.remove(&slot);
        }
    }

    fn fire(self: Arc<Self>) {
        if !self.renew {
            if !locked(&self.state).stopped {
                tracing::warn!(key = %self.key.user, "fixed lease expired while its guard was still alive");
                self.status.send_replace(LeaseStatus::Lost);
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

    /// One renewal, bounded by the current validity; schedules the next one
    /// (a retry no later than the validity) or reports the loss.
    async fn renew_once(self: Arc<Self>) {
        let Some(valid_until) = self.valid_until() else {
            return;
        };
        if Instant::now() >= valid_until {
            self.report_lost("no renewal was granted before the lease's validity ended");
            return;
        }
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let sent = Instant::now();
        let renewal = self.backend.renew(&self.key, &self.token, ttl_ms);
        let next = match timeout_at(valid_until.into(), renewal).await {
            Ok(Ok(true)) => {
                let renewed_until = sent + lease::validity(self.ttl);
                let extended = self.status.send_if_modified(|status| match status {
                    LeaseStatus::Held { valid_until } if *valid_until > Instant::now() => {
                        *valid_until = renewed_until;
                        true
                    }
                    _ => false,
                });
                if !extended {
                    return;
                }
                self.label.renewal("ok");
                tracing::trace!(key = %self.key.user, "lease renewed");
                sent + self.period()
            }
            Ok(Ok(false)) => {
                self.label.renewal("refused");
                self.report_lost("the lock expired or was taken over by another owner");
                return;
            }
            Ok(Err(err)) => {
                self.label.renewal("failed");
                tracing::debug!(key = %self.key.user, error = %err, "renewal failed; retrying until the lease's validity ends");
                let retry = Instant::now() + (self.period() / 4).max(MIN_PERIOD);
                retry.min(valid_until)
            }
            Err(_) => {
                self.report_lost("no renewal was granted before the lease's validity ended");
                return;
            }
        };
        if let Some(timer) = self.timer.upgrade() {
            timer.schedule(&self, next);
        }
    }

    fn report_lost(&self, why: &str) {
        if !locked(&self.state).stopped {
            tracing::warn!(key = %self.key.user, "lease lost: {why}");
        }
        self.status.send_replace(LeaseStatus::Lost);
    }
}
