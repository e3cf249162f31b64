//! The RAII guard of a held lock.

use std::sync::Arc;
use std::time::Instant;

use crate::lease::body::Held;
use crate::lease::registry::InFlight;
use crate::lease::Lease;
use crate::LockError;

/// One held lease and what every guard shows of it: the key, this holder's
/// owner token, whether the lease is lost and until when it is certainly
/// valid. Every guard ([`LockGuard`], [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard), [`Permit`](crate::Permit),
/// [`Term`](crate::Term)) holds one and dereferences to it.
///
/// The lease is released exactly once: by its guard's `release()`, or when
/// the guard is dropped on any other exit path (early return, `?`, panic, or
/// the future holding it being cancelled). Drop never blocks: it stops the
/// watchdog and spawns the release on the current Tokio runtime (the
/// in-memory backend releases before `drop` returns). Dropped outside any
/// runtime, or while the runtime shuts down (so the spawned release never
/// runs), the release is sent on the runtime the manager was built on;
/// with neither, a warning is logged and the lease ends with its TTL.
///
/// A guard from a re-entrant acquisition shares its outer guard's lease and
/// releases nothing; the outermost guard releases.
pub struct HeldLease {
    lease: Arc<Lease>,
    reentered: bool,
    released: bool,
}

impl HeldLease {
    pub(crate) fn owner(lease: Arc<Lease>) -> Self {
        HeldLease {
            lease,
            reentered: false,
            released: false,
        }
    }

    pub(crate) fn reentered(lease: Arc<Lease>) -> Self {
        HeldLease {
            lease,
            reentered: true,
            released: false,
        }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The key as given to the acquisition, without namespace.
    pub fn key(&self) -> &str {
        self.lease.key.user()
    }

    /// This holder's owner token: 128 random bits as 32 hex digits, then
    /// `|` and who holds the lease (see [`Holder`](crate::Holder)); a
    /// permit's or reader's member in the lease set, a re-entered guard's
    /// enclosing holder's.
    pub fn token(&self) -> &str {
        self.lease.token.as_str()
    }

    /// Whether this guard re-entered a lease its scope already held.
    pub fn is_reentered(&self) -> bool {
        self.reentered
    }

    /// Whether the lease has been lost (expired before renewal, or taken
    /// over). Once `true`, it stays so.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves as soon as the lease is lost, and no later than the end of
    /// its certain validity; pending forever while it is held.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// Until when the lease is certainly valid (monotonic clock), `None` once lost.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// The lease's fencing token, issued on the first call (see
    /// [`LockGuard::fencing_token`]).
    pub(crate) async fn fencing_token(&self) -> Result<u64, LockError> {
        self.lease.fencing_token().await
    }

    /// Releases the lease now and reports whether it was still ours (see
    /// [`LockGuard::release`]).
    pub(crate) async fn release(mut self) -> Result<(), LockError> {
        self.released = true;
        if self.reentered {
            return Ok(());
        }
        if !self.lease.claim_release() {
            // `LockManager::shutdown` released it, while this guard held it.
            return Err(LockError::LeaseLost {
                key: self.key().to_owned(),
            });
        }
        self.lease.stop_watchdog();
        self.lease.end_hold();
        let mut pending = PendingRelease {
            lease: Arc::clone(&self.lease),
            answered: false,
            _in_flight: self.lease.leasing.leases.release_started(),
        };
        let released = release_settled(&self.lease).await;
        pending.answered = true;
        released
    }
}

/// Proof that the lock on [`key`](HeldLease::key) is held; what it shows of
/// its lease is [`HeldLease`]'s, to which it dereferences.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    held: HeldLease,
}

impl LockGuard {
    pub(crate) fn owner(lease: Arc<Lease>) -> Self {
        LockGuard {
            held: HeldLease::owner(lease),
        }
    }

    pub(crate) fn reentered(lease: Arc<Lease>) -> Self {
        LockGuard {
            held: HeldLease::reentered(lease),
        }
    }

    /// The held lease, for the guard of another kind.
    pub(crate) fn into_held(self) -> HeldLease {
        self.held
    }

