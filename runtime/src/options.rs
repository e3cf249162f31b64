//! What a caller asks of one lock acquisition.

use std::time::Duration;

/// The longest ttl a lease may have.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the annotated body does when its lease is lost mid-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLost {
    /// Cancel the body at its next `.await` and return `LockError::LeaseLost`.
    /// Work the body left unfinished (an open transaction) is dropped, so it rolls back.
    #[default]
    Cancel,
    /// Let the body run to completion and return its result; the loss is logged
    /// at warn level and visible through `leasehold::lease_lost()`.
    Continue,
}

/// Options of one acquisition. Built with [`LockOptions::new`] and chained setters.
///
/// Defaults: ttl 30 s, wait 0 (one attempt), renewal on, re-entrant, cancel on
/// loss, no replica acknowledgement, fencing token on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) renew: bool,
    pub(crate) reentrant: bool,
    pub(crate) on_lost: OnLost,
    pub(crate) min_replicas: Option<ReplicaRequirement>,
    pub(crate) fenced: bool,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) label: Option<std::sync::Arc<str>>,
    pub(crate) template: Option<std::sync::Arc<str>>,
}

/// What the caller asked of replicas; the default timeout is resolved
/// against the ttl when acquiring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaRequirement {
    replicas: u32,
    timeout: Option<Duration>,
}

/// The replica timeout when none is given: 200 ms, or half the ttl if shorter.
const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(200);

/// How many replicas must acknowledge an acquisition, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MinReplicas {
    /// Replicas that must acknowledge; at least 1.
    pub(crate) replicas: u32,
    /// Longest wait for their acknowledgements (`WAIT`'s timeout).
    pub(crate) timeout: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::ZERO,
            renew: true,
            reentrant: true,
            on_lost: OnLost::Cancel,
            min_replicas: None,
            fenced: false,
            hold_at_least: None,
            label: None,
            template: None,
        }
    }
}

impl LockOptions {
    /// The defaults: ttl 30 s, no waiting, renewal on, re-entrant, cancel on loss.
    pub fn new() -> Self {
        Self::default()
    }

