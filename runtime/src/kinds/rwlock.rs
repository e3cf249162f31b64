//! Read/write locks: many readers or one writer on one key, each holder with
//! its own lease, renewed by the watchdog like a lock's.
//!
//! A read or write lease is a [`Lease`](crate::lease::Lease) on a key of kind
//! `Read` or `Write` (see `keys`), so the guard's release, the watchdog's
//! renewal and the undoing of a cancelled attempt run the read/write lock's
//! scripts (`backend/rwlock`) through the same backend steps as a lock's.
//! The guards are in `rw_guard`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::pending::PendingAcquire;
use crate::backend::{Attempt, KeyKind, LockKey};
use crate::kinds::rw_guard::{ReadGuard, WriteGuard};
use crate::lease::guard::LockGuard;
use crate::lease::scope;
use crate::manager::{busy, non_empty, not_busy, until_lost};
use crate::telemetry::MetricLabel;
use crate::token::OwnerToken;
use crate::{LockError, LockManager, LockOptions, OnLost};

/// How long a waiting writer's intent holds new readers back without being
/// refreshed: a writer that died holds them back at most this long.
const INTENT_PLACE: Duration = Duration::from_secs(3);

/// Longest pause between two attempts of a waiting writer, each of which
/// refreshes its intent.
const INTENT_REFRESH: Duration = Duration::from_secs(1);

/// Longest pause of a waiter between two attempts, whatever the blocking
/// lease reports (any client may have written a huge TTL or score).
const LONGEST_PAUSE: Duration = Duration::from_secs(3600);

/// Pause of a waiter when the backend did not say when the blocking lease ends.
const UNKNOWN_PAUSE: Duration = Duration::from_millis(10);

