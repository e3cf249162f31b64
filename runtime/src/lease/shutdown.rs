//! What [`LockManager::shutdown`](crate::LockManager::shutdown) needs: the
//! leases a manager (with its clones) holds, the releases it has in flight,
//! and whether it still takes locks.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;

use crate::hashing::FastMap;

use crate::lease::Lease;
use crate::{LockError, LockManager};

/// The longest `shutdown` waits for its releases and those in flight.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

impl LockManager {
    /// Gives back every lock this manager (with its clones) holds, and takes
    /// no more: call it as a service, a `main` or a `#[tokio::test]` ends.
    ///
    /// A guard dropped as the Tokio runtime shuts down cannot send its
    /// release (the task that would send it never runs), so the lock stays
    /// until its TTL runs out and the next process waits for it; `shutdown`
    /// sends every release while the runtime still runs.
    ///
    /// ## Behavior
    ///
    /// - Every lease still held (locks, read/write leases, permits, the keys
    ///   of a set) is released at once, all concurrently: its renewal stops
    ///   and the lock is deleted, or kept for the rest of its
    ///   `hold_at_least`. Its guard reports the lease lost: a body running
    ///   under it with `OnLost::Cancel` is cancelled with
    ///   `LockError::LeaseLost`, and `release()` returns that error. Dropping
    ///   the guard later sends nothing.
    /// - Releases already in flight (from guards dropped or released just
    ///   before) are waited for too.
    /// - Both waits together end after at most 5 s; a release still
    ///   unanswered then is logged, and its lock expires by its TTL.
    /// - From the first call on, every acquisition through this manager or a
    ///   clone fails with `LockError::ShutDown`. An acquisition already in
    ///   flight may still complete; its guard releases as usual.
    /// - Calling it again releases what was acquired since, if anything.
    ///
    /// Returns how many leases it released itself.
    pub async fn shutdown(&self) -> usize {
        let leases = self.leases();
        leases.close();
        let held = leases.take_all();
        let released = held.len();
        let releases = join_all(held.into_iter().map(release_at_shutdown));
        let settle = async {
            releases.await;
            leases.settled().await;
        };
        if tokio::time::timeout(SHUTDOWN_LIMIT, settle).await.is_err() {
            tracing::warn!(
                limit = ?SHUTDOWN_LIMIT,
                "shutdown: releases still unanswered; their locks expire by their TTL"
            );
        }
        tracing::info!(released, "lock manager shut down");
        released
    }
}

/// Releases `lease` for `shutdown`, unless its guard started releasing it
/// first (that release is in flight, and waited for).
async fn release_at_shutdown(lease: Arc<Lease>) {
    if !lease.claim_release() {
        return;
    }
    lease.stop_watchdog();
    lease.end_hold();
    // The holder is no longer protected: tell it, as a lost lease does.
    lease.mark_lost();
    if let Err(err) = lease.end().await {
        tracing::warn!(key = %lease.key.user(), error = %err, "shutdown: release failed; the lock expires after its TTL");
    }
}

/// The live leases of one manager, by id, and its releases in flight.
#[derive(Default)]
pub(crate) struct Leases {
    /// Set once by `shutdown`: no more acquisitions.
    closed: AtomicBool,
    next_id: AtomicU64,
    held: Mutex<FastMap<u64, Weak<Lease>>>,
    /// Releases sent and not answered yet.
    in_flight: AtomicUsize,
    /// Notified when `in_flight` drops to zero.
    settled: Notify,
}

impl Leases {
    /// `Err(ShutDown)` once the manager is shut down.
    pub(crate) fn ensure_open(&self) -> Result<(), LockError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(LockError::ShutDown);
        }
        Ok(())
    }

    /// Takes no more acquisitions from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// An id for a lease about to be recorded.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `lease` as held, under its id.
    pub(crate) fn record(&self, id: u64, lease: &Arc<Lease>) {
        self.table().insert(id, Arc::downgrade(lease));
    }

    /// Forgets the lease `id`: its hold ended.
    pub(crate) fn forget(&self, id: u64) {
        self.table().remove(&id);
    }

    /// Every lease still held, forgotten here.
    pub(crate) fn take_all(&self) -> Vec<Arc<Lease>> {
        self.table()
            .drain()
            .filter_map(|(_, lease)| lease.upgrade())
            .collect()
    }

    /// Counts a release as in flight until the returned value is dropped.
    pub(crate) fn release_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }

    /// Resolves when no release is in flight.
    pub(crate) async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, FastMap<u64, Weak<Lease>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A release in flight, counted in [`Leases`] while this lives.
pub(crate) struct InFlight(Arc<Leases>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}