    /// A name for this acquisition, recorded with the lock so that operators
    /// see who holds it and why (see `LockManager::inspect`): e.g. the
    /// calling function's path, which the attribute gives by default. Cut to
    /// 200 bytes; control characters become `_`.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into().into());
        self
    }

    /// How this acquisition's key is built, e.g. `stock:{sku}`: the `lock`
    /// label of its metrics (see the crate's metrics list), which the key
    /// itself must not be (one series per key would grow without bound).
    /// The attribute sets it to its `key` (or `keys`) template; without it,
    /// the [`label`](Self::label) is used.
    pub fn key_template(mut self, template: &'static str) -> Self {
        self.template = Some(template.into());
        self
    }

    /// Lease length. The lock always has this TTL in Redis; the watchdog extends it
    /// by this much every `ttl / 3` while the holder runs. Must be at least
    /// 1 ms and at most 365 days (otherwise acquisitions fail with
    /// `LockError::InvalidOptions`).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long `acquire` may wait for a busy lock before `LockError::Timeout`.
    /// Zero means a single attempt, which fails with `LockError::Busy` when
    /// the lock is held elsewhere.
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

    /// Keeps the lock until at least `hold` after it was acquired, even when
    /// the holder releases it sooner (default: released at once).
    ///
    /// For jobs that a whole fleet schedules and that must run once per
    /// period: the instance that gets the lock runs the job, and instances
    /// whose schedule fires up to `hold` later find the key still held and
    /// skip (see `try_with_lock`). A release before `hold` has passed sets
    /// the lock's TTL to the time left instead of deleting it (the same
    /// compare-and-`PEXPIRE` as a renewal, one round trip) and stops renewing;
    /// a holder still running after `hold` is renewed as usual and releases
    /// at once. Zero turns it off; longer than 365 days fails the acquisition
    /// with `InvalidOptions`.
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = (!hold.is_zero()).then_some(hold);
        self
    }

    /// Whether the fencing token comes with the lock (default `false`: it is
    /// issued on the first request, one more round trip then).
    ///
    /// With `true` an uncontended acquisition on one server (Redis,
    /// Sentinel's primary, a Cluster's) is one script call that takes the
    /// lock (`SET NX PX`) and issues its token; on Redlock, and with
    /// `min_replicas`, the token's request goes out beside the attempt, so
    /// both travel in one round trip. A waiter asks for the token as soon as
    /// it holds the lock; [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)
    /// then answers without a round trip. The token is the same as one asked
    /// for later: issued only to the holder, above every earlier holder's.
    /// Meant for code that writes to fenced storage under every lock: a lock
    /// whose token is never used would pay Redis a script call for nothing.
    /// Best effort: a token that could not be issued with the lock (a busy
    /// lock's first attempt, a Redlock node's connection error, a counter key
    /// of another type) is asked for again on the first request, and the
    /// acquisition itself never fails because of it.
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Replicated acquire, for one master with replicas: after the lock is
    /// granted, wait up to `timeout` until at least `replicas` replicas have
    /// acknowledged it; if fewer did, release it and fail with
    /// [`LockError::NotReplicated`](crate::LockError::NotReplicated).
    /// `replicas` = 0 turns it off (the default).
    ///
    /// Why: Redis replicates asynchronously. A master that grants a lock and
    /// dies before the write reaches a replica can be replaced by that replica,
    /// which then grants the same lock to a second client. With this option a
    /// granted lock is known to be on `replicas` replicas, so a failover to one
    /// of them keeps it.
    ///
    /// What it does not guarantee: `WAIT` does not make Redis strongly
    /// consistent. A failover may still promote a replica that did not
    /// acknowledge (Sentinel and Cluster choose by replication offset and
    /// availability, not by who acknowledged), an acknowledging replica may
    /// restart without persistence, and renewals are not waited for, so a
    /// promoted replica may expire the lock earlier than its holder expects.
    /// It narrows the window in which a failover loses a lock; it does not
    /// close it. For locks that must survive the loss of any server, use
    /// [`LockManager::redlock`](crate::LockManager::redlock).
    ///
    /// Cost: the acquire script and `WAIT` travel in one pipeline (one round
    /// trip) on a connection reserved for replicated acquisitions, opened on
    /// first use, so a slow `WAIT` never delays renewals or other locks; an
    /// attempt on a busy lock also waits for replicas that lag behind. `timeout`
    /// must be at least 1 ms (`WAIT 0` would block forever) and shorter than
    /// the ttl, or the acquisition fails with `InvalidOptions`.
    ///
    /// Backends: a single server and a Sentinel-managed primary
    /// ([`LockManagerBuilder::sentinel`](crate::LockManagerBuilder::sentinel))
    /// wait for the primary's replicas. The in-memory backend has no replicas
    /// and ignores this, so code configured for Redis runs unchanged in unit
    /// tests. A Redlock manager rejects it with `InvalidOptions`: its nodes
    /// are independent masters without failover, and its safety comes from
    /// the quorum instead.
    pub fn min_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.min_replicas = (replicas > 0).then_some(ReplicaRequirement {
            replicas,
            timeout: Some(timeout),
        });
        self
    }

    /// As [`min_replicas`](Self::min_replicas), waiting for the replicas up
    /// to the default timeout: 200 ms, or half the ttl when that is shorter.
    pub fn min_replicas_default_timeout(mut self, replicas: u32) -> Self {
        self.min_replicas = (replicas > 0).then_some(ReplicaRequirement {
            replicas,
            timeout: None,
        });
        self
    }

    /// The required replica acknowledgements and their timeout, if any.
    pub fn replicas(&self) -> Option<(u32, Duration)> {
        self.min_replicas
            .map(|required| (required.replicas, self.replica_timeout(required)))
    }

    fn replica_timeout(&self, required: ReplicaRequirement) -> Duration {
        required
            .timeout
            .unwrap_or_else(|| DEFAULT_REPLICA_TIMEOUT.min(self.ttl / 2))
    }

    pub(crate) fn ttl_millis(&self) -> Result<u64, crate::LockError> {
        if self.ttl > MAX_TTL {
            return Err(crate::LockError::InvalidOptions(format!(
                "ttl {:?} is longer than the longest lease, 365 days: a lock that outlives its holder must expire; keep the ttl short, the watchdog renews it",
                self.ttl
            )));
        }
        let ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(crate::LockError::InvalidOptions(
                "ttl must be at least 1 ms: every lock needs an expiry".into(),
            ));
        }
        Ok(ms)
    }

    /// The `hold_at_least` time, checked like a ttl.
    pub(crate) fn hold(&self) -> Result<Option<Duration>, crate::LockError> {
        match self.hold_at_least {
            Some(hold) if hold > MAX_TTL => Err(crate::LockError::InvalidOptions(format!(
                "hold_at_least {hold:?} is longer than the longest lease, 365 days"
            ))),
            hold => Ok(hold),
        }
    }

    /// The replica requirement, checked against the ttl.
    pub(crate) fn replication(&self) -> Result<Option<MinReplicas>, crate::LockError> {
        let Some(requirement) = self.min_replicas else {
            return Ok(None);
        };
        let required = MinReplicas {
            replicas: requirement.replicas,
            timeout: self.replica_timeout(requirement),
        };
        if required.timeout < Duration::from_millis(1) {
            return Err(crate::LockError::InvalidOptions(
                "min_replicas timeout must be at least 1 ms: WAIT with 0 would block forever"
                    .into(),
            ));
        }
        if required.timeout >= self.ttl {
            return Err(crate::LockError::InvalidOptions(format!(
                "min_replicas timeout {:?} must be shorter than the ttl {:?}: the lock could expire while waiting for replicas",
                required.timeout, self.ttl
            )));
        }
        Ok(Some(required))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_replica_timeout_is_200ms_or_half_a_shorter_ttl() {
        let options = LockOptions::new().min_replicas_default_timeout(2);
        assert_eq!(options.replicas(), Some((2, Duration::from_millis(200))));
        let short = options.ttl(Duration::from_millis(300));
        assert_eq!(short.replicas(), Some((2, Duration::from_millis(150))));
        assert_eq!(
            short
                .replication()
                .unwrap()
                .map(|required| required.timeout),
            Some(Duration::from_millis(150))
        );
    }

    #[test]
    fn zero_replicas_means_no_requirement() {
        assert_eq!(
            LockOptions::new()
                .min_replicas_default_timeout(0)
                .replicas(),
            None
        );
    }
}
