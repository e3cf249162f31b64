//! The Sentinel backend: locks in the primary that Redis Sentinel names,
//! kept by a [`RedisBackend`] on that primary, which is replaced when a
//! failover moves the primary elsewhere.
//!
//! ## Behavior
//!
//! - Every call goes to the current primary's [`RedisBackend`], so a lock
//!   behaves exactly as on a single server (waiter queue and hand-off,
//!   fencing, `min_replicas`).
//! - A call that fails with a connection error, or that the node refuses as
//!   no longer the primary (`READONLY`, `MASTERDOWN`, `LOADING`), returns its
//!   error at once, the refusal as `LockError::Connection`, and is not
//!   retried; so does an acquisition too few replicas acknowledged
//!   (`NotReplicated`), which a replaced primary, left without replicas,
//!   gives. It also starts following the failover in the background: the
//!   Sentinels are asked for the primary (see `discovery`) and, if they name
//!   another node, a new [`RedisBackend`] on it takes over; the next calls go
//!   there. One resolution runs at a time (failures during it start none),
//!   at most one starts per [`RESOLVE_INTERVAL`], and each is bounded by the
//!   connect and response timeouts, so a dead set-up cannot make it spin.
//! - Every Sentinel announces a failover it completed (`+switch-master`);
//!   the manager listens on all of them (see `switches`) and follows at
//!   once, without waiting for a call to fail. That matters for a replaced
//!   primary still up: it takes writes until Sentinel demotes it, seconds
//!   later.
//! - A manager that switches deposes the primary it leaves (where a
//!   lock-delay is kept): in the background, within the response timeout,
//!   it tells that node to grant, hand over and renew nothing (see
//!   `depose.lua`). A replaced primary still up would otherwise renew its
//!   holders' leases until Sentinel demotes it (seconds later, or never if
//!   Sentinel cannot reach it), past the new primary's lock-delay; deposed,
//!   its holders learn at their next renewal that they lost their lease,
//!   and managers still on it get `DEPOSED` refusals, which make them look
//!   for the primary. Renewals there are scripts, never the server's own
//!   `SET … IFEQ`, which would bypass the deposition. A replaced primary no
//!   manager reaches is not deposed: `min_replicas` (or the server's
//!   `min-replicas-to-write`) is what stops it granting.
//! - Waiters subscribed on the old primary are no longer woken by its
//!   releases: on a switch every one of them is woken, tries again on the new
//!   primary, and watches there (the engine compares
//!   [`generation`](SentinelBackend::generation) with the one it watched).

pub(super) mod discovery;
mod switches;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use self::discovery::Sentinels;
use self::switches::Manager;
use crate::backend::redis::connection::RedisConfig;
use crate::backend::redis::lock_delay::LockDelay;
use crate::backend::wait_queue::WaitTicket;
use crate::backend::RedisBackend;
use crate::check::CheckReport;
use crate::keys::LockKey;
use crate::LockError;

/// Least time between the starts of two resolutions of the primary.
const RESOLVE_INTERVAL: Duration = Duration::from_millis(500);

/// Error replies of a node that does not (or no longer) take writes as the
/// primary, as redis-rs names their kinds or as Redis words them (inside a
/// script's error); `DEPOSED` is a deposed primary's (see `depose.lua`).
const NOT_PRIMARY: [&str; 7] = [
    "READONLY",
    "ReadOnly",
    "MASTERDOWN",
    "MasterDown",
    "LOADING",
    "BusyLoading",
    "DEPOSED",
];

/// Locks in the primary of one Sentinel-monitored service.
pub(crate) struct SentinelBackend {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Sentinels,
    config: RedisConfig,
    /// The namespace's node marker, where a replaced primary is deposed.
    marker: Arc<str>,
    current: Mutex<Current>,
    /// When the last resolution started; locked while one runs.
    resolving: tokio::sync::Mutex<Option<Instant>>,
}

/// The primary in use, and how many times it was replaced.
#[derive(Clone)]
struct Current {
    generation: u64,
    addr: Arc<str>,
    primary: Arc<RedisBackend>,
}

