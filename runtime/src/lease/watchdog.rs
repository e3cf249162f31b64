//! Keeps leases alive while their guards live, and reports the moment one is lost.
//!
//! One timer task per manager serves all of its leases: taking a lock costs
//! an entry in the timer's list of first cycles (a [`Slab`]), not a task nor
//! a slot in its sorted schedule. The timer takes the leases still held
//! into its schedule when it wakes, never later than a first renewal is due
//! (a lease due sooner wakes it), so a lock released before then (most of
//! them) costs an insertion and a removal by index. The timer task ends one
//! second after the manager's last lease is gone.
//!
//! Renewals are sent every `ttl / 3`, counted from when the acquisition (or
//! the last successful renewal) was *sent*. A failed renewal is retried every
//! `ttl / 12`, but never past the lease's validity: once that is reached with
//! no renewal granted, whatever the failure (refused, reset, silent, slow), the
//! lease is reported lost. `Lease::lost` also wakes at the validity on its own,
//! so a stalled timer cannot delay the report either.
//!
//! Renewals go out in batches (see `backend/batch`): every renewal due at one
//! moment is sent by one short task, with one script call per batch of up to
//! 200 leases, rather than each in a task and a round trip of its own; the
//! answer says for each lease whether it is still ours, and each lease is
//! then kept, retried or reported lost by the rules above, on its own. Each
//! batch waits for its answer until the earliest validity among its leases
//! at most. So that renewals fall due together, a lease's renewal time is
//! moved back to the start of its bucket: the period cut into equal
//! buckets, about one full batch of the timer's leases each, never under
//! [`BUCKET`] and never more than a sixteenth of the period (a renewal is
//! then at most that early, and only once: the period is a whole number of
//! buckets, so later cycles keep their place). A renewal due within half a
//! period (a short first grant's, a retry) is gathered within its own wait
//! instead, at most a sixteenth of it early. For a ttl under 120 ms
//! nothing is gathered. So that leases taken in a burst are not
//! renewed in one burst forever after, the first renewal of each comes at a
//! point spread evenly over the last quarter before `ttl / 3`. No renewal
//! is ever sent later than `ttl / 3` after the previous one.
//!
//! The leases of one `acquire_all` are renewed together
//! ([`RenewalTimer::renew_together`]): one timer slot and one cycle for the
//! set, every key's renewal sent at the same moment,
//! instead of one cycle per key at staggered times.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio::time::timeout_at;

use crate::backend::batch::MOST_PER_CALL;
use crate::backend::step::{Claim, Renewal};
use crate::backend::Backend;
use crate::keys::LockKey;
use crate::lease::slab::Slab;
use crate::lease::status::StatusCell;
use crate::telemetry::{MetricLabel, RenewalOutcome};
use crate::token::OwnerToken;
use crate::validity::validity;
use crate::LockError;

/// Shortest pause between two renewals, so a tiny TTL cannot spin.
const MIN_PERIOD: Duration = Duration::from_millis(5);

/// How long the timer task lingers with nothing to do before it ends.
const IDLE: Duration = Duration::from_secs(1);

/// The narrowest bucket renewals gather in (see [`gathered`]); a period
/// shorter than four of them is not gathered.
const BUCKET: Duration = Duration::from_millis(10);

/// The fewest buckets a period is cut into: a gathered renewal is at most a
/// sixteenth of a period early.
const FEWEST_BUCKETS: u128 = 16;

/// Where the buckets start: at this instant and every bucket after it.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Why a lease is lost when its validity ended without a renewal.
const NOT_RENEWED_IN_TIME: &str = "no renewal was granted before the lease's validity ended";

/// The renewal timer of one manager.
#[derive(Default)]
pub(crate) struct RenewalTimer {
    schedule: Mutex<Schedule>,
    wake: Notify,
    /// How many leases were watched, which spreads their first renewals.
    watched: AtomicU64,
}

#[derive(Default)]
struct Schedule {
    /// The watchdogs waiting for their next cycle, by when it is due: a
    /// bucket's instant (see [`gathered`]) for a steady cycle, so that a
    /// cycle joins a bucket's list instead of a tree of every lease.
    due: BTreeMap<Instant, Vec<Arc<Watchdog>>>,
    /// How many watchdogs wait in `due`.
    waiting: usize,
    /// Watchdogs not in `due` yet, with when their first cycle is due: the
    /// timer takes them in when it next wakes.
    first: Slab<(Instant, Arc<Watchdog>)>,
    timer_running: bool,
    timer_wakes_at: Option<Instant>,
}

