//! Taking a lease: one attempt→wait→retry engine for every kind (a lock, a
//! read or write lease, a permit; several keys and leader campaigns are made
//! of lock acquisitions).
//!
//! ## Behavior
//!
//! - **First attempt.** One atomic step on the backend (`SET NX PX` or one
//!   script). On one server a fenced lock's first attempt is one script
//!   that also issues its token; elsewhere the token request rides behind
//!   the attempt on the same connection. Granted: the lease counts from
//!   when the attempt was sent.
//! - **Busy.** With no `wait`, the error is `Busy` with the holder's
//!   remaining TTL when known. Otherwise the waiter subscribes to the key's
//!   releases, then retries when a release wakes it or the blocking lease
//!   would end. Where the backend hands locks over, a lock waiter keeps a
//!   place in the key's queue, which one keeper per key and process
//!   refreshes for all its waiters at once ([`places`]); a release that
//!   hands the lock to this waiter counts its lease from one of those
//!   refreshes when enough of it is left on arrival, or is confirmed with
//!   one more step (one round trip, whatever the server's script cache
//!   holds); no grant becomes a guard already lost. A reader's or writer's
//!   place (a writer's intent, a reader's mark that readers wait) is
//!   refreshed by its own attempts, at least every [`PLACE_REFRESH`].
//! - **Deadline.** The wait ends at `wait` after the first attempt; past it,
//!   the last attempt decides, and the result is `Ok(None)`.
//! - **Connection errors.** The first attempt's ends the acquisition at
//!   once (a server that is down is reported, not waited for). A waiter
//!   rides them out while its wait has time left, for up to [`RIDE_OUT`] in
//!   a row (a failover, a restart): it tries again, backing off, each time
//!   with a fresh owner token and so at the back of the queue. An attempt
//!   whose answer was lost may have been granted, and the backend undoes it
//!   in the background with the token it was sent with; a retry with that
//!   token could be granted and then undone. Past the wait or the ride-out,
//!   the last connection error is the result.
//! - **One holder per key in this process.** A grant takes a seat of the
//!   key in the manager (`lease::seats`) before it becomes a lease: a lock
//!   or write lease sits alone, a reader beside readers, a permit among at
//!   most the semaphore's permits. A grant that finds no free seat (a
//!   failover or a restart lost the grant of a task of this manager that
//!   still holds the key) is given back; the waiter waits for that holder
//!   to release or lose its lease, then asks again (one attempt: `Busy`).
//! - **Cancellation.** Dropped at any `.await`, an acquisition leaves nothing
//!   behind: an attempt in flight, a place in a queue and an intent are
//!   undone by [`pending::PendingAcquire`].

pub(crate) mod pending;
mod places;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::wait_queue::{Grant, WaitTicket, Wake, REFRESHES_KEPT};
use crate::backend::{Attempt, Backend, Claim, Taking};
use crate::keys::LockKey;
use crate::kinds::kind::{Kind, Waiting};
use crate::lease::body;
use crate::lease::guard::LockGuard;
use crate::lease::{scope, Lease, Taken};
use crate::options::MinReplicas;
use crate::telemetry::MetricLabel;
use crate::token::{Identity, OwnerToken};
use crate::validity::validity;
use crate::{LockError, LockManager, LockOptions};
use pending::PendingAcquire;
use places::{PLACE_KEPT, PLACE_REFRESH};

/// How long a newcomer queued behind local waiters waits for a release
/// message before it tries anyway (the holder may be in another process and
/// the message may have been missed).
const QUEUE_BEHIND_FALLBACK: Duration = Duration::from_millis(50);

/// Least validity a grant taken as it comes must have left when its
/// message arrives, beyond the longest round trip the waiter has seen: its
/// first renewal, due at once or soon, must be answered within it. With
/// less, the waiter confirms instead, which gives it its full ttl from then.
const SHORTEST_GRANT_LEFT: Duration = Duration::from_millis(50);

