//! What a caller asks of one lock acquisition.

use std::time::Duration;

/// What the annotated body does when its lease is lost mid-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLost {
    /// Cancel the body at its next `.await` and return `LockError::LeaseLost`.
    /// Work the body left unfinished (an open transaction) is dropped, so it rolls back.
    #[default]
    Cancel,
    /// Let the body run to completion and return its result; the loss is logged
    /// at warn level and visible through `distributed_lock::lease_lost()`.
    Continue,
}

/// Options of one acquisition. Built with [`LockOptions::new`] and chained setters.
///
/// Defaults: ttl 30 s, wait 0 (one attempt), renewal on, re-entrant, cancel on loss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) renew: bool,
    pub(crate) reentrant: bool,
    pub(crate) on_lost: OnLost,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::ZERO,
            renew: true,
            reentrant: true,
            on_lost: OnLost::Cancel,
        }
    }
}

impl LockOptions {
    /// The defaults: ttl 30 s, no waiting, renewal on, re-entrant, cancel on loss.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lease length. The lock always has this TTL in Redis; the watchdog extends it
    /// by this much every `ttl / 3` while the holder runs. Must be at least 1 ms.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long `acquire` may wait for a busy lock before `LockError::Timeout`.
    /// Zero means a single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Whether a watchdog renews the lease while the guard lives (default `true`).
    /// With `false` the lease is fixed and is reported lost once the TTL runs out.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Whether a nested acquisition of a key that the current lock scope already
    /// holds re-enters (default `true`) or fails with `LockError::AlreadyHeld`.
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// What a locked body does when the lease is lost (default [`OnLost::Cancel`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// The lease length.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The longest wait for a busy lock.
    pub fn get_wait(&self) -> Duration {
        self.wait
    }

    pub(crate) fn ttl_millis(&self) -> Result<u64, crate::LockError> {
        let ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(crate::LockError::InvalidOptions(
                "ttl must be at least 1 ms: every lock needs an expiry".into(),
            ));
        }
        Ok(ms)
    }
}
