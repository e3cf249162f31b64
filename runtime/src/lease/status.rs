//! Whether a lease is still ours, shared by its guard, its watchdog and
//! whoever waits for its loss.
//!
//! A renewal moves the validity silently (with one per lease and second,
//! waking every waiter would cost more than the renewal); a waiter reads
//! the validity, sleeps until it, and reads again. Only the loss wakes the
//! waiters. A loss is final: a late renewal cannot revive the lease.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

/// Whether the lease is still ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    /// Held, and certainly valid until this instant (monotonic clock).
    Held { valid_until: Instant },
    /// Lost: expired before it could be renewed, or taken over.
    Lost,
}

/// One lease's [`LeaseStatus`]; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct StatusCell(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    status: Mutex<LeaseStatus>,
    /// Notified (all waiters) when the lease is lost.
    lost: Notify,
}

impl StatusCell {
    /// A lease held until `valid_until`.
    pub(crate) fn held_until(valid_until: Instant) -> Self {
        StatusCell(Arc::new(Shared {
            status: Mutex::new(LeaseStatus::Held { valid_until }),
            lost: Notify::new(),
        }))
    }

    fn locked(&self) -> MutexGuard<'_, LeaseStatus> {
        self.0.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The status now.
    pub(crate) fn get(&self) -> LeaseStatus {
        *self.locked()
    }

    /// When the lease's certain validity ends; `None` once it is lost.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.get() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            LeaseStatus::Lost => None,
        }
    }

    /// Moves the validity to `renewed_until` unless it has ended by `now`
    /// (a late renewal cannot revive a lost lease), without waking anyone.
    /// Whether it was extended.
    pub(crate) fn extend(&self, renewed_until: Instant, now: Instant) -> bool {
        let mut status = self.locked();
        match &mut *status {
            LeaseStatus::Held { valid_until } if *valid_until > now => {
                *valid_until = renewed_until;
                true
            }
            _ => false,
        }
    }

    /// Marks the lease lost for good and wakes everyone waiting for that.
    pub(crate) fn mark_lost(&self) {
        *self.locked() = LeaseStatus::Lost;
        self.0.lost.notify_waiters();
    }

    /// Resolves once the lease is lost: marked so, or past its validity
    /// (then marked so here). Pending while the lease is held.
    pub(crate) async fn lost(&self) {
        loop {
            let marked = self.0.lost.notified();
            tokio::pin!(marked);
            // Registered before the status is read, so a loss marked in
            // between still wakes this waiter.
            marked.as_mut().enable();
            let valid_until = match self.get() {
                LeaseStatus::Held { valid_until } => valid_until,
                LeaseStatus::Lost => return,
            };
            if valid_until <= Instant::now() {
                self.mark_lost();
                return;
            }
            tokio::select! {
                () = marked => {}
                // A renewal moves the validity without waking us: at the
                // old one the loop reads the new one.
                () = tokio::time::sleep_until(valid_until.into()) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_at_the_loss_not_at_a_renewal_and_a_loss_is_final() {
        let start = Instant::now();
        let cell = StatusCell::held_until(start + Duration::from_millis(50));
        let waiter = tokio::spawn({
            let cell = cell.clone();
            async move { cell.lost().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(cell.extend(start + Duration::from_secs(60), Instant::now()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "woken by a renewal");
        cell.mark_lost();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the loss")
            .expect("the waiter's task");
        assert!(!cell.extend(start + Duration::from_secs(120), Instant::now()));
        assert_eq!(cell.get(), LeaseStatus::Lost);
    }

    #[tokio::test]
    async fn a_waiter_finds_an_ended_validity_lost_without_being_told() {
        let cell = StatusCell::held_until(Instant::now() + Duration::from_millis(20));
        tokio::time::timeout(Duration::from_secs(5), cell.lost())
            .await
            .expect("lost at its validity");
        assert_eq!(cell.valid_until(), None);
    }
}