/// The watchdog of one lease, or of a set of leases renewed together. Holds
/// no reference to the guards, so it never keeps a lock alive on its own.
pub(crate) struct Watchdog {
    backend: Arc<Backend>,
    ttl: Duration,
    renew: bool,
    /// Its own lease, kept inline (one allocation a watchdog); `None` for
    /// one that renews the leases of others together.
    lease: Option<WatchedLease>,
    /// The watchdogs whose leases it renews together, retired (see
    /// [`RenewalTimer::renew_together`]); empty for a watchdog of one lease.
    joined: Vec<Arc<Watchdog>>,
    timer: Weak<RenewalTimer>,
    state: Mutex<WatchState>,
}

/// One lease a watchdog keeps alive: the lock, its owner token, the status
/// to keep up to date, its metrics' label, and whether it has ended (its
/// guard released or dropped), which every watchdog renewing it heeds.
struct WatchedLease {
    key: Arc<LockKey>,
    token: OwnerToken,
    status: StatusCell,
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
    pub(crate) status: StatusCell,
    /// When the acquisition was sent.
    pub(crate) sent: Instant,
    /// How long the lease lasts from `sent` until its first renewal: the
    /// ttl, or a shorter grant (see `release.lua`), renewed a third of the
    /// way through.
    pub(crate) first_lease: Duration,
    pub(crate) label: MetricLabel,
}

#[derive(Default)]
struct WatchState {
    slot: Slot,
    /// Whether a batch is renewing this watchdog's leases now.
    in_flight: bool,
    stopped: bool,
}

/// Where a watchdog's next cycle waits in its timer. Put in the schedule or
/// the first cycles, and taken out, only with the timer's schedule locked
/// (then the watchdog's state), so that a slot always names its entry.
#[derive(Default, Clone, Copy)]
enum Slot {
    /// Nowhere: stopped, renewing, or its lease lost at the start.
    #[default]
    None,
    /// In the timer's first cycles, at this index, due then.
    First(usize, Instant),
    /// In the timer's schedule, among those due at this instant.
    Due(Instant),
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
            first_lease,
            label,
        } = lease;
        let valid_until = status.valid_until();
        let watchdog = Arc::new(Watchdog {
            backend,
            ttl,
            renew,
            lease: Some(WatchedLease {
                key,
                token,
                status,
                label,
                ended: AtomicBool::new(false),
            }),
            joined: Vec::new(),
            timer: Arc::downgrade(self),
            state: Mutex::new(WatchState::default()),
        });
        let first = match valid_until {
            Some(_) if renew && first_lease < ttl => sent + (first_lease / 3).max(MIN_PERIOD),
            Some(_) if renew => {
                let nth = self.watched.fetch_add(1, Ordering::Relaxed);
                sent + watchdog.period() - first_renewal_spread(nth, watchdog.period())
            }
            Some(valid_until) => valid_until,
            None => return watchdog,
        };
        self.enlist(&watchdog, first);
        watchdog
    }

    /// Puts `watchdog`'s first cycle, due `at`, among the first cycles the
    /// timer takes into its schedule when it wakes, and wakes it earlier if
    /// `at` comes first.
    fn enlist(self: &Arc<Self>, watchdog: &Arc<Watchdog>, at: Instant) {
        let (wake, start_timer) = {
            let mut schedule = locked(&self.schedule);
            let index = schedule.first.insert((at, Arc::clone(watchdog)));
            locked(&watchdog.state).slot = Slot::First(index, at);
            let start_timer = !schedule.timer_running;
            schedule.timer_running = true;
            let wake = !start_timer && schedule.timer_wakes_at.is_none_or(|wakes| at < wakes);
            (wake, start_timer)
        };
        if start_timer {
            self.start_timer();
        } else if wake {
            self.wake.notify_one();
        }
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
        let mut joined = Vec::new();
        for watchdog in &joinable {
            let Some(was_due) = watchdog.retire() else {
                continue;
            };
            due = Some(due.map_or(was_due, |earliest| earliest.min(was_due)));
            joined.push(Arc::clone(watchdog));
            joined.extend(watchdog.joined.iter().cloned());
        }
        let together = Arc::new(Watchdog {
            backend: Arc::clone(&first.backend),
            ttl: first.ttl,
            renew: true,
            lease: None,
            joined,
            timer: Arc::downgrade(self),
            state: Mutex::new(WatchState::default()),
        });
        self.schedule(&together, due.unwrap_or_else(Instant::now));
        Some(together)
    }

    fn schedule(self: &Arc<Self>, watchdog: &Arc<Watchdog>, at: Instant) {
        self.schedule_all(&[(watchdog, at)]);
    }

    /// Schedules each watchdog's next cycle at its instant, with one lock
    /// of the timer's schedule for all of them: a batch's answer schedules
    /// up to a few hundred.
    fn schedule_all(self: &Arc<Self>, due: &[(&Arc<Watchdog>, Instant)]) {
        let (wake, start_timer) = {
            let mut schedule = locked(&self.schedule);
            let mut earliest = None::<Instant>;
            let now = Instant::now();
            for &(watchdog, at) in due {
                let mut state = locked(&watchdog.state);
                if state.stopped {
                    continue;
                }
                let slot = schedule.insert(watchdog, at, now);
                state.slot = Slot::Due(slot);
                earliest = Some(earliest.map_or(slot, |earliest| earliest.min(slot)));
            }
            let start_timer = !schedule.timer_running;
            schedule.timer_running = true;
            let wake = !start_timer
                && earliest
                    .is_some_and(|at| schedule.timer_wakes_at.is_none_or(|wakes| at < wakes));
            (wake, start_timer)
        };
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
                schedule.take_in_first_cycles(now);
                let later = schedule.due.split_off(&(now + Duration::from_nanos(1)));
                let fired = std::mem::replace(&mut schedule.due, later);
                schedule.waiting -= fired.values().map(Vec::len).sum::<usize>();
                let next = schedule.due.keys().next().copied();
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
            fire(fired.into_values().flatten());
            tokio::select! {
                () = tokio::time::sleep_until(wakes_at.into()) => {}
                () = self.wake.notified() => {}
            }
        }
    }
}

