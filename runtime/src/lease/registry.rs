//! The leases a manager (with its clones) holds, by id, the releases it has
//! in flight, and whether it still takes locks: what `shutdown` reads.
//! Generic over the lease, so that the lease can point back here without
//! this file knowing it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Notify;

use crate::hashing::FastMap;
use crate::LockError;

/// The live leases of one manager, by id, and its releases in flight.
pub(crate) struct Leases<L> {
    /// Set once by `shutdown`: no more acquisitions.
    closed: AtomicBool,
    next_id: AtomicU64,
    held: Mutex<FastMap<u64, Weak<L>>>,
    /// Releases sent and not answered yet.
    in_flight: AtomicUsize,
    /// Notified when `in_flight` drops to zero.
    settled: Notify,
}

impl<L> Default for Leases<L> {
    fn default() -> Self {
        Leases {
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            held: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            settled: Notify::new(),
        }
    }
}

impl<L> Leases<L> {
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
    pub(crate) fn record(&self, id: u64, lease: &Arc<L>) {
        self.table().insert(id, Arc::downgrade(lease));
    }

    /// Forgets the lease `id`: its hold ended.
    pub(crate) fn forget(&self, id: u64) {
        self.table().remove(&id);
    }

    /// Every lease still held, forgotten here.
    pub(crate) fn take_all(&self) -> Vec<Arc<L>> {
        self.table()
            .drain()
            .filter_map(|(_, lease)| lease.upgrade())
            .collect()
    }

    /// Counts a release as in flight until the returned value is dropped.
    pub(crate) fn release_started(self: &Arc<Self>) -> InFlight<L> {
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

    fn table(&self) -> std::sync::MutexGuard<'_, FastMap<u64, Weak<L>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A release in flight, counted in [`Leases`] while this lives.
pub(crate) struct InFlight<L>(Arc<Leases<L>>);

impl<L> Drop for InFlight<L> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}