/// # Read/write locks
///
/// Many readers or one writer: [`acquire_read`](Self::acquire_read),
/// [`acquire_write`](Self::acquire_write), and the scoped
/// [`with_read`](Self::with_read) and [`with_write`](Self::with_write) (or
/// `#[distributed_lock(mode = "read")]` / `mode = "write"`).
///
/// ## Behavior
///
/// - **Many readers or one writer.** A read lease is granted only while no
///   writer holds the lock and none waits for it; the write lease only while
///   no writer and no reader holds it. Each step is one script on the server,
///   so a writer never overlaps a reader or another writer.
/// - **Leases.** Every reader has its own lease (`LockOptions::ttl`), as the
///   writer has, renewed by the watchdog every ttl/3 while its guard lives
///   and reported lost ([`ReadGuard::lost`], [`WriteGuard::lost`]) when a
///   renewal is refused or not granted before its certain validity ends.
///   Readers are a set of owner token → lease end, not a counter: a reader
///   that crashed blocks writers at most until its own lease ends.
/// - **Writers are not starved.** A writer that has to wait leaves an
///   intent on the server, refreshed at least every second while it waits
///   and dropped 3 s after its last refresh; while any intent is live, new
///   readers wait too, so the readers inside drain and the writer gets in.
///   Among waiting writers there is no arrival order.
/// - **Waiting.** Woken by releases (Redis pub/sub, sharded on a Cluster):
///   a writer's release wakes every waiting reader and one writer of each
///   process, a reader's release one writer. A waiter also tries again when
///   the blocking lease would end; it does not poll.
/// - **Re-entrancy.** The owner is the lock scope, as for locks: inside
///   [`with_write`](Self::with_write), a read or write of the same key
///   re-enters the write lease (a downgrade costs no round trip and takes no
///   lease of its own: the body reads under the write lease, released with
///   it); inside [`with_read`](Self::with_read), a read re-enters and a write
///   fails at once with [`LockError::UpgradeRefused`] instead of waiting
///   for its own reader. `LockOptions::reentrant(false)` makes every nested
///   acquisition of the key fail with `AlreadyHeld`.
/// - **Fencing.** Each writer's [`WriteGuard::fencing_token`] (and
///   [`fencing_token`](crate::fencing_token) inside `with_write`) is above
///   every earlier writer's of the key, issued as a lock's (`fence.lua`).
///   Readers carry none (they change nothing a token would protect):
///   `LockOptions::fenced(true)` on a read is refused with `InvalidOptions`,
///   and [`fencing_token`](crate::fencing_token) in a read scope fails the
///   same way.
/// - **Independent of the lock and semaphore of the same key.** `min_replicas`
///   and `hold_at_least` are refused with `InvalidOptions`.
/// - **Backends.** A single Redis server, the primary named by Sentinel, a
///   Redis Cluster (all of a read/write lock's keys in one slot) and memory.
///   Redlock refuses with `InvalidOptions`.
/// - **Cancellation.** Dropping an acquisition at any `.await` leaves
///   nothing behind: neither a lease nor a writer's intent; dropping a guard
///   releases its lease from a task.
impl LockManager {
    /// Takes a read lease on `key`, waiting up to `options.wait` while a
    /// writer holds the lock or waits for it.
    ///
    /// Inside a scope holding `key` for reading or writing this re-enters
    /// (see the section above). Fails with `Busy` when a zero `wait` found a
    /// writer, `Timeout` when no read lease came within a non-zero `wait`, `InvalidOptions` for `fenced`, `min_replicas`,
    /// `hold_at_least`, a zero ttl or a Redlock manager, and `Connection`
    /// when Redis is unreachable. Cancel-safe.
    pub async fn acquire_read(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<ReadGuard, LockError> {
        let wait = options.wait;
        let guard = self.acquire_rw(key, KeyKind::Read, &options, wait).await?;
        guard.map(ReadGuard::new).ok_or_else(|| timeout(key, wait))
    }

    /// One attempt at a read lease, no waiting: `Ok(None)` when a writer
    /// holds the lock or waits for it. Errors as
    /// [`acquire_read`](Self::acquire_read).
    pub async fn try_acquire_read(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<ReadGuard>, LockError> {
        let guard = self.acquire_rw(key, KeyKind::Read, &options, Duration::ZERO);
        Ok(not_busy(guard.await)?.map(ReadGuard::new))
    }

    /// Takes the write lease on `key`, waiting up to `options.wait` while
    /// readers or another writer hold it; while it waits, new readers wait
    /// behind it.
    ///
    /// Inside a scope holding `key` for writing this re-enters; inside one
    /// holding it for reading it fails at once with `UpgradeRefused`. With
    /// `fenced(true)` the fencing token is issued before this returns.
    /// Fails otherwise as [`acquire_read`](Self::acquire_read) (`fenced`
    /// aside). Cancel-safe: dropped at any `.await`, it leaves neither the
    /// lock nor its intent behind.
    pub async fn acquire_write(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<WriteGuard, LockError> {
        let wait = options.wait;
        let guard = self.acquire_rw(key, KeyKind::Write, &options, wait).await?;
        guard.map(WriteGuard::new).ok_or_else(|| timeout(key, wait))
    }

    /// One attempt at the write lease, no waiting and no intent left behind:
    /// `Ok(None)` when readers or a writer hold it. Errors as
    /// [`acquire_write`](Self::acquire_write).
    pub async fn try_acquire_write(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<WriteGuard>, LockError> {
        let guard = self.acquire_rw(key, KeyKind::Write, &options, Duration::ZERO);
        Ok(not_busy(guard.await)?.map(WriteGuard::new))
    }

    /// Runs `body` holding a read lease on `key`: acquires first (as
    /// [`acquire_read`](Self::acquire_read)), releases after the body's
    /// future completes, and also when it panics or is dropped.
    ///
    /// `body` runs in a lock scope: a nested read of `key` re-enters, a
    /// nested write fails with `UpgradeRefused`. With `OnLost::Cancel` (the
    /// default) the body is dropped at its next `.await` once the lease is
    /// lost and this returns `LockError::LeaseLost`. Cancel-safe.
    pub async fn with_read<F: Future>(
        &self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        let on_lost = options.on_lost;
        let guard = self.acquire_read(key, options).await?;
        run_in_scope(key, guard.into_inner(), on_lost, body).await
    }

    /// Runs `body` holding the write lease on `key`, as
    /// [`with_read`](Self::with_read) does with a read lease. Nested reads
    /// and writes of `key` re-enter, and [`fencing_token`](crate::fencing_token)
    /// returns this writer's token.
    pub async fn with_write<F: Future>(
        &self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> Result<F::Output, LockError> {
        let on_lost = options.on_lost;
        let guard = self.acquire_write(key, options).await?;
        run_in_scope(key, guard.into_inner(), on_lost, body).await
    }

    /// A read (`kind` `Read`) or write lease on `key`: a re-entry of the
    /// scope's lease, or one granted within `wait`; `None` when it was not.
    /// Counted in the metrics and traced in a `lock.acquire` span.
    async fn acquire_rw(
        &self,
        key: &str,
        kind: KeyKind,
        options: &LockOptions,
        wait: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        let label = MetricLabel::new(options, kind);
        let acquisition = self.take_rw(key, kind, options, wait, &label);
        label.observe(key, wait, acquisition).await
    }

    async fn take_rw(
        &self,
        key: &str,
        kind: KeyKind,
        options: &LockOptions,
        wait: Duration,
        label: &MetricLabel,
    ) -> Result<Option<LockGuard>, LockError> {
        self.leases().ensure_open()?;
        non_empty(key)?;
        let ttl_ms = checked_ttl(key, kind, options)?;
        let rw_key = self.key_space().rwlock(key, kind);
        if let Some(lease) = scope::find(self, &rw_key.lock) {
            return reenter(key, kind, options, lease).map(Some);
        }
        let token = OwnerToken::issue(self.identity(), ttl_ms, options.label.as_deref());
        let intent_for = match kind {
            KeyKind::Write if !wait.is_zero() => INTENT_PLACE,
            _ => Duration::ZERO,
        };
        let request = Request {
            key: &rw_key,
            token: &token,
            ttl_ms,
            intent_for,
        };
        // From the first attempt that may leave an intent on, leaving without
        // the lock (give up, error, cancellation) withdraws it.
        let intent =
            (!intent_for.is_zero()).then(|| PendingAcquire::new(self.backend(), &rw_key, &token));
        let started = Instant::now();
        let (attempt, sent) = self.rw_attempt(&request).await?;
        let granted = match attempt {
            Attempt::Acquired => Some(sent),
            Attempt::Busy { remaining } if wait.is_zero() => {
                tracing::debug!(key, ?kind, blocker_remaining = ?remaining, "read/write lock busy");
                return Err(busy(key, remaining));
            }
            Attempt::Busy { remaining } => {
                tracing::debug!(key, ?kind, blocker_remaining = ?remaining, "read/write lock busy; waiting");
                let _waiting = label.waiting();
                self.wait_for_rw(&request, started, wait).await?
            }
        };
        let Some(sent) = granted else {
            tracing::debug!(key, ?kind, "read/write lock busy");
            return Ok(None);
        };
        let lease = self.start_lease(rw_key.clone(), token.clone(), options, sent);
        // The guard first: dropped while the fencing token is being asked
        // for, it releases the lock.
        let guard = LockGuard::owner(lease);
        if let Some(intent) = intent {
            intent.settled();
        }
        tracing::debug!(key, ?kind, waited = ?started.elapsed(), "read/write lock acquired");
        if options.fenced {
            if let Err(err) = guard.fencing_token().await {
                tracing::debug!(key, error = %err, "fencing token not issued with the write lock; asked for again on request");
            }
        }
        Ok(Some(guard))
    }

    /// Waits up to `wait` (from `started`) for the busy read/write lock:
    /// subscribes to the releases that may let this waiter in, then tries at
    /// once (a release may have come before the subscription) and again
    /// whenever a release wakes it or the blocking lease would end; a writer
    /// at least every [`INTENT_REFRESH`], which keeps its intent. Returns the
    /// send time of the granting attempt, or `None` when the wait ran out.
    async fn wait_for_rw(
        &self,
        request: &Request<'_>,
        started: Instant,
        wait: Duration,
    ) -> Result<Option<Instant>, LockError> {
        // A wait too long to represent (e.g. `Duration::MAX`) has no deadline.
        let deadline = started.checked_add(wait);
        let watching = self.backend().watch(request.key);
        let mut ticket = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), watching)
                .await
                .ok(),
            None => Some(watching.await),
        };
        let writer = request.key.kind == KeyKind::Write;
        loop {
            let (attempt, sent) = self.rw_attempt(request).await?;
            let remaining = match attempt {
                Attempt::Acquired => {
                    // A reader passes the wake-up it holds on to the next
                    // local waiter when its ticket is dropped: the release
                    // that let it in may let other readers in too.
                    if let (Some(ticket), true) = (ticket.as_mut(), writer) {
                        ticket.wake_used();
                    }
                    return Ok(Some(sent));
                }
                Attempt::Busy { remaining } => remaining,
            };
            if let Some(ticket) = ticket.as_mut() {
                ticket.wake_used();
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                tracing::debug!(key = request.key.user, waited = ?now - started, "gave up waiting for the read/write lock");
                return Ok(None);
            }
            let mut pause =
                remaining.unwrap_or(UNKNOWN_PAUSE).min(LONGEST_PAUSE) + Duration::from_millis(1);
            if writer {
                pause = pause.min(INTENT_REFRESH);
            }
            let retry_at = deadline.map_or(now + pause, |deadline| (now + pause).min(deadline));
            match ticket.as_mut() {
                Some(ticket) => {
                    tokio::select! {
                        _ = ticket.next() => {}
                        () = tokio::time::sleep_until(retry_at.into()) => {}
                    }
                }
                None => tokio::time::sleep_until(retry_at.into()).await,
            }
        }
    }

    /// One attempt, undone if the caller goes away while it is in flight;
    /// returns its outcome and when it was sent.
    async fn rw_attempt(&self, request: &Request<'_>) -> Result<(Attempt, Instant), LockError> {
        let backend = self.backend();
        let pending = PendingAcquire::new(backend, request.key, request.token);
        let sent = Instant::now();
        let attempt = backend
            .try_rw(
                request.key,
                request.token,
                request.ttl_ms,
                request.intent_for,
            )
            .await;
        pending.settled();
        Ok((attempt?, sent))
    }
}

/// What every attempt of one acquisition sends.
struct Request<'a> {
    key: &'a LockKey,
    token: &'a OwnerToken,
    ttl_ms: u64,
    /// How long a blocked writer's intent is kept; zero for readers and for
    /// one attempt without waiting.
    intent_for: Duration,
}

/// The ttl in ms, once the options are known to suit a `kind` lease.
fn checked_ttl(key: &str, kind: KeyKind, options: &LockOptions) -> Result<u64, LockError> {
    let refuse = |why: &str| {
        Err(LockError::InvalidOptions(format!(
            "read/write lock `{key}`: {why}"
        )))
    };
    if kind == KeyKind::Read && options.fenced {
        return refuse("readers carry no fencing token; leave `fenced` off (writers' tokens are above every earlier writer's)");
    }
    if options.min_replicas.is_some() {
        return refuse("`min_replicas` is not supported for read/write locks; leave it off");
    }
    if options.hold_at_least.is_some() {
        return refuse("`hold_at_least` is not supported for read/write locks; leave it off");
    }
    options.ttl_millis()
}

/// The guard of a nested acquisition of the read/write lock whose `lease`
/// the running scope holds: the shared lease, unless the scope reads and a
/// write was asked for (`UpgradeRefused`), the options forbid re-entry
/// (`AlreadyHeld`) or the lease is lost (`LeaseLost`).
fn reenter(
    key: &str,
    kind: KeyKind,
    options: &LockOptions,
    lease: Arc<crate::lease::Lease>,
) -> Result<LockGuard, LockError> {
    let key = key.to_owned();
    if kind == KeyKind::Write && lease.key.kind == KeyKind::Read {
        return Err(LockError::UpgradeRefused { key });
    }
    if !options.reentrant {
        return Err(LockError::AlreadyHeld { key });
    }
    if lease.is_lost() {
        tracing::warn!(
            key,
            "re-entry refused: the enclosing scope's lease on this read/write lock is lost"
        );
        return Err(LockError::LeaseLost { key });
    }
    tracing::debug!(key, ?kind, held = ?lease.key.kind, "read/write lock re-entered by its own scope");
    Ok(LockGuard::reentered(lease))
}

/// Runs `body` in the lock scope of `guard`'s lease, cancelled when the
/// lease is lost unless `on_lost` says otherwise, then releases.
async fn run_in_scope<F: Future>(
    key: &str,
    guard: LockGuard,
    on_lost: OnLost,
    body: F,
) -> Result<F::Output, LockError> {
    let lease = Arc::clone(guard.lease());
    // Boxed as `with_lock` boxes its body: nested calls would otherwise grow
    // this future with every level.
    let scoped = Box::pin(scope::enter(Arc::clone(&lease), body));
    let Some(output) = until_lost(scoped, lease.lost(), on_lost).await else {
        drop(guard);
        return Err(LockError::LeaseLost {
            key: key.to_owned(),
        });
    };
    match guard.release().await {
        Err(lost @ LockError::LeaseLost { .. }) if on_lost == OnLost::Cancel => Err(lost),
        _ => Ok(output),
    }
}

/// The error of a wait that ran out.
fn timeout(key: &str, waited: Duration) -> LockError {
    LockError::Timeout {
        key: key.to_owned(),
        waited,
    }
}
