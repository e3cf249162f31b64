//! The state of one held lock, shared by its guard, its watchdog and the
//! lock scope of the body running under it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::backend::LockKey;
use crate::watchdog::Watchdog;
use crate::{LockManager, OwnerToken};

/// Whether the lease is still ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    /// Held, and certainly valid until this instant (monotonic clock).
    Held { valid_until: Instant },
    /// Lost: expired before it could be renewed, or taken over.
    Lost,
}

/// One acquisition: who, what, with which fencing token, and how it is doing.
pub(crate) struct Lease {
    pub(crate) manager: LockManager,
    pub(crate) key: Arc<LockKey>,
    pub(crate) token: OwnerToken,
    pub(crate) fence: u64,
    pub(crate) status: watch::Sender<LeaseStatus>,
    watchdog: Option<Arc<Watchdog>>,
}

impl Lease {
    /// A lease granted by the backend; `requested_at` is when the acquiring
    /// command was sent, so validity (`valid_for`: the ttl, less Redlock's
    /// drift allowance) is counted conservatively from then.
    pub(crate) fn new(
        manager: LockManager,
        key: Arc<LockKey>,
        token: OwnerToken,
        fence: u64,
        valid_for: Duration,
        requested_at: Instant,
    ) -> Self {
        let (status, _) = watch::channel(LeaseStatus::Held {
            valid_until: requested_at + valid_for,
        });
        Lease {
            manager,
            key,
            token,
            fence,
            status,
            watchdog: None,
        }
    }

    /// Attaches the watchdog so it stops with the lease.
    pub(crate) fn set_watchdog(&mut self, watchdog: Arc<Watchdog>) {
        self.watchdog = Some(watchdog);
    }

    /// Stops renewal now. Idempotent.
    pub(crate) fn stop_watchdog(&self) {
        if let Some(watchdog) = &self.watchdog {
            watchdog.stop();
        }
    }

    /// Lost once reported so, and also as soon as the lease is past its
    /// validity, even if the watchdog task has not run yet to report it.
    pub(crate) fn is_lost(&self) -> bool {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } => valid_until <= Instant::now(),
            LeaseStatus::Lost => true,
        }
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match *self.status.borrow() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            LeaseStatus::Lost => None,
        }
    }

    /// Resolves once the lease is lost; never, while it is held.
    pub(crate) async fn lost(&self) {
        let mut status = self.status.subscribe();
        let _ = status.wait_for(|status| *status == LeaseStatus::Lost).await;
    }

    pub(crate) fn mark_lost(&self) {
        self.status.send_replace(LeaseStatus::Lost);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}