/// Longest pause of a waiter between two attempts, whatever TTL the holder
/// reports (any client may have set a key with a huge TTL).
const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// A waiter's first pause after a connection error; each further error in a
/// row doubles it, up to [`PLACE_REFRESH`].
const FIRST_OUTAGE_PAUSE: Duration = Duration::from_millis(50);

/// Longest run of connection errors a waiter rides out (enough for a Sentinel
/// or Cluster failover): past it the acquisition fails with the last error,
/// also when its `wait` has time left.
const RIDE_OUT: Duration = Duration::from_secs(30);

/// The connection errors one waiter has met in a row.
struct Outage<'a> {
    since: Instant,
    /// How long to pause before the next attempt.
    pause: Duration,
    /// The owner tokens given up on during the outage, each given back
    /// (its place, a grant, a lock whose answer was lost) when the outage
    /// ends, or when the acquisition does: a give-back sent while the
    /// server cannot be reached would be lost too.
    abandoned: Vec<PendingAcquire<'a>>,
}

/// Pause of a waiter when the backend did not say when the blocking lease ends.
const UNKNOWN_PAUSE: Duration = Duration::from_millis(10);

/// Takes the lease of `kind` on `user`'s key, waiting up to the options' `wait`:
/// `Timeout` when it ran out.
pub(crate) async fn acquire(
    manager: &LockManager,
    user: &str,
    kind: Kind,
    options: &LockOptions,
) -> Result<LockGuard, LockError> {
    take(manager, user, kind, options, options.wait).await
}

/// Takes the lease of `kind` on `user`'s key in one attempt: `None` when it is held
/// elsewhere.
pub(crate) async fn try_acquire(
    manager: &LockManager,
    user: &str,
    kind: Kind,
    options: &LockOptions,
) -> Result<Option<LockGuard>, LockError> {
    not_busy(
        take(manager, user, kind, options, Duration::ZERO)
            .await
            .map(Some),
    )
}

