//! `LockManager`: the entry point for taking locks.

use std::sync::Arc;

use crate::backend::Backend;
use crate::keys::{KeySpace, LockKey};
use crate::kinds::kind::Kind;
use crate::lease::registry::Leases;
use crate::lease::seats::Seats;
use crate::lease::watchdog::Watchdog;
use crate::lease::{shutdown, Lease, Leasing};
use crate::token::{Identity, OwnerToken};
use crate::{CheckReport, LockError, LockGuard};

/// Hands out locks from one backend. Cheap to clone; clones share the
/// backend's multiplexed, auto-reconnecting connections (one per server) and
/// its notification channels.
///
/// Build one at start-up (`connect`, `sentinel`, `cluster`, `redlock`, or
/// [`builder`](Self::builder) for settings), hand it to the attributes with
/// `leasehold::install`, and end with [`shutdown`](Self::shutdown):
///
/// ```no_run
/// # use leasehold_runtime::{LockError, LockManager, LockOptions};
/// # async fn example() -> Result<(), LockError> {
/// let locks = LockManager::connect("redis://127.0.0.1:6379").await?; // Auth here, not later
/// println!("{}", locks.check().await?); // what the locks need, and what weakens them
/// let total = locks.with_lock("stock:42", LockOptions::new(), async { 42 }).await?;
/// locks.shutdown().await; // releases every lease this manager holds
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockManager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    /// Its backend, renewal timer, held leases and runtime, which every
    /// lease it starts shares.
    leasing: Arc<Leasing>,
    keys: KeySpace,
    /// Written into every owner token this manager issues.
    identity: Identity,
    /// Which of its tasks hold which keys (one holder per key, see `seats`).
    seats: Arc<Seats>,
}

impl LockManager {
    /// A manager over `backend` whose keys live under `namespace` (a `:` is
    /// added when missing; see `LockManagerBuilder::namespace`).
    pub(crate) fn new(backend: Backend, namespace: String, identity: Identity) -> LockManager {
        crate::describe_metrics();
        let keys = if backend.needs_hash_tags() {
            KeySpace::hash_tagged(namespace)
        } else {
            KeySpace::new(namespace)
        };
        LockManager {
            inner: Arc::new(ManagerInner {
                leasing: Arc::new(Leasing::new(backend)),
                keys,
                identity,
                seats: Arc::default(),
            }),
        }
    }

    /// Connects to one Redis server with default settings; see [`LockManagerBuilder::connect`](crate::LockManagerBuilder::connect).
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// Connects to independent Redis masters for Redlock with default
    /// settings; see [`LockManagerBuilder::redlock`](crate::LockManagerBuilder::redlock).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
    ///
    /// let locks = LockManager::redlock([
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    ///     "redis://127.0.0.1:7003",
    /// ])
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn redlock<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().redlock(urls).await
    }

    /// Connects to the primary that Redis Sentinel names for `service_name`,
    /// with default settings, and follows it across failovers; see
    /// [`LockManagerBuilder::sentinel`](crate::LockManagerBuilder::sentinel), including what an asynchronous
    /// failover can do to a lock and how `LockOptions::min_replicas` prevents it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
    ///
    /// let locks = LockManager::sentinel(
    ///     "mymaster",
    ///     [
    ///         "redis://127.0.0.1:26379",
    ///         "redis://127.0.0.1:26380",
    ///         "redis://127.0.0.1:26381",
    ///     ],
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sentinel<I>(service_name: &str, sentinel_urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().sentinel(service_name, sentinel_urls).await
    }

    /// Connects to a Redis Cluster through any of its nodes, with default
    /// settings; see [`LockManagerBuilder::cluster`](crate::LockManagerBuilder::cluster), including how keys map
    /// to slots and what a failover can do to a lock.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::LockManager;
    ///
    /// let locks = LockManager::cluster([
    ///     "redis://127.0.0.1:7000",
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    /// ])
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cluster<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().cluster(urls).await
    }

    /// A manager whose locks live in this process: same semantics as Redis
    /// (TTL, owner tokens, fencing, waiting without polling), no server needed.
    /// For unit tests and single-process services.
    pub fn in_memory() -> Self {
        Self::builder().in_memory()
    }

    /// The prefix of every lock key in the backend.
    pub fn namespace(&self) -> &str {
        self.inner.keys.namespace()
    }

    /// Checks, without taking a lock, what this manager will need of its
    /// servers: a start-up and readiness probe. Each node is asked once
    /// (round trip, server and version, the native commands locks will use
    /// there), every command, key and channel the locks need is tried
    /// against the user's ACL in a form that changes nothing, and the
    /// servers' settings are read for what weakens the lock's guarantees
    /// (eviction of lock keys, replicas no grant waits for, no append-only
    /// file, a clock that jumped), which the report lists as risks.
    ///
    /// Fails with `Auth` when a node refuses the credentials, with
    /// `PermissionDenied` naming every ACL rule to add, and with
    /// `Connection` when the primary (every Cluster primary, a quorum of
    /// Redlock nodes) does not answer; a Sentinel or a Redlock node beyond
    /// the quorum that fails stays in the report ([`Verdict::Degraded`]).
    /// In memory there is nothing to check: an empty, healthy report.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold_runtime::LockError> {
    /// use leasehold_runtime::{LockManager, Verdict};
    ///
    /// let locks = LockManager::connect("redis://127.0.0.1:6379").await?;
    /// let report = locks.check().await?;
    /// println!("{report}");
    /// if report.verdict() != Verdict::Healthy {
    ///     eprintln!("the lock server's settings weaken its guarantees: see the risks above");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`Verdict::Degraded`]: crate::Verdict::Degraded
    pub async fn check(&self) -> Result<CheckReport, LockError> {
        let probe = self.lock_key(&format!(
            "leasehold-check-{}",
            OwnerToken::generate().as_str()
        ));
        self.backend().check(&probe).await
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.inner.leasing.backend
    }

    /// What the leases this manager starts share (see [`Lease::start`]).
    pub(crate) fn leasing(&self) -> &Arc<Leasing> {
        &self.inner.leasing
    }

    /// The leases this manager and its clones hold, and whether it is shut down.
    pub(crate) fn leases(&self) -> &Leases<Lease> {
        &self.inner.leasing.leases
    }

    /// The seats its tasks hold, key by key.
    pub(crate) fn seats(&self) -> &Arc<Seats> {
        &self.inner.seats
    }

    /// The key space of this manager's locks.
    pub(crate) fn key_space(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// Who this manager is, as its owner tokens say.
    pub(crate) fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// The names of the lock on `key` (see `keys`).
    pub(crate) fn lock_key(&self, key: &str) -> LockKey {
        self.inner.keys.key(Kind::Lock, key)
    }

    /// Renews the leases `guards` own (not re-entered ones) together, in one
    /// cycle; see `RenewalTimer::renew_together`. The returned watchdog is
    /// to be stopped when the guards are released.
    pub(crate) fn renew_together(&self, guards: &[LockGuard]) -> Option<Arc<Watchdog>> {
        let watchdogs: Vec<&Arc<Watchdog>> = guards
            .iter()
            .filter(|guard| !guard.is_reentered())
            .filter_map(|guard| guard.lease().watchdog())
            .collect();
        self.inner.leasing.renewals.renew_together(&watchdogs)
    }

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
        shutdown::release_all(self.leases()).await
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("namespace", &self.inner.keys.namespace())
            .finish_non_exhaustive()
    }
}