impl SentinelBackend {
    /// Finds the primary of the service through `sentinels` and connects to
    /// it; fails as [`Sentinels::primary`] and [`RedisBackend::open`] do.
    /// `marker` is the namespace's node marker, where a primary the
    /// Sentinels replace is deposed.
    pub(crate) async fn connect(sentinels: Sentinels, marker: Arc<str>) -> Result<Self, LockError> {
        let config = sentinels.config();
        let found = sentinels.primary().await?;
        let primary = RedisBackend::open(found.client, config).await?.deposable();
        tracing::debug!(service = sentinels.service(), primary = %found.addr, "connected to the primary named by Sentinel");
        let shared = Arc::new(Shared {
            sentinels,
            config,
            marker,
            current: Mutex::new(Current {
                generation: 0,
                addr: found.addr.into(),
                primary: Arc::new(primary),
            }),
            resolving: tokio::sync::Mutex::new(None),
        });
        Shared::hear_switches(&shared);
        Ok(SentinelBackend { shared })
    }

    /// Runs `call` on the current primary; its error passes through
    /// [`checked`](Self::checked), which starts following a failover.
    pub(crate) async fn on_primary<T>(
        &self,
        call: impl AsyncFnOnce(&RedisBackend) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let current = self.shared.current();
        let result = call(&current.primary).await;
        self.checked(&current, result)
    }

    /// Checks the current primary as one server is checked (see `probe`),
    /// then asks every Sentinel; a Sentinel that fails stays in the report.
    pub(crate) async fn check(&self, key: &LockKey) -> Result<CheckReport, LockError> {
        let current = self.shared.current();
        let result = current.primary.check(key, true).await;
        let mut report = self.checked(&current, result)?;
        report.deployment = format!("Sentinel service `{}`", self.shared.sentinels.service());
        for sentinel in self.shared.sentinels.reports().await {
            if let Some(failure @ LockError::Auth { .. }) = &sentinel.failure {
                return Err(failure.clone());
            }
            report.nodes.push(sentinel);
        }
        Ok(report)
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.shared.current().primary.local_waiters(key)
    }

    /// How many times the primary was replaced.
    pub(crate) fn generation(&self) -> u64 {
        self.shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        let current = self.shared.current();
        current.primary.watch(key).await
    }

    /// Passes `result` on; a failure that may mean the primary moved starts
    /// following the failover, and a node's refusal as not the primary
    /// becomes a `Connection` error (retryable, as the next call goes to the
    /// new primary). Too few replicas (`NotReplicated`) counts too: a primary
    /// that Sentinel replaced has none left.
    fn checked<T>(&self, current: &Current, result: Result<T, LockError>) -> Result<T, LockError> {
        let err = match result {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let err = match err {
            LockError::Connection { .. } | LockError::NotReplicated { .. } => err,
            LockError::Server { detail, source } if is_not_primary(&detail) => {
                LockError::Connection {
                    detail: format!(
                        "{} is no longer the primary of service `{}` ({detail}); the manager is switching to the primary the Sentinels name, retry",
                        current.addr,
                        self.shared.sentinels.service()
                    ),
                    source,
                }
            }
            other => return Err(other),
        };
        self.shared.follow_in_background(current.generation);
        Err(err)
    }
}

impl Shared {
    fn current(&self) -> Current {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts [`follow`](Self::follow) on the current runtime, so that a
    /// caller that goes away does not cut a resolution short.
    fn follow_in_background(self: &Arc<Self>, failed: u64) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(Arc::clone(self).follow(failed));
        }
    }

    /// Follows every failover a Sentinel announces at once (see
    /// `switches`), for as long as the manager exists.
    fn hear_switches(shared: &Arc<Self>) {
        let on_switch = {
            let shared = Arc::downgrade(shared);
            move || match shared.upgrade() {
                Some(shared) => {
                    tokio::spawn(shared.follow_announced());
                    Manager::Alive
                }
                None => Manager::Gone,
            }
        };
        let alive = {
            let shared = Arc::downgrade(shared);
            move || {
                if shared.strong_count() > 0 {
                    Manager::Alive
                } else {
                    Manager::Gone
                }
            }
        };
        switches::listen(
            shared.sentinels.clients(),
            shared.sentinels.service(),
            shared.config.connect_timeout,
            on_switch,
            alive,
        );
    }

    /// After a Sentinel announced a failover: waits for a resolution under
    /// way to end, then asks the Sentinels and switches if the primary moved
    /// (each Sentinel announces it, so the later ones find nothing to do).
    async fn follow_announced(self: Arc<Self>) {
        let mut last_start = self.resolving.lock().await;
        *last_start = Some(Instant::now());
        self.switch_if_moved().await;
    }

