//! Keeps a lease alive while its guard lives, and reports the moment it is lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::time::{sleep_until, timeout_at};

use crate::backend::{Backend, LockKey};
use crate::lease::LeaseStatus;
use crate::OwnerToken;

/// What the watchdog needs; it holds no reference to the guard, so it never keeps a lock alive on its own.
pub(crate) struct Watchdog {
    pub(crate) backend: Arc<Backend>,
    pub(crate) key: Arc<LockKey>,
    pub(crate) token: OwnerToken,
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) status: watch::Sender<LeaseStatus>,
}

/// Shortest pause between two renewals, so a tiny TTL cannot spin.
const MIN_PERIOD: Duration = Duration::from_millis(5);

impl Watchdog {
    /// Runs until the lease is lost (then reports it) or the task is aborted by
    /// the guard. Renews every `ttl / 3`; a renewal that cannot complete before
    /// the lease would run out counts as a loss.
    pub(crate) async fn run(self) {
        let period = (self.ttl / 3).max(MIN_PERIOD);
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut valid_until = match *self.status.borrow() {
            LeaseStatus::Held { valid_until } => valid_until,
            LeaseStatus::Lost => return,
        };
        let mut next = Instant::now() + period;
        loop {
            if !self.renew {
                sleep_until(valid_until.into()).await;
                tracing::warn!(key = %self.key.user, "fixed lease expired while its guard was still alive");
                break;
            }
            sleep_until(next.into()).await;
            let sent = Instant::now();
            let renewal = self.backend.renew(&self.key, &self.token, ttl_ms);
            match timeout_at(valid_until.into(), renewal).await {
                Ok(Ok(true)) => {
                    valid_until = sent + self.backend.validity(self.ttl);
                    self.status.send_replace(LeaseStatus::Held { valid_until });
                    next = sent + period;
                    tracing::trace!(key = %self.key.user, "lease renewed");
                }
                Ok(Ok(false)) => {
                    tracing::warn!(key = %self.key.user, "lease lost: the lock expired or was taken over by another owner");
                    break;
                }
                Ok(Err(err)) => {
                    tracing::debug!(key = %self.key.user, error = %err, "renewal failed; retrying until the lease runs out");
                    next = Instant::now() + (period / 4).max(MIN_PERIOD);
                }
                Err(_) => {
                    tracing::warn!(key = %self.key.user, "lease lost: could not renew before it ran out");
                    break;
                }
            }
        }
        self.status.send_replace(LeaseStatus::Lost);
    }
}