/// Runs `body` holding the lease of `kind` on `user`'s key, taken as [`acquire`] takes
/// it, in the body runner (`lease::body`). The body is boxed before this
/// returns, so every future between the caller and the runner carries a
/// pointer to it rather than a copy.
pub(crate) fn with<'m, 'u, F: Future>(
    manager: &'m LockManager,
    user: &'u str,
    kind: Kind,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<F::Output, LockError>> + use<'m, 'u, F> {
    let body = Box::pin(body);
    async move {
        let guard = acquire(manager, user, kind, &options).await?;
        body::run(guard, options.on_lost, body).await
    }
}

/// As [`with`], after one attempt: `None`, and the body does not run, when
/// the key is held elsewhere.
pub(crate) fn try_with<'m, 'u, F: Future>(
    manager: &'m LockManager,
    user: &'u str,
    kind: Kind,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<Option<F::Output>, LockError>> + use<'m, 'u, F> {
    let body = Box::pin(body);
    async move {
        let Some(guard) = try_acquire(manager, user, kind, &options).await? else {
            tracing::debug!(key = user, kind = kind.name(), "held elsewhere: skipped");
            return Ok(None);
        };
        body::run(guard, options.on_lost, body).await.map(Some)
    }
}

/// Takes the lease of `kind` on `user`'s key within `wait`: a re-entry of the running
/// scope's lease, or a new lease; `Timeout` when the wait ran out, `Busy`
/// when one attempt (no `wait`) found it held; either names a lock-delay
/// that refused the last attempt. Counted in the metrics and traced in a
/// `lock.acquire` span.
pub(crate) async fn take(
    manager: &LockManager,
    user: &str,
    kind: Kind,
    options: &LockOptions,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    let key = manager.key_space().key(kind, user);
    let label = MetricLabel::new(options, kind);
    // Not boxed: the states of waits, replicated and multi-node steps are
    // boxed where they start, which keeps this one small enough to carry.
    label
        .observe(user, || {
            run(manager, user, key, kind, options, wait, &label)
        })
        .await
}

async fn run(
    manager: &LockManager,
    user: &str,
    key: LockKey,
    kind: Kind,
    options: &LockOptions,
    wait: Duration,
    label: &MetricLabel,
) -> Result<LockGuard, LockError> {
    manager.leases().ensure_open()?;
    non_empty(user)?;
    let (ttl_ms, replicas) = kind.checked(user, options)?;
    if let Some(lease) = scope::find(manager.leasing(), key.lock()) {
        return kind.reenter(user, options, lease);
    }
    let backend = manager.backend();
    let waiting = kind.waiting();
    let hands_off = waiting == Waiting::Queues && backend.hands_off();
    // How long a blocked waiter's place on the server lasts, and whether
    // its first attempt already leaves one.
    let (place, first_place) = match waiting {
        Waiting::Queues if hands_off => (PLACE_KEPT, Duration::ZERO),
        Waiting::KeepsPlace if !wait.is_zero() => (PLACE_KEPT, PLACE_KEPT),
        _ => (Duration::ZERO, Duration::ZERO),
    };
    let mut request = Request {
        backend,
        key: &key,
        token: OwnerToken::issue(manager.identity(), ttl_ms, options.label.as_deref()),
        issuer: manager.identity(),
        token_label: options.label.as_deref(),
        ttl_ms,
        replicas,
        place,
        hands_off,
        label,
        placed: None,
        renews: options.renew,
        refreshes: [None; REFRESHES_KEPT],
        longest_trip: Duration::ZERO,
        delay_ends: None,
    };
    let started = Instant::now();
    // A writer's intent (which holds new readers back) and a reader's mark
    // that readers wait (which gives them a turn when the writer leaves) are
    // left by the first attempt already; a lock waiter's place is taken once
    // it watches for its grant, which a release could otherwise send before
    // it listens. From then on, leaving without the lease (give up, error,
    // cancellation) gives back the place and whatever may have been granted
    // meanwhile.
    if !first_place.is_zero() {
        request.hold_place();
    }
    // A newcomer that finds this process's waiters on the lock does not race
    // them with a plain attempt. Where waiters are only woken (not handed the
    // lock), it queues behind them locally: a task that just released would
    // otherwise win its own lock back before the waiter woken by that
    // release reaches the server. Where the backend queues waiters itself, it
    // joins that queue at once: a plain `SET NX` would overtake a waiter
    // still between its first attempt and its place in the queue.
    let behind_local_waiters =
        waiting == Waiting::Queues && !wait.is_zero() && backend.local_waiters(&key) > 0;
    let mut fence = None;
    let (outcome, sent) = if behind_local_waiters {
        (Attempt::Busy { remaining: None }, started)
    } else if options.fenced && kind.fences_first_attempt() {
        let (attempt, issued) = request.attempt_with_fence().await;
        fence = issued;
        attempt?
    } else {
        request.attempt(first_place, 0).await?
    };
    let mut taken = match outcome {
        Attempt::Granted { .. } => Some(Taken {
            sent,
            first_lease: None,
            waited: false,
        }),
        Attempt::Busy { remaining } if wait.is_zero() => {
            // A single server's first attempt is a plain `SET NX`, which
            // does not say how long the holder has left: asked separately.
            let remaining = match remaining {
                None if kind.asks_remaining() => Box::pin(backend.inspect(&key))
                    .await
                    .ok()
                    .and_then(|state| state.remaining),
                known => known,
            };
            tracing::debug!(key = user, kind = kind.name(), holder_remaining = ?remaining, "busy");
            return Err(busy(user, remaining));
        }
        Attempt::Delayed { left } if wait.is_zero() => {
            tracing::debug!(key = user, kind = kind.name(), lock_delay_left = ?left, "in the lock-delay");
            return Err(LockError::Busy {
                key: user.to_owned(),
                remaining: Some(left),
                lock_delay: Some(left),
            });
        }
        refused => {
            if request.placed.is_none() && !place.is_zero() {
                request.hold_place();
            }
            let queue_behind = behind_local_waiters && !hands_off;
            tracing::debug!(
                key = user,
                kind = kind.name(),
                ?refused,
                queue_behind,
                "waiting"
            );
            // Boxed: the wait's state is most of the engine's, and an
            // acquisition that finds the key free should not carry it.
            Box::pin(request.wait(started, wait, queue_behind)).await?
        }
    };
    // One holder per key in this process: a grant while another task of
    // this manager holds the key (a failover or a restart lost that
    // holder's grant) is given back, and the waiter waits for that holder
    // to release or lose its lease, then asks the server again.
    let (taken, seat) = loop {
        let Some(granted) = taken else {
            tracing::debug!(key = user, kind = kind.name(), waited = ?started.elapsed(), "gave up waiting");
            return Err(request.timed_out(wait));
        };
        let ends = match manager.seats().take(key.lock(), kind.share()) {
            Ok(seat) => break (granted, seat),
            Err(ends) => ends,
        };
        fence = None;
        drop(request.start_over());
        tracing::warn!(key = user, kind = kind.name(), "granted while another task of this manager holds it (a failover or a restart lost that holder's grant): given back, waiting for that holder to release or lose its lease");
        if wait.is_zero() {
            let remaining = ends.map(|ends| ends.saturating_duration_since(Instant::now()));
            return Err(busy(user, remaining));
        }
        let deadline = started.checked_add(wait);
        if !manager
            .seats()
            .until_free(key.lock(), kind.share(), deadline)
            .await
        {
            return Err(request.timed_out(wait));
        }
        taken = Box::pin(request.wait(started, wait, false)).await?;
    };
    tracing::debug!(key = user, kind = kind.name(), waited = ?started.elapsed(), "acquired");
    // No `.await` until the guard exists: the lease is owned by someone at
    // every point where the caller could go away.
    let token = request.settled();
    let lease = Lease::start(manager.leasing(), key, token, options, taken, label.clone());
    lease.sit(seat);
    let guard = LockGuard::owner(lease);
    match fence {
        Some((fence, issued_at)) => guard.lease().keep_fence(fence, issued_at),
        None if options.fenced => {
            if let Err(err) = Box::pin(guard.fencing_token()).await {
                tracing::debug!(key = user, error = %err, "fencing token not issued with the lock; asked for again on request");
            }
        }
        None => {}
    }
    Ok(guard)
}

/// What every attempt of one acquisition sends, and where.
struct Request<'a> {
    backend: &'a Arc<Backend>,
    key: &'a LockKey,
    /// The owner token attempts ask with; a fresh one after a connection
    /// error (see [`Request::start_over`]).
    token: OwnerToken,
    issuer: &'a Identity,
    token_label: Option<&'a str>,
    ttl_ms: u64,
    replicas: Option<MinReplicas>,
    /// How long a blocked waiter's place on the server lasts; zero for none.
    place: Duration,
    /// Whether a release hands the lock to the first queued waiter.
    hands_off: bool,
    label: &'a MetricLabel,
    /// The place this waiter keeps on the server, given back (with whatever
    /// was granted to `token`) if the acquisition ends without the lease.
    placed: Option<PendingAcquire<'a>>,
    /// Whether the lease is renewed (a grant shorter than the ttl is taken
    /// as it comes only then: its first renewal extends it).
    renews: bool,
    /// The last place refreshes' numbers and send times, newest last.
    refreshes: [Option<(u64, Instant)>; REFRESHES_KEPT],
    /// The longest round trip of this acquisition's answered attempts: what
    /// a renewal of a grant taken as it comes is expected to need.
    longest_trip: Duration,
    /// When the lock-delay that refused the last answered attempt ends;
    /// `None` when that attempt was not refused for one.
    delay_ends: Option<Instant>,
}

impl<'a> Request<'a> {
    /// What each attempt claims: the key, the current owner token, the ttl.
    fn claim(&self) -> Claim<'_> {
        Claim {
            key: self.key,
            token: &self.token,
            ttl_ms: self.ttl_ms,
        }
    }

    /// One attempt (keeping a place for `place` if the key is busy and that
    /// is not zero, numbered `seq` for a grant to name), undone if the
    /// caller goes away while it is in flight; returns its outcome and when
    /// it was sent.
    async fn attempt(
        &mut self,
        place: Duration,
        seq: u64,
    ) -> Result<(Attempt, Instant), LockError> {
        let (backend, claim) = (self.backend, self.claim());
        let pending = PendingAcquire::new(backend, self.key, &self.token);
        let sent = Instant::now();
        let taking = Taking {
            replicas: self.replicas,
            place,
            seq,
        };
        let outcome = backend.take(claim, taking).await;
        pending.settled();
        let outcome = outcome?;
        self.longest_trip = self.longest_trip.max(sent.elapsed());
        self.delay_ends = match outcome {
            Attempt::Delayed { left } => Some(Instant::now() + left),
            _ => None,
        };
        Ok((outcome, sent))
    }

    /// The error of a wait that ran out after `waited`, naming the
    /// lock-delay that refused the last attempt, if one did.
    fn timed_out(&self, waited: Duration) -> LockError {
        LockError::Timeout {
            key: self.key.user().to_owned(),
            waited,
            lock_delay: self
                .delay_ends
                .map(|ends| ends.saturating_duration_since(Instant::now())),
        }
    }

    /// The first attempt of a fenced lock, which also issues the lock's
    /// fencing token when it takes it (one script call on a single server,
    /// see [`Backend::take_fenced`]). The token (with when it was
    /// answered) only if the attempt took the lock and the backend issued it
    /// to us. Undone if the caller goes away while it is in flight.
    async fn attempt_with_fence(
        &self,
    ) -> (
        Result<(Attempt, Instant), LockError>,
        Option<(u64, Instant)>,
    ) {
        let taking = Taking {
            replicas: self.replicas,
            place: Duration::ZERO,
            seq: 0,
        };
        let pending = PendingAcquire::new(self.backend, self.key, &self.token);
        let sent = Instant::now();
        let reply = self.backend.take_fenced(self.claim(), taking).await;
        let answered = Instant::now();
        pending.settled();
        match reply {
            Ok((attempt, fence)) => (Ok((attempt, sent)), fence.map(|fence| (fence, answered))),
            Err(err) => (Err(err), None),
        }
    }

    /// Waits up to `wait` (from `started`) for the busy key: subscribes to
    /// its releases, then tries again when a release (or the key's place
    /// keeper) wakes it, when the blocking lease would end, or when a place
    /// no keeper refreshes needs refreshing; a
    /// newcomer that `queue_behind` this process's waiters first gives them a
    /// head start. Connection errors are ridden out (see
    /// [`ride_out`](Self::ride_out)). Returns the send time of the granted
    /// attempt, or `None` when the wait ran out.
    async fn wait(
        &mut self,
        started: Instant,
        wait: Duration,
        queue_behind: bool,
    ) -> Result<Option<Taken>, LockError> {
        let _waiting = self.label.waiting();
        // A wait too long to represent (e.g. `Duration::MAX`) has no deadline.
        let deadline = started.checked_add(wait);
        let mut watched_on = self.backend.notifier();
        let mut ticket = self.watch(deadline).await;
        let mut retry_at = queue_behind.then(|| Instant::now() + QUEUE_BEHIND_FALLBACK);
        let mut outage = None;
        loop {
            if let Some(at) = retry_at {
                if self.backend.notifier() != watched_on {
                    // The releases now come from elsewhere (a failover).
                    watched_on = self.backend.notifier();
                    drop(ticket.take());
                    ticket = self.watch(deadline).await;
                }
                let at = deadline.map_or(at, |deadline| at.min(deadline));
                let wake = self.sleep_until(at, &mut ticket).await;
                if let (Some(ticket), true) = (ticket.as_ref(), self.hands_off) {
                    self.ensure_keeper(ticket);
                }
                if let Some(Wake::Granted(grant)) = wake {
                    if let Some(taken) = self.taken_as_granted(grant, ticket.as_ref()) {
                        self.label.handoff();
                        tracing::debug!(
                            key = self.key.user(),
                            "lock handed over by its releaser, in one trip"
                        );
                        return Ok(Some(taken));
                    }
                    match self.confirm_grant().await {
                        Ok(Some(sent)) => {
                            self.label.handoff();
                            tracing::debug!(
                                key = self.key.user(),
                                "lock handed over by its releaser"
                            );
                            return Ok(Some(Taken {
                                sent,
                                first_lease: None,
                                waited: true,
                            }));
                        }
                        Ok(None) => {
                            if let Some(ticket) = ticket.as_mut() {
                                self.keep_place(ticket);
                            }
                        }
                        Err(err) => {
                            let at = self.ride_out(err, &mut outage, deadline, ticket.as_mut())?;
                            retry_at = Some(at);
                            continue;
                        }
                    }
                }
            }
            let seq = self.number_refresh();
            let (outcome, sent) = match self.attempt(self.place, seq).await {
                Ok(answer) => answer,
                Err(err) => {
                    retry_at = Some(self.ride_out(err, &mut outage, deadline, ticket.as_mut())?);
                    continue;
                }
            };
            outage = None;
            if let Some(ticket) = ticket.as_mut() {
                // A waiter let in with room left passes its wake-up on to the
                // next local waiter when its ticket is dropped.
                if !matches!(outcome, Attempt::Granted { room_left: true }) {
                    ticket.wake_used();
                }
            }
            let outcome = match outcome {
                Attempt::Granted { .. } => {
                    return Ok(Some(Taken {
                        sent,
                        first_lease: None,
                        waited: true,
                    }))
                }
                Attempt::Busy { remaining } => remaining,
                Attempt::Delayed { left } => Some(left),
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            let pause =
                outcome.unwrap_or(UNKNOWN_PAUSE).min(LONGEST_PAUSE) + Duration::from_millis(1);
            // A place the key's keeper refreshes needs no attempt of its own.
            let kept_by_keeper = self.hands_off && ticket.is_some();
            let pause = if self.place.is_zero() || kept_by_keeper {
                pause
            } else {
                pause.min(PLACE_REFRESH)
            };
            retry_at = Some(now + pause);
        }
    }

    /// Numbers the place refresh about to be sent (0 where no release hands
    /// the lock over, so no grant names it) and remembers when it went out.
    fn number_refresh(&mut self) -> u64 {
        if !self.hands_off {
            return 0;
        }
        let seq = places::next_refresh_number();
        self.refreshes.rotate_left(1);
        self.refreshes[REFRESHES_KEPT - 1] = Some((seq, Instant::now()));
        seq
    }

    /// The lease a grant gives as it comes, in one trip: a grant counted
    /// from place refresh `seq` lasts min(place, ttl) from when the server
    /// received that refresh, and a lock the key's keeper saw held by this
    /// waiter has what that refresh saw left (at most the ttl); so counted
    /// from when the refresh was sent, either ends first. The refresh is one
    /// of this waiter's attempts or one of its key's keeper's refreshes
    /// (`ticket` remembers those). `None` when the grant must be confirmed:
    /// the refresh is not remembered, the lease is not renewed (its first
    /// renewal is what extends the short grant to the ttl), replicas must
    /// acknowledge it, or too little of it is left now to be worth holding:
    /// its validity, counted from that refresh's send time, must outlast
    /// the longest round trip this waiter has seen by
    /// [`SHORTEST_GRANT_LEFT`]. The message may come late (a slow link, a
    /// release just before the next refresh, a runtime that did not run
    /// the waiter for a while); a guard made of such a grant would be lost
    /// when returned, or before its first renewal could be answered, while
    /// the server still keeps the lock for it.
    fn taken_as_granted(&self, grant: Grant, ticket: Option<&WaitTicket>) -> Option<Taken> {
        let ttl = Duration::from_millis(self.ttl_ms);
        let (seq, lease) = match grant {
            Grant::ToConfirm => return None,
            Grant::FromRefresh { seq } => (seq, self.place.min(ttl)),
            Grant::HeldAtRefresh { seq, left } => (seq, left.min(ttl)),
        };
        if self.replicas.is_some() || !self.renews {
            return None;
        }
        let own = self
            .refreshes
            .iter()
            .flatten()
            .find(|&&(sent_seq, _)| sent_seq == seq)
            .map(|&(_, sent)| sent);
        let sent = own.or_else(|| ticket?.refresh_sent(seq))?;
        let left = (sent + validity(lease)).saturating_duration_since(Instant::now());
        if left < self.longest_trip + SHORTEST_GRANT_LEFT {
            tracing::debug!(key = self.key.user(), ?left, longest_trip = ?self.longest_trip, "grant came with too little left to hold as it came; confirming it");
            return None;
        }
        Some(Taken {
            sent,
            first_lease: Some(lease),
            waited: true,
        })
    }

    /// After a step of the wait met `err`: a connection error (a failover,
    /// a restart, a dropped link) with time left in the wait, and less than
    /// [`RIDE_OUT`] into the outage, starts over with a fresh owner token
    /// and says when to try again, backing off from [`FIRST_OUTAGE_PAUSE`]
    /// to [`PLACE_REFRESH`]. Anything else, or an outage that outlasts
    /// either, ends the acquisition with `err`.
    fn ride_out(
        &mut self,
        err: LockError,
        outage: &mut Option<Outage<'a>>,
        deadline: Option<Instant>,
        ticket: Option<&mut WaitTicket>,
    ) -> Result<Instant, LockError> {
        let LockError::Connection { detail: reason, .. } = &err else {
            return Err(err);
        };
        let now = Instant::now();
        let outage = outage.get_or_insert_with(|| Outage {
            since: now,
            pause: FIRST_OUTAGE_PAUSE,
            abandoned: Vec::new(),
        });
        let out_of_time = deadline.is_some_and(|deadline| now >= deadline);
        if out_of_time || now.duration_since(outage.since) >= RIDE_OUT {
            return Err(err);
        }
        tracing::warn!(key = self.key.user(), error = %reason, retry_in = ?outage.pause, "connection error while waiting; trying again with a new owner token");
        outage.abandoned.push(self.start_over());
        if let (Some(ticket), true) = (ticket, self.hands_off) {
            self.keep_place(ticket);
        }
        let at = now + outage.pause;
        outage.pause = (outage.pause * 2).min(PLACE_REFRESH);
        Ok(at)
    }

    /// Goes on with a fresh owner token (keeping a place under it if the
    /// old one kept one), and returns what gives back whatever the old token
    /// may hold: its place, a grant, a lock whose answer was lost. The
    /// backend undoes an attempt whose answer was lost with the token it
    /// was sent with; a retry with that token could be granted and then
    /// undone under its feet.
    fn start_over(&mut self) -> PendingAcquire<'a> {
        let old = std::mem::replace(
            &mut self.token,
            OwnerToken::issue(self.issuer, self.ttl_ms, self.token_label),
        );
        match self.placed.take() {
            Some(old_place) => {
                self.hold_place();
                old_place
            }
            None => PendingAcquire::new(self.backend, self.key, &old),
        }
    }

    /// The acquisition got its lease: the place is no longer to be given
    /// back, and the token is the lease's.
    fn settled(self) -> OwnerToken {
        PendingAcquire::settle(self.placed);
        self.token
    }

    /// Keeps what this waiter's place on the server (under the current
    /// token) needs to be given back if the acquisition ends without the
    /// lease.
    fn hold_place(&mut self) {
        self.placed = Some(PendingAcquire::new(self.backend, self.key, &self.token));
    }

    /// Subscribes to the key's releases (and a lock's grants), within the
    /// deadline: `None` when it passed first (one last attempt then decides).
    async fn watch(&self, deadline: Option<Instant>) -> Option<WaitTicket> {
        let watching = self.backend.watch(self.key);
        let mut ticket = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), watching)
                .await
                .ok(),
            None => Some(watching.await),
        };
        if let (Some(ticket), true) = (ticket.as_mut(), self.hands_off) {
            self.keep_place(ticket);
        }
        ticket
    }

    /// Has the key's keeper refresh this waiter's place under the current
    /// token (and a grant to that token reach `ticket`), and starts the
    /// keeper if none runs.
    fn keep_place(&self, ticket: &mut WaitTicket) {
        ticket.expect_grant(self.token.as_str(), self.ttl_ms);
        self.ensure_keeper(ticket);
    }

    /// Starts the keeper of the key's places if none runs (the one that ran
    /// may have gone with its runtime).
    fn ensure_keeper(&self, ticket: &WaitTicket) {
        if let Some(keeping) = ticket.keeper_to_start() {
            places::keep(self.backend, self.key, keeping);
        }
    }

    /// Sleeps until `at`, or until a release wakes `ticket`: which wake-up
    /// came, if any.
    async fn sleep_until(&self, at: Instant, ticket: &mut Option<WaitTicket>) -> Option<Wake> {
        match ticket.as_mut() {
            Some(ticket) => tokio::select! {
                wake = ticket.next() => Some(wake),
                () = tokio::time::sleep_until(at.into()) => None,
            },
            None => {
                tokio::time::sleep_until(at.into()).await;
                None
            }
        }
    }

    /// Confirms a lock that a release handed to this waiter, by extending it
    /// to the waiter's own ttl (`renew.lua` accepts the waiters' mark, and
    /// touches the lock's key alone, as a script must during a Cluster slot
    /// migration), in one round trip also on a server that has not seen the
    /// script yet ([`Backend::confirm`]): returns when the confirmation was
    /// sent (the lease counts from then), or `None` when the grant had
    /// already run out. A replicated request confirms with a replicated
    /// attempt (`acquire.lua` sees the lock is ours and extends it, then
    /// `WAIT`), so the lock it keeps has reached its replicas like any other
    /// it takes.
    async fn confirm_grant(&mut self) -> Result<Option<Instant>, LockError> {
        if self.replicas.is_some() {
            let (outcome, sent) = self.attempt(self.place, 0).await?;
            return Ok(matches!(outcome, Attempt::Granted { .. }).then_some(sent));
        }
        let sent = Instant::now();
        let confirmed = self.backend.confirm(self.claim()).await?;
        Ok(confirmed.then_some(sent))
    }
}

/// `Err(InvalidOptions)` for an empty key: a lock on "" is almost always a
/// placeholder that rendered empty, which would make unrelated calls share
/// one lock.
pub(crate) fn non_empty(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidOptions(
            "the lock key is empty: check the values its placeholders render (an empty string makes unrelated calls share one lock)".into(),
        ));
    }
    Ok(())
}

/// The error of one attempt, made without waiting, on a key held elsewhere
/// whose blocking lease has about `remaining` left.
pub(crate) fn busy(key: &str, remaining: Option<Duration>) -> LockError {
    LockError::Busy {
        key: key.to_owned(),
        remaining,
        lock_delay: None,
    }
}

/// `Ok(None)` for [`LockError::Busy`]: what a `try_` method returns for a
/// held key.
pub(crate) fn not_busy<T>(result: Result<Option<T>, LockError>) -> Result<Option<T>, LockError> {
    match result {
        Err(LockError::Busy { .. }) => Ok(None),
        other => other,
    }
}