    /// The fencing token: strictly greater than that of every earlier holder of
    /// this key that asked for one. Send it with every write to storage that
    /// must reject stale holders.
    ///
    /// Issued on the first call, by the backend and only to the current
    /// holder (one round trip; two on Redlock), then the same value on every
    /// call: a lock whose token is never asked for costs nothing extra.
    /// `Err(LockError::LeaseLost)` once the lease is lost, whether or not a
    /// token was issued before (a holder that lost its lock cannot get a token
    /// newer than its successor's, and should not write at all); a connection
    /// error leaves nothing issued, so a retry may succeed. Cancel-safe: a call dropped mid-way issues at most a token
    /// that nobody uses, and the next call gets a later one.
    pub async fn fencing_token(&self) -> Result<u64, LockError> {
        self.held.fencing_token().await
    }

    /// Releases the lock now and reports whether it was still ours.
    ///
    /// `Err(LockError::LeaseLost)` means the lease had expired or been taken
    /// over: the lock was *not* deleted (it is someone else's now), and the
    /// work done under it was not protected; a lease already reported lost
    /// gives this error also when the release could not reach Redis. Any
    /// other connection error means the release did not arrive; the lock
    /// then expires after its TTL.
    ///
    /// Cancel-safe: if this future is dropped before the release's answer
    /// arrived, the release is sent again from a task on the current Tokio
    /// runtime (a second compare-and-delete with our owner token, which
    /// removes nothing once the first has), so the lock never outlives the
    /// guard by more than a round trip.
    pub async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }
}

/// Lets each guard type (a struct whose `held` field is its [`HeldLease`])
/// dereference to that core, so the methods every kind shares are written
/// once, on `HeldLease`.
macro_rules! derefs_to_held_lease {
    ($($guard:ty),+ $(,)?) => {$(
        impl std::ops::Deref for $guard {
            type Target = $crate::lease::guard::HeldLease;

            fn deref(&self) -> &Self::Target {
                &self.held
            }
        }
    )+};
}
pub(crate) use derefs_to_held_lease;

derefs_to_held_lease!(LockGuard);

/// A release whose answer has not arrived yet. Dropped in that state (the
/// `release()` future was cancelled mid-way), it sends the release again
/// from a task, as a dropped guard does: the first may never have left.
struct PendingRelease {
    lease: Arc<Lease>,
    answered: bool,
    _in_flight: InFlight<Lease>,
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        if !self.answered {
            spawn_release(&self.lease, Sent::Again);
        }
    }
}

/// Whether a release may have been sent before this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    First,
    /// After a cancelled `release()`: finding the lock no longer ours most
    /// likely means the first release arrived, so it is not reported.
    Again,
}

/// Releases `lease` before returning where its backend needs no I/O (the
/// in-memory table), so that a dropped guard's lock is free when `drop`
/// returns. Otherwise sends the release from a task on the current Tokio
/// runtime, or, outside one, on the runtime the manager was built on. A
/// release task dropped before it finished (its runtime shut down, say a
/// `#[tokio::test]` or a worker pool's runtime ending while the manager's
/// own runtime runs on) is sent again on the manager's runtime. With neither
/// runtime running, the lock expires after its TTL, with a warning.
fn spawn_release(lease: &Arc<Lease>, sent: Sent) {
    let backend = &lease.leasing.backend;
    if let Some(owned) = backend.release_in_place(&lease.key, &lease.token, lease.hold_left()) {
        if sent == Sent::First {
            let _ = settle(lease, Ok(owned));
        }
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => SpawnedRelease::new(lease, sent, Fallback::ManagersRuntime).spawn(&runtime),
        Err(_) => match &lease.leasing.runtime {
            Some(runtime) => SpawnedRelease::new(lease, sent, Fallback::None).spawn(runtime),
            None => tracing::warn!(
                key = %lease.key.user(),
                "lock released outside a Tokio runtime; the lock expires after its TTL"
            ),
        },
    }
}

/// Where a release task that could not finish is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fallback {
    /// On the runtime the manager was built on.
    ManagersRuntime,
    /// Nowhere: the lock expires after its TTL.
    None,
}