    /// After a call on the primary of generation `failed` failed: asks the
    /// Sentinels for the primary and switches to it if it moved. Does nothing
    /// while another resolution runs, once the primary was replaced already,
    /// or within [`RESOLVE_INTERVAL`] of the last resolution's start.
    async fn follow(self: Arc<Self>, failed: u64) {
        let Ok(mut last_start) = self.resolving.try_lock() else {
            return;
        };
        let current = self.current();
        if current.generation != failed
            || last_start.is_some_and(|at| at.elapsed() < RESOLVE_INTERVAL)
        {
            return;
        }
        *last_start = Some(Instant::now());
        self.switch_if_moved().await;
    }

    /// Asks the Sentinels for the primary and, if they name another node
    /// than the current one, connects to it and sends the next calls there.
    /// Runs under the `resolving` lock.
    async fn switch_if_moved(&self) {
        let current = self.current();
        let service = self.sentinels.service();
        let found = match self.sentinels.primary().await {
            Ok(found) => found,
            Err(err) => {
                tracing::warn!(service, error = %err, "primary not found; the next failed call asks the Sentinels again");
                return;
            }
        };
        if *found.addr == *current.addr {
            tracing::debug!(service, primary = %found.addr, "the primary has not moved");
            return;
        }
        let limit = self.sentinels.resolve_limit();
        let primary = match tokio::time::timeout(
            limit,
            RedisBackend::open(found.client, self.config),
        )
        .await
        {
            Ok(Ok(primary)) => primary.deposable().succeeding(&current.primary),
            Ok(Err(err)) => {
                tracing::warn!(service, primary = %found.addr, error = %err, "cannot connect to the new primary; the next failed call tries again");
                return;
            }
            Err(_) => {
                tracing::warn!(service, primary = %found.addr, "no connection to the new primary within {limit:?}; the next failed call tries again");
                return;
            }
        };
        tracing::info!(service, from = %current.addr, to = %found.addr, "following a failover to the new primary");
        let primary = Arc::new(primary);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Current {
            generation: current.generation + 1,
            addr: found.addr.into(),
            primary: Arc::clone(&primary),
        };
        // Its waiters listen on the old primary: each tries again now, on
        // the new one, and watches there.
        current.primary.wake_every_waiter();
        if self.config.lock_delay != LockDelay::Off {
            let limit = self.config.response_timeout;
            tokio::spawn(depose(current, primary, Arc::clone(&self.marker), limit));
        }
    }
}

/// Deposes `replaced`, the primary before a failover to `successor` (see
/// `depose.lua`), within `limit`: if it is still up and taking writes, its
/// holders learn at their next renewal that they lost their lease. One that
/// does not answer in time, or refuses (a replica already), is left as it
/// is, and so is one that is `successor` under another address.
async fn depose(
    replaced: Current,
    successor: Arc<RedisBackend>,
    marker: Arc<str>,
    limit: Duration,
) {
    let addr = &replaced.addr;
    let deposing = replaced.primary.depose(&marker, &successor);
    match tokio::time::timeout(limit, deposing).await {
        Ok(Ok(true)) => {
            tracing::info!(primary = %addr, "deposed the replaced primary: it grants and renews no lock from now on");
        }
        Ok(Ok(false)) => {
            tracing::info!(primary = %addr, "not deposed: the primary the Sentinels name now, under another address");
        }
        Ok(Err(err)) => {
            tracing::debug!(primary = %addr, error = %err, "the replaced primary refused its deposition (a replica already, or unreachable)");
        }
        Err(_) => {
            tracing::debug!(primary = %addr, "the replaced primary did not answer its deposition within {limit:?}");
        }
    }
}

/// Whether a server error says the node does not take writes as the primary.
fn is_not_primary(message: &str) -> bool {
    NOT_PRIMARY.iter().any(|code| message.contains(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_a_former_primary_are_recognised_in_both_wordings() {
        assert!(is_not_primary(
            "ReadOnly: You can't write against a read only replica."
        ));
        assert!(is_not_primary(
            "ERR Error running script: -READONLY You can't write against a read only replica."
        ));
        assert!(is_not_primary("MasterDown: Link with MASTER is down"));
        assert!(is_not_primary(
            "BusyLoading: Redis is loading the dataset in memory"
        ));
        assert!(!is_not_primary("NoScript: No matching script"));
    }
}
