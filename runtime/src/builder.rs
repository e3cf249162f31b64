//! `LockManagerBuilder`: the settings of a manager before it connects, and
//! which backend it connects to.

use std::time::Duration;

use crate::backend::{
    Backend, LockDelay, MemoryBackend, RedisBackend, RedisConfig, RedlockBackend, SentinelBackend,
    SentinelCredentials, Sentinels, TlsConfig,
};
use crate::token::Identity;
use crate::{LockError, LockManager};

/// Settings of a [`LockManager`] before it connects.
#[derive(Debug, Clone)]
pub struct LockManagerBuilder {
    namespace: String,
    name: Option<String>,
    redis: RedisConfig,
    tls: TlsConfig,
    sentinel_credentials: Option<SentinelCredentials>,
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            namespace: "lock:".to_owned(),
            name: None,
            redis: RedisConfig {
                connect_timeout: Duration::from_secs(1),
                response_timeout: Duration::from_secs(1),
                lock_delay: LockDelay::default(),
                delay_after_start: false,
            },
            tls: TlsConfig::default(),
            sentinel_credentials: None,
        }
    }
}

impl LockManager {
    /// Settings for a new manager: namespace and time limits.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }
}

impl LockManagerBuilder {
    /// The name this manager gives its locks' holders, for operators (see
    /// `LockManager::inspect`): e.g. the service's name. Default:
    /// `host:pid`. Cut to 64 bytes; `|` and control characters become `_`.
    /// Every lock records it with the host, the process id, when it was
    /// taken and its label, inside its owner token (no extra key or round
    /// trip).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Prefix of every lock key in Redis (default `lock:`). A `:` is added
    /// when the prefix does not end with one (`app` becomes `app:`), and
    /// internal keys (fencing counters, waiter queues) live under the prefix
    /// with `-fence`, `-queue` or `-wait` before that `:` (`app-fence:`). So
    /// every lock key starts with `<base>:` and every internal key with
    /// `<base>-`: no user key, whatever characters it holds, can name an
    /// internal key. So that no namespace's names can be another's, the Redis
    /// constructors refuse with `InvalidOptions` a namespace holding a `:`
    /// before its end (`a:b`) or ending in `-` and an internal role
    /// (`app-fence`, `lock-rw`, ...).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Credentials for the Sentinels themselves, for
    /// [`sentinel`](Self::sentinel): the password of their `requirepass`
    /// (`username` `None`) or of an ACL user. Without them Sentinels are
    /// spoken to without credentials, and Sentinels that ask for some make
    /// `sentinel` fail with `LockError::Connection` naming this setting. The
    /// primary's credentials are those of the first Sentinel URL
    /// (`redis://user:password@host:port`), as before; the password never
    /// shows in the builder's `Debug` output.
    pub fn sentinel_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.sentinel_credentials = Some(SentinelCredentials {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        });
        self
    }

    /// Longest time to open a connection to Redis (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.redis.connect_timeout = timeout;
        self
    }

    /// Longest time to wait for one command's answer (default 1 s). Keep it
    /// well below your lock TTLs: a renewal slower than the lease counts as lost.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.redis.response_timeout = timeout;
        self
    }

    /// How long a server that became the primary (a Sentinel failover, a
    /// Redis Cluster failover, a replica promoted by hand) or came back without its data (restarted
    /// empty, or from a stale snapshot) grants no lock, permit or read/write
    /// lease: every lease it may have lost must have ended first, or a second
    /// holder could get in while the first still holds. Default: the longest
    /// ttl this manager has asked for; when managers of the same keys use
    /// different ttls, set the longest of them here. The server keeps the
    /// delay (every manager honours it, also one started later), counted
    /// from the first grant or renewal it is asked for after the change;
    /// waiters wait through it; a lease whose grant is still on the server
    /// is renewed. A server restarted empty learns it lost data from a
    /// manager that was connected before (it saw the old `run_id`) or from a
    /// holder's renewal; until then it grants as a new server would. One
    /// server, Sentinel and Redis Cluster, where each primary keeps it per
    /// slot (the marker lives in the lock's slot: a slot first asked for
    /// long after a promotion still waits out a delay then); Redlock keeps
    /// its own rule. See the guide, `leasehold::guide::deployments`,
    /// "Failover and restarts".
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.redis.lock_delay = if delay.is_zero() {
            LockDelay::Off
        } else {
            LockDelay::Fixed(delay)
        };
        self
    }

    /// Keeps the [`lock_delay`](Self::lock_delay) also on a server that
    /// started less than the delay ago and holds no marker of this
    /// namespace: it grants nothing until it has been up for the delay. A
    /// server restarted empty cannot tell itself from a new one; without
    /// this, a manager that connects to it first after the restart is
    /// granted a lock that a holder connected before may still hold, until
    /// that holder's next renewal (or any manager that knew the old server)
    /// tells the server and starts the delay. The price: after a server's
    /// first start, the first grants of each namespace wait up to the delay
    /// minus the server's uptime. Off by default, so a service started
    /// beside a new Redis is not held up; turn it on where a single server
    /// runs without persistence and may restart.
    pub fn lock_delay_after_server_start(mut self) -> Self {
        self.redis.delay_after_start = true;
        self
    }

    /// Turns the [`lock_delay`](Self::lock_delay) off: locks are granted
    /// again as soon as a promoted or restarted server answers, and a lease
    /// that server lost may still be held, so two holders may run at once.
    /// For users who choose availability over exclusion (and fence every
    /// write). It also saves the delay's check: the uncontended attempt is
    /// a plain `SET NX PX` again instead of a script (see BENCHMARKS.md).
    pub fn risk_two_holders_after_failover(mut self) -> Self {
        self.redis.lock_delay = LockDelay::Off;
        self
    }

    /// Trusts the root certificates in `pem` (one or more PEM `CERTIFICATE`
    /// blocks, e.g. a private CA) for `rediss://` servers, *instead of* the
    /// operating system's trust store; without it the system's store is used.
    /// Applies to [`connect`](Self::connect), [`redlock`](Self::redlock),
    /// [`sentinel`](Self::sentinel) (its Sentinels and primary alike) and
    /// [`cluster`](Self::cluster) (every node);
    /// a PEM that cannot be parsed makes them fail with
    /// `LockError::InvalidOptions`. A certificate the server presents that
    /// does not chain to these roots makes them fail with
    /// `LockError::Tls`, which names the certificate problem.
    ///
    /// TLS uses rustls. At the first `rediss://` connection this installs
    /// rustls's `ring` provider as the process-wide default crypto provider,
    /// unless the application installed one before (which is then used).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: Vec<u8>) -> Self {
        self.tls.root_certificates = Some(pem);
        self
    }

    /// Connects to one Redis server: `redis://[user:pass@]host[:port][/db]`,
    /// or `rediss://…` for TLS with the `tls` feature (see
    /// `tls_root_certificate`). Fails with `LockError::Connection` within
    /// about twice the connect timeout when Redis is unreachable,
    /// `LockError::Tls` when the TLS handshake fails, and with
    /// `LockError::InvalidUrl` for a URL it cannot use (including `rediss://`
    /// without the `tls` feature).
    pub async fn connect(self, url: &str) -> Result<LockManager, LockError> {
        crate::keys::check_namespace(&self.namespace)?;
        let backend = RedisBackend::connect(url, self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redis(Box::new(backend))))
    }

    /// Connects to N independent Redis masters for Redlock: a lock is held
    /// while a majority of them (N / 2 + 1) holds it, so it survives the loss
    /// of up to N − quorum nodes. `N` must be odd (3 or 5 in practice): an
    /// even N is refused with `LockError::InvalidOptions`, because it survives
    /// no more failures than N − 1 nodes would. Connects to all nodes at once
    /// and fails with `LockError::Connection` when fewer than a quorum answer;
    /// the other nodes are connected when they come back.
    ///
    /// Each acquisition costs one round trip to all nodes plus one more to
    /// write the fencing token back (which keeps tokens strictly increasing
    /// across quorums); renewal and release cost one. The lease is valid for
    /// the ttl less a safety margin (6 % of the ttl + 2 ms), counted from
    /// before the first request, and [`LockGuard::valid_until`] reports it.
    /// The nodes must not fail over to replicas, and a node that restarts
    /// without its data must stay down for at least the longest ttl in use,
    /// so that every lock that depended on it has expired or been reported
    /// lost before it rejoins. `LockOptions::min_replicas` is refused with
    /// `InvalidOptions`, and so is a ttl under 10 ms. Waiters are woken by
    /// releases on any node and retry (they do not queue in Redis as on a
    /// single server).
    ///
    /// [`LockGuard::valid_until`]: crate::HeldLease::valid_until
    pub async fn redlock<I>(self, urls: I) -> Result<LockManager, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        crate::keys::check_namespace(&self.namespace)?;
        let backend = RedlockBackend::connect(owned(urls), self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redlock(backend)))
    }

    /// Connects to the primary that Redis Sentinel names for `service_name`
    /// and follows it across failovers. `sentinel_urls` are
    /// `redis://host:port` of one or more Sentinels (`rediss://` for TLS with
    /// the `tls` feature). Sentinels are spoken to with the
    /// [`sentinel_credentials`](Self::sentinel_credentials) if set, else
    /// without credentials; the user, password and database of the first URL
    /// (`redis://user:pass@host:port/db`)
    /// are used for the primary, which is spoken to with TLS if that URL is
    /// `rediss://` (its certificate must then name the address the Sentinels
    /// announce).
    ///
    /// All Sentinels are asked at once, and of the nodes they name, the one
    /// most of them name that answers `ROLE` as a primary is used (a node
    /// that is down or a replica is skipped); finding it takes at most twice
    /// the sum of the connect and response timeouts, connecting to it as long
    /// as [`connect`](Self::connect). Fails with `LockError::Connection` when no
    /// Sentinel answers or the node they name is not a reachable primary, with
    /// `LockError::UnknownService` when the Sentinels that answer do not know
    /// `service_name`, with `LockError::InvalidOptions` for an empty list and
    /// with `LockError::InvalidUrl` for a URL it cannot use.
    ///
    /// Locks behave as on a single server ([`connect`](Self::connect)):
    /// waiter queue and hand-off, fencing tokens, watchdog and
    /// `LockOptions::min_replicas`, all on the current primary.
    ///
    /// # Failover
    ///
    /// The manager listens for the failovers every Sentinel announces
    /// (`+switch-master`) and then asks the Sentinels for the primary at
    /// once; a subscription is checked with a `PING` every second and, when
    /// opened again after it was lost, asks for the primary at once, so an
    /// announcement missed meanwhile is caught up. Besides, a call that fails because the primary is unreachable,
    /// or because the node answers as a replica (`READONLY`, `MASTERDOWN`,
    /// `LOADING`), returns `LockError::Connection` (never retried: an
    /// acquisition whose answer was lost is undone in the background) and
    /// makes the manager ask in the background, at most once per 500 ms.
    /// Once the Sentinels name another node, the next calls go there, with no
    /// need to rebuild the manager. A held lease whose renewal fails is
    /// renewed on the new primary: it is kept if the lock reached that node,
    /// and reported lost (before its validity ends) if not.
    ///
    /// Sentinel fails over asynchronously, so a failover can lose a lock: one
    /// the old primary granted but had not yet replicated is missing on the
    /// new primary, which grants it again while the first holder's lease is
    /// still valid (that holder learns that its lease is lost once its
    /// renewals reach the new primary). The same goes for a grant by a
    /// former primary that Sentinel has replaced but not yet turned into a
    /// replica (which takes Sentinel some seconds): a manager keeps using it
    /// until it hears the announcement, which Sentinel publishes when the
    /// promotion is done (the tests see the switch within 3 s, also when
    /// the manager could not hear its Sentinels at the time, from the moment
    /// it hears them again), and
    /// other clients may too. A manager that switches deposes the primary it
    /// leaves (where the lock-delay is kept): it tells it, if it answers, to
    /// grant, hand over and renew nothing, so its holders learn at their
    /// next renewal that they lost their lease, and managers still on it
    /// look for the new primary. One that no manager reaches keeps granting. [`LockOptions::min_replicas`] closes
    /// that window: a lock is granted only once that many replicas
    /// acknowledged it, and a former primary with no replica left refuses it
    /// with `LockError::NotReplicated` (and the manager then looks for the
    /// new primary). Ask for as many replicas as Sentinel may promote:
    /// Sentinel picks a replica by priority and replication offset, not by
    /// acknowledgement, so with fewer the window narrows but stays open.
    /// Where a double grant would do harm, also check fencing tokens: they
    /// keep rising across the failover (they follow the server clock, see
    /// [`LockGuard::fencing_token`]), so storage rejects the stale holder.
    ///
    /// [`LockOptions::min_replicas`]: crate::LockOptions::min_replicas
    /// [`LockGuard::fencing_token`]: crate::LockGuard::fencing_token
    pub async fn sentinel<I>(
        self,
        service_name: &str,
        sentinel_urls: I,
    ) -> Result<LockManager, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        crate::keys::check_namespace(&self.namespace)?;
        let sentinels = Sentinels::new(
            service_name,
            &owned(sentinel_urls),
            self.redis,
            &self.tls,
            self.sentinel_credentials.as_ref(),
        )?;
        let marker = crate::keys::KeySpace::new(self.namespace.clone()).node_marker();
        let backend = SentinelBackend::connect(sentinels, marker.into()).await?;
        Ok(self.build(Backend::Sentinel(backend)))
    }

    /// Connects to a Redis Cluster. `urls` are `redis://[user:pass@]host:port`
    /// of some of its nodes (`rediss://` for TLS with the `tls` feature); the
    /// first that answers tells the client the others and which primary
    /// serves which slot. Fails with `LockError::Connection` when no node
    /// answers within about twice the connect timeout plus the response
    /// timeout, with `LockError::InvalidUrl` for an empty list or a URL it
    /// cannot use.
    ///
    /// Locks behave as on a single server ([`connect`](Self::connect)):
    /// waiter queue and hand-off, fencing tokens, watchdog and
    /// `LockOptions::min_replicas`, each on the primary that serves the
    /// lock's slot. Every key a lock uses (the lock, its fencing counter and
    /// waiter queue) starts with one hash tag, so they share a slot whatever
    /// characters the key holds: the key's own hash tag if it has one
    /// (`order:{42}:a` and `order:{42}:b` share a slot), else a hash of the
    /// key (`{0bfba0e5423746e4}lock:stock:1`). Releases are announced on
    /// sharded channels (`SPUBLISH`, Redis 7 or later), which stay on the
    /// slot's nodes. Commands follow `MOVED` and `ASK` during resharding,
    /// within the response timeout.
    ///
    /// # Failover
    ///
    /// When a primary fails, calls on its slots fail with
    /// `LockError::Connection` until the cluster has promoted a replica (about
    /// its `cluster-node-timeout`), then go to the new primary; waiters
    /// subscribe again there and are woken. A held lease whose renewals fail
    /// for that long is reported lost before its validity ends; one that
    /// reaches the new primary is kept if the lock was replicated to it.
    /// Replication is asynchronous, so as with Sentinel a failover can lose a
    /// lock the old primary granted but had not replicated; the promoted
    /// replica keeps a [lock-delay](Self::lock_delay) in each slot it is
    /// asked for, so it does not grant such a lock again while that lease
    /// may be valid. `LockOptions::min_replicas` keeps the lock itself (it is
    /// granted only once that many replicas of its shard acknowledged it),
    /// and fencing tokens keep rising across the failover (see
    /// [`LockGuard::fencing_token`]).
    ///
    /// [`LockGuard::fencing_token`]: crate::LockGuard::fencing_token
    pub async fn cluster<I>(self, urls: I) -> Result<LockManager, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        crate::keys::check_namespace(&self.namespace)?;
        let backend = RedisBackend::connect_cluster(&owned(urls), self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redis(Box::new(backend))))
    }

    /// A manager whose locks live in this process's memory.
    pub fn in_memory(self) -> LockManager {
        self.build(Backend::Memory(MemoryBackend::new()))
    }

    fn build(self, backend: Backend) -> LockManager {
        let identity = Identity::of_this_process(self.name.as_deref());
        LockManager::new(backend, self.namespace, identity)
    }
}

/// The URLs a constructor was given, as owned strings.
fn owned<I>(urls: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    urls.into_iter()
        .map(|url| url.as_ref().to_owned())
        .collect()
}