/// A release sent from a task. Dropped before it completed (its runtime shut
/// down), it is sent again on the manager's runtime, once; failing that, it
/// warns: the lock then stays until its TTL ends.
struct SpawnedRelease {
    lease: Arc<Lease>,
    sent: Sent,
    fallback: Fallback,
    done: bool,
    in_flight: Option<InFlight<Lease>>,
}

impl SpawnedRelease {
    fn new(lease: &Arc<Lease>, sent: Sent, fallback: Fallback) -> Self {
        SpawnedRelease {
            lease: Arc::clone(lease),
            sent,
            fallback,
            done: false,
            in_flight: Some(lease.leasing.leases.release_started()),
        }
    }

    /// Runs the release on `runtime`. The task owns `self` from the start,
    /// so a task dropped before its first poll still falls back.
    fn spawn(self, runtime: &tokio::runtime::Handle) {
        runtime.spawn(self.run());
    }

    async fn run(mut self) {
        if self.sent == Sent::First {
            let _ = release_settled(&self.lease).await;
        } else {
            let resent = self.lease.end().await;
            tracing::debug!(key = %self.lease.key.user(), ?resent, "release sent again after a cancelled release()");
        }
        self.done = true;
    }
}

impl Drop for SpawnedRelease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let (Fallback::ManagersRuntime, Some(runtime)) =
            (self.fallback, &self.lease.leasing.runtime)
        {
            tracing::debug!(key = %self.lease.key.user(), "release task dropped with its runtime; sending it again on the manager's runtime");
            // The first may have arrived: a lock no longer ours is then not
            // a loss to report.
            let again = SpawnedRelease {
                lease: Arc::clone(&self.lease),
                sent: Sent::Again,
                fallback: Fallback::None,
                done: false,
                in_flight: self.in_flight.take(),
            };
            again.spawn(runtime);
            return;
        }
        tracing::warn!(key = %self.lease.key.user(), "the Tokio runtime shut down before the lock's release completed; unless it arrived, the lock expires after its TTL");
    }
}

/// Releases `lease` and settles what the answer means (see [`settle`]).
async fn release_settled(lease: &Lease) -> Result<(), LockError> {
    settle(lease, lease.end().await)
}

/// What a release's answer means for its caller: a lock no longer ours marks
/// the lease lost; failures are logged, as the lock then expires by its TTL.
fn settle(lease: &Lease, ended: Result<bool, LockError>) -> Result<(), LockError> {
    match ended {
        Ok(true) => {
            tracing::debug!(key = %lease.key.user(), "lock released");
            Ok(())
        }
        Ok(false) => {
            lease.mark_lost();
            tracing::warn!(key = %lease.key.user(), "release found the lock no longer ours: the lease had expired or was taken over");
            Err(LockError::LeaseLost {
                key: lease.key.user().to_owned(),
            })
        }
        Err(err) if lease.is_lost() => {
            tracing::warn!(key = %lease.key.user(), error = %err, "release of a lost lease failed; the lock expires after its TTL");
            Err(LockError::LeaseLost {
                key: lease.key.user().to_owned(),
            })
        }
        Err(err) => {
            tracing::warn!(key = %lease.key.user(), error = %err, "release failed; the lock expires after its TTL");
            Err(err)
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if self.released || self.reentered || !self.lease.claim_release() {
            return;
        }
        self.lease.stop_watchdog();
        self.lease.end_hold();
        spawn_release(&self.lease, Sent::First);
    }
}

impl HeldLease {
    /// Shows the lease (never its owner token) as the guard `name` holding it.
    pub(crate) fn debug_as(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("key", &self.key())
            .field("fencing_token", &self.lease.issued_fence())
            .field("reentered", &self.reentered)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.debug_as("HeldLease", f)
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.held.debug_as("LockGuard", f)
    }
}

impl Held for HeldLease {
    fn leases(&self) -> Vec<Arc<Lease>> {
        vec![Arc::clone(&self.lease)]
    }

    async fn release(self) -> Result<(), LockError> {
        HeldLease::release(self).await
    }
}

impl Held for LockGuard {
    fn leases(&self) -> Vec<Arc<Lease>> {
        self.held.leases()
    }

    async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }
}