impl Schedule {
    /// Schedules `watchdog`'s next cycle at `at`, gathered with others due
    /// about then (see [`gathered`]); when it is due now.
    fn insert(&mut self, watchdog: &Arc<Watchdog>, at: Instant, now: Instant) -> Instant {
        let span = gathering_span(at.saturating_duration_since(now), watchdog.period());
        let at = gathered(at, span, self.waiting);
        self.due.entry(at).or_default().push(Arc::clone(watchdog));
        self.waiting += 1;
        at
    }

    /// Moves every first cycle into the schedule (a stopped watchdog has
    /// taken its own out already).
    fn take_in_first_cycles(&mut self, now: Instant) {
        let first: Vec<(Instant, Arc<Watchdog>)> = self.first.drain().collect();
        for (at, watchdog) in first {
            let slot = self.insert(&watchdog, at, now);
            locked(&watchdog.state).slot = Slot::Due(slot);
        }
    }

    /// Takes `watchdog`, at `slot`, out of the schedule or the first
    /// cycles; what it held.
    fn remove(&mut self, slot: Slot, watchdog: &Watchdog) -> Option<Arc<Watchdog>> {
        match slot {
            Slot::None => None,
            Slot::First(index, _) => self.first.remove(index).map(|(_, watchdog)| watchdog),
            Slot::Due(at) => {
                let bucket = self.due.get_mut(&at)?;
                let index = bucket
                    .iter()
                    .position(|due| std::ptr::eq(Arc::as_ptr(due), watchdog))?;
                let removed = bucket.swap_remove(index);
                if bucket.is_empty() {
                    self.due.remove(&at);
                }
                self.waiting -= 1;
                Some(removed)
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

/// Fires the watchdogs that are due: reports the fixed leases whose
/// validity ended as lost, and renews the others' leases in one short task,
/// in batches (one task per backend, which is the manager's one).
fn fire(due: impl Iterator<Item = Arc<Watchdog>>) {
    let mut renewing: Vec<(Arc<Backend>, Vec<Arc<Watchdog>>)> = Vec::new();
    for watchdog in due {
        if !watchdog.renew {
            watchdog.report_expired();
        } else if watchdog.start_renewal() {
            match renewing
                .iter_mut()
                .find(|(backend, _)| Arc::ptr_eq(backend, &watchdog.backend))
            {
                Some((_, watchdogs)) => watchdogs.push(watchdog),
                None => renewing.push((Arc::clone(&watchdog.backend), vec![watchdog])),
            }
        }
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    for (backend, watchdogs) in renewing {
        runtime.spawn(renew_due(backend, watchdogs));
    }
}

/// One lease a batch renews: whose it is (an index among the batch's
/// watchdogs), and its validity when the batch was sent.
struct Due<'a> {
    watchdog: usize,
    lease: &'a WatchedLease,
    valid_until: Instant,
}

/// What became of one lease's renewal.
enum Answer<'a> {
    /// The batch's answer for it.
    Told(Renewal),
    /// The batch failed.
    Failed(&'a LockError),
    /// The batch was not answered before the earliest validity among its leases.
    Unanswered,
}

/// Where one watchdog's cycle stands in a batch: its leases not yet
/// answered, and when it is due next.
#[derive(Default)]
struct Cycle {
    pending: usize,
    next: Option<Instant>,
}

/// Renews every lease still held of `watchdogs` (due now, on `backend`) in
/// batches sent at once, each waiting for its answer until the earliest
/// validity among its leases at most. Each lease is kept, retried or lost
/// by its own answer; each watchdog's next cycle is scheduled as soon as
/// all its leases are answered (a retry no later than its validity).
async fn renew_due(backend: Arc<Backend>, watchdogs: Vec<Arc<Watchdog>>) {
    let sent = Instant::now();
    let mut cycles: Vec<Cycle> = watchdogs.iter().map(|_| Cycle::default()).collect();
    let mut due = Vec::new();
    for (index, watchdog) in watchdogs.iter().enumerate() {
        for lease in watchdog.leases().filter(|lease| !lease.has_ended()) {
            match lease.valid_until() {
                Some(valid_until) if valid_until > sent => {
                    due.push(Due {
                        watchdog: index,
                        lease,
                        valid_until,
                    });
                    cycles[index].pending += 1;
                }
                Some(_) => lease.report_lost(NOT_RENEWED_IN_TIME),
                None => {}
            }
        }
    }
    for (watchdog, cycle) in watchdogs.iter().zip(&cycles) {
        if cycle.pending == 0 {
            watchdog.finish();
        }
    }
    due.sort_unstable_by_key(|lease| lease.valid_until);
    let claims: Vec<Claim<'_>> = due
        .iter()
        .map(|lease| Claim {
            key: &lease.lease.key,
            token: &lease.lease.token,
            ttl_ms: watchdogs[lease.watchdog].ttl_ms(),
        })
        .collect();
    let (backend, due, claims) = (&*backend, &due, &claims);
    let mut replies: FuturesUnordered<_> = backend
        .renewal_batches(claims)
        .into_iter()
        .map(|batch| async move {
            let bound = batch.iter().map(|&index| due[index].valid_until).min();
            let sent_claims: Vec<Claim<'_>> = batch.iter().map(|&index| claims[index]).collect();
            let reply = match bound {
                Some(bound) => timeout_at(bound.into(), backend.renew_batch(&sent_claims))
                    .await
                    .ok(),
                None => None,
            };
            (batch, reply)
        })
        .collect();
    while let Some((batch, reply)) = replies.next().await {
        let answers: Vec<Answer<'_>> = match &reply {
            Some(Ok(renewals)) => renewals.iter().map(|&told| Answer::Told(told)).collect(),
            Some(Err(err)) => batch.iter().map(|_| Answer::Failed(err)).collect(),
            None => batch.iter().map(|_| Answer::Unanswered).collect(),
        };
        let mut next_cycles = Vec::new();
        let mut tally = Tally::default();
        for (&index, answer) in batch.iter().zip(answers) {
            let Due {
                watchdog,
                lease,
                valid_until,
            } = due[index];
            let (next, outcome) = watchdogs[watchdog].settle(lease, valid_until, sent, answer);
            if let Some(outcome) = outcome {
                tally.count(&lease.label, outcome);
            }
            let cycle = &mut cycles[watchdog];
            cycle.next = match (cycle.next, next) {
                (Some(earlier), Some(next)) => Some(earlier.min(next)),
                (earlier, next) => earlier.or(next),
            };
            cycle.pending -= 1;
            if cycle.pending == 0 && watchdogs[watchdog].finish() {
                next_cycles.extend(cycle.next.map(|at| (&watchdogs[watchdog], at)));
            }
        }
        tally.flush();
        let timer = next_cycles
            .first()
            .and_then(|(first, _)| first.timer.upgrade());
        if let Some(timer) = timer {
            timer.schedule_all(&next_cycles);
        }
    }
}

/// Renewal outcomes counted in runs of one label and one outcome: the
/// leases of a batch mostly share both, so a batch costs the metrics a
/// few updates rather than one per lease. Runs are told apart by pointer
/// (see [`MetricLabel::same`]): at worst a run ends early, and the totals
/// are the same.
#[derive(Default)]
struct Tally<'a> {
    run: Option<(&'a MetricLabel, RenewalOutcome, u64)>,
}

impl<'a> Tally<'a> {
    fn count(&mut self, label: &'a MetricLabel, outcome: RenewalOutcome) {
        match &mut self.run {
            Some((run_label, run_outcome, count))
                if *run_outcome == outcome && run_label.same(label) =>
            {
                *count += 1;
            }
            _ => {
                self.flush();
                self.run = Some((label, outcome, 1));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((label, outcome, count)) = self.run.take() {
            label.renewals(outcome, count);
        }
    }
}

/// How much earlier than one period after its acquisition the `nth` lease
/// watched is first renewed: spread evenly over the last quarter of the
/// period (a Weyl sequence), so that leases taken in a burst are renewed
/// over a quarter of a period, not all at one instant.
fn first_renewal_spread(nth: u64, period: Duration) -> Duration {
    const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
    let quarter = period.as_nanos() / 4;
    let spread = (u128::from(nth.wrapping_mul(GOLDEN)) * quarter) >> 64;
    Duration::from_nanos(u64::try_from(spread).unwrap_or(0))
}

/// `at`, or the start of its bucket when `period` is at least four
/// [`BUCKET`]s long: renewals due within one bucket fire together and go
/// out in one batch. Never later than `at`, and at most a bucket earlier
/// (see [`buckets_per_period`]).
fn gathered(at: Instant, period: Duration, scheduled: usize) -> Instant {
    let buckets = buckets_per_period(period, scheduled);
    if buckets == 0 {
        return at;
    }
    let Some(since) = at.checked_duration_since(*EPOCH) else {
        return at;
    };
    let width = period.as_nanos() / buckets;
    let into_bucket = since.as_nanos() % width;
    at - Duration::from_nanos(u64::try_from(into_bucket).unwrap_or(0))
}

/// The span whose buckets gather a renewal due in `lead`: the watchdog's
/// `period` for a renewal due about a period from now (a lease's steady
/// cycle, whose buckets then keep their place), else `lead` itself (a short
/// first grant's renewal, a retry), so that no renewal is gathered earlier
/// than a sixteenth of its own wait.
fn gathering_span(lead: Duration, period: Duration) -> Duration {
    if lead >= period / 2 {
        period
    } else {
        lead
    }
}

/// How many buckets one `period` is cut into while `scheduled` cycles wait
/// in the timer: enough that a bucket of renewals spread over the period
/// expects about one full batch ([`MOST_PER_CALL`]), and so no Redis call
/// burst is longer than it must be, but at least [`FEWEST_BUCKETS`], and
/// none narrower than [`BUCKET`]. At 1 000 leases renewed every second that
/// is 16 buckets of 62.5 ms (full batches, where 10 ms buckets sent about 40
/// leases a call), at 100 000 it is 100 of 10 ms. 0 for a period under four
/// [`BUCKET`]s: not gathered.
fn buckets_per_period(period: Duration, scheduled: usize) -> u128 {
    let narrowest = period.as_nanos() / BUCKET.as_nanos();
    if narrowest < 4 {
        return 0;
    }
    let full_batches = u128::try_from(scheduled.div_ceil(MOST_PER_CALL)).unwrap_or(u128::MAX);
    full_batches.max(FEWEST_BUCKETS).min(narrowest)
}

impl Watchdog {
    /// The leases it watches: its own, or those of the watchdogs it joined.
    fn leases(&self) -> impl Iterator<Item = &WatchedLease> {
        self.lease.iter().chain(
            self.joined
                .iter()
                .filter_map(|joined| joined.lease.as_ref()),
        )
    }

    fn period(&self) -> Duration {
        (self.ttl / 3).max(MIN_PERIOD)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// Stops watching: no batch started after this returns renews its
    /// leases, nor those of a watchdog renewing them together with others;
    /// its leases have ended. A batch already sent may still extend one of
    /// them once (only while it is still ours). Idempotent.
    pub(crate) fn stop(&self) {
        for lease in self.leases() {
            lease.ended.store(true, Ordering::SeqCst);
        }
        self.leave_schedule();
    }

    /// Hands this watchdog's leases over to another: it schedules nothing
    /// more, and a renewal of its still in flight completes (its answer
    /// still counts) without scheduling the next. Returns when its next
    /// renewal was due (now, if one is in flight), or `None` if it was
    /// stopped already.
    fn retire(&self) -> Option<Instant> {
        let (slot, in_flight) = self.leave_schedule()?;
        match slot {
            Slot::First(_, due) | Slot::Due(due) if !in_flight => Some(due),
            _ => Some(Instant::now()),
        }
    }

    /// Marks this watchdog stopped and takes its next cycle out of its
    /// timer: the slot it had and whether a renewal was in flight, or
    /// `None` if it was stopped already. The timer's schedule is locked
    /// first, as when the timer moves a slot.
    fn leave_schedule(&self) -> Option<(Slot, bool)> {
        let timer = self.timer.upgrade();
        let mut schedule = timer.as_ref().map(|timer| locked(&timer.schedule));
        let (slot, in_flight) = {
            let mut state = locked(&self.state);
            if state.stopped {
                return None;
            }
            state.stopped = true;
            (std::mem::take(&mut state.slot), state.in_flight)
        };
        let removed = schedule
            .as_mut()
            .and_then(|schedule| schedule.remove(slot, self));
        drop(schedule);
        drop(removed);
        Some((slot, in_flight))
    }

    /// Reports the leases of a watchdog without renewal lost, when their
    /// fixed validity has ended, unless they have ended first.
    fn report_expired(&self) {
        for lease in self.leases() {
            if !lease.has_ended() {
                tracing::warn!(key = %lease.key.user(), "fixed lease expired while its guard was still alive");
                lease.status.mark_lost();
            }
        }
    }

    /// Marks a renewal of this watchdog's leases as started: whether it
    /// may start (it has not been stopped).
    fn start_renewal(&self) -> bool {
        let mut state = locked(&self.state);
        if state.stopped {
            return false;
        }
        state.slot = Slot::None;
        state.in_flight = true;
        true
    }

    /// Ends the renewal in flight: whether a lease is still held, so that
    /// its next cycle is to be scheduled.
    fn finish(&self) -> bool {
        locked(&self.state).in_flight = false;
        self.leases().any(WatchedLease::is_held)
    }

    /// Applies the `answer` to the renewal of `lease` (valid until
    /// `valid_until` when it was `sent`): extends it, reports it lost, or
    /// says when to retry (never past its validity; at once when its batch
    /// went unanswered). Also reports it lost when its validity has ended
    /// with no renewal granted. Returns when it is due next, and the
    /// renewal's outcome for the metrics (none when nothing was learned, or
    /// when it was counted at once: a refusal).
    fn settle(
        &self,
        lease: &WatchedLease,
        valid_until: Instant,
        sent: Instant,
        answer: Answer<'_>,
    ) -> (Option<Instant>, Option<RenewalOutcome>) {
        let now = Instant::now();
        let settled = match answer {
            Answer::Told(Renewal::Renewed) if lease.extend(sent + validity(self.ttl), now) => {
                tracing::trace!(key = %lease.key.user(), "lease renewed");
                (Some(sent + self.period()), Some(RenewalOutcome::Ok))
            }
            Answer::Told(Renewal::Renewed) => (None, None),
            Answer::Told(Renewal::Refused) => {
                // Counted at once, not in the batch's runs: whoever learns
                // of the loss finds the refusal counted.
                lease.label.renewals(RenewalOutcome::Refused, 1);
                lease.report_lost("the lock expired or was taken over by another owner");
                (None, None)
            }
            Answer::Told(Renewal::Unknown) => {
                tracing::debug!(key = %lease.key.user(), "renewal undecided; retrying until the lease's validity ends");
                (
                    Some(self.retry(valid_until, now)),
                    Some(RenewalOutcome::Failed),
                )
            }
            Answer::Failed(err) => {
                tracing::debug!(key = %lease.key.user(), error = %err, "renewal failed; retrying until the lease's validity ends");
                (
                    Some(self.retry(valid_until, now)),
                    Some(RenewalOutcome::Failed),
                )
            }
            Answer::Unanswered => (Some(now), None),
        };
        if valid_until <= now && !lease.is_renewed_past(valid_until) {
            lease.report_lost(NOT_RENEWED_IN_TIME);
        }
        settled
    }

    /// When to retry, from `now`, a failed renewal of a lease valid until
    /// `valid_until`.
    fn retry(&self, valid_until: Instant, now: Instant) -> Instant {
        let retry = now + (self.period() / 4).max(MIN_PERIOD);
        retry.min(valid_until)
    }
}

impl WatchedLease {
    fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    fn valid_until(&self) -> Option<Instant> {
        self.status.valid_until()
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

    /// Extends the validity to `renewed_until` unless it has ended by `now`
    /// (a late renewal cannot revive a lost lease), waking nobody (see
    /// `status`). Whether it was extended.
    fn extend(&self, renewed_until: Instant, now: Instant) -> bool {
        self.status.extend(renewed_until, now)
    }

    fn report_lost(&self, why: &str) {
        if !self.has_ended() {
            tracing::warn!(key = %self.key.user(), "lease lost: {why}");
        }
        self.status.mark_lost();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;
    use crate::keys::KeySpace;
    use crate::kinds::kind::Kind;
    use crate::LockOptions;

    /// A watched lock of `ttl` acquired now, on a timer with no Tokio
    /// runtime (so its task never runs and the test sees its lists as they
    /// are).
    fn watch(timer: &Arc<RenewalTimer>, ttl: Duration) -> Arc<Watchdog> {
        let options = LockOptions::new().ttl(ttl);
        let sent = Instant::now();
        timer.watch(
            Arc::new(Backend::Memory(MemoryBackend::new())),
            Watched {
                key: Arc::new(KeySpace::new("test".to_owned()).key(Kind::Lock, "k")),
                token: OwnerToken::generate(),
                ttl,
                renew: true,
                status: StatusCell::held_until(sent + validity(ttl)),
                sent,
                first_lease: ttl,
                label: MetricLabel::new(&options, Kind::Lock),
            },
        )
    }

    #[test]
    fn a_lease_ended_before_the_timer_takes_it_in_never_has_a_sorted_slot() {
        let timer = Arc::new(RenewalTimer::default());
        let watchdog = watch(&timer, Duration::from_secs(30));
        assert!(
            locked(&timer.schedule).due.is_empty(),
            "a new lease waits among the first cycles, not in the sorted schedule"
        );
        watchdog.stop();
        let mut schedule = locked(&timer.schedule);
        assert!(schedule.due.is_empty());
        assert_eq!(schedule.first.drain().count(), 0, "stop took it out");
    }

    #[test]
    fn stopping_some_of_a_bucket_leaves_exactly_the_others_due() {
        let timer = Arc::new(RenewalTimer::default());
        let watchdogs: Vec<Arc<Watchdog>> = (0..40)
            .map(|_| watch(&timer, Duration::from_secs(30)))
            .collect();
        locked(&timer.schedule).take_in_first_cycles(Instant::now());
        assert!(
            locked(&timer.schedule)
                .due
                .values()
                .any(|bucket| bucket.len() > 1),
            "the test needs a bucket shared by several cycles"
        );
        for watchdog in watchdogs.iter().step_by(2) {
            watchdog.stop();
        }
        let schedule = locked(&timer.schedule);
        let left: Vec<&Arc<Watchdog>> = schedule.due.values().flatten().collect();
        assert_eq!(schedule.waiting, 20);
        assert_eq!(left.len(), 20);
        for (index, watchdog) in watchdogs.iter().enumerate() {
            let due = left.iter().any(|left| Arc::ptr_eq(left, watchdog));
            assert_eq!(due, index % 2 == 1, "watchdog {index}");
        }
    }

    #[test]
    fn a_lease_taken_in_is_scheduled_no_later_than_due_and_stop_takes_it_out() {
        let timer = Arc::new(RenewalTimer::default());
        let ttl = Duration::from_secs(30);
        let watchdog = watch(&timer, ttl);
        let Slot::First(_, due) = locked(&watchdog.state).slot else {
            panic!("a new lease's first cycle is among the first cycles");
        };
        assert!(due <= Instant::now() + ttl / 3);
        locked(&timer.schedule).take_in_first_cycles(Instant::now());
        {
            let schedule = locked(&timer.schedule);
            let slots: Vec<Instant> = schedule.due.keys().copied().collect();
            assert!(
                matches!(slots[..], [at] if at <= due),
                "{slots:?}, due {due:?}"
            );
        }
        watchdog.stop();
        let mut schedule = locked(&timer.schedule);
        assert!(schedule.due.is_empty(), "stop took its slot out");
        assert_eq!(schedule.first.drain().count(), 0);
    }

    #[test]
    fn first_renewals_spread_over_the_last_quarter_of_the_period() {
        let period = Duration::from_secs(1);
        let spreads: Vec<Duration> = (0..1000)
            .map(|nth| first_renewal_spread(nth, period))
            .collect();
        assert!(spreads.iter().all(|spread| *spread <= period / 4));
        let late_half = spreads
            .iter()
            .filter(|spread| **spread > period / 8)
            .count();
        assert!(
            (400..=600).contains(&late_half),
            "{late_half} of 1000 in the later half"
        );
    }

    #[test]
    fn a_gathered_renewal_is_never_later_and_at_most_a_bucket_early() {
        let long = Duration::from_secs(1);
        for scheduled in [0, 1_000, 10_000, 100_000] {
            let width = long / u32::try_from(buckets_per_period(long, scheduled)).unwrap();
            assert!(
                BUCKET <= width && width <= long / 16,
                "{scheduled}: {width:?}"
            );
            for offset_ms in 0..200 {
                let at = *EPOCH + Duration::from_micros(offset_ms * 1_037);
                let gathered = gathered(at, long, scheduled);
                assert!(gathered <= at && at - gathered < width);
            }
        }
        let short = 3 * BUCKET;
        let at = *EPOCH + Duration::from_millis(7);
        assert_eq!(
            gathered(at, short, 1),
            at,
            "a short period is never gathered"
        );
    }

    #[test]
    fn a_renewal_due_soon_is_gathered_within_its_own_wait_not_a_period() {
        let period = Duration::from_secs(10);
        assert_eq!(gathering_span(Duration::from_millis(9_990), period), period);
        assert_eq!(gathering_span(Duration::from_secs(5), period), period);
        let soon = Duration::from_millis(400);
        let span = gathering_span(soon, period);
        assert_eq!(span, soon);
        for offset_ms in 0..200 {
            let at = *EPOCH + Duration::from_micros(offset_ms * 3_917);
            let early = at - gathered(at, span, 1);
            assert!(early < soon / 16, "{offset_ms}: {early:?} early");
        }
    }

    #[test]
    fn buckets_fill_a_batch_until_they_reach_the_narrowest() {
        let second = Duration::from_secs(1);
        assert_eq!(buckets_per_period(second, 1_000), 16, "a sixteenth at most");
        assert_eq!(buckets_per_period(second, 10_000), 50, "200 leases each");
        assert_eq!(buckets_per_period(second, 100_000), 100, "10 ms at least");
        assert_eq!(buckets_per_period(Duration::from_millis(40), 1), 4);
        assert_eq!(buckets_per_period(Duration::from_millis(39), 1), 0);
    }

    #[test]
    fn a_cycle_of_whole_buckets_keeps_its_place() {
        let second = Duration::from_secs(1);
        for scheduled in [1_000, 7_300, 100_000] {
            let first = gathered(*EPOCH + Duration::from_millis(4_321), second, scheduled);
            let next = gathered(first + second, second, scheduled);
            let early = first + second - next;
            assert!(
                early < Duration::from_micros(1),
                "{scheduled}: renewed {early:?} early (nanoseconds of rounding at most)"
            );
        }
    }
}
