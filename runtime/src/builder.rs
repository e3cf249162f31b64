//! `LockManagerBuilder`: the settings of a manager before it connects, and
//! which backend it connects to.

use std::time::Duration;

use crate::backend::{
    Backend, MemoryBackend, RedisBackend, RedisConfig, RedlockBackend, TlsConfig,
};
use crate::{LockError, LockManager};

/// Settings of a [`LockManager`] before it connects.
#[derive(Debug, Clone)]
pub struct LockManagerBuilder {
    namespace: String,
    redis: RedisConfig,
    tls: TlsConfig,
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            namespace: "lock:".to_owned(),
            redis: RedisConfig {
                connect_timeout: Duration::from_secs(1),
                response_timeout: Duration::from_secs(1),
            },
            tls: TlsConfig::default(),
        }
    }
}

impl LockManagerBuilder {
    /// Prefix of every lock key in Redis (default `lock:`). A `:` is added
    /// when the prefix does not end with one (`app` becomes `app:`), and
    /// internal keys (fencing counters, waiter queues) live under the prefix
    /// with `-fence`, `-queue` or `-wait` before that `:` (`app-fence:`). So
    /// every lock key starts with `<base>:` and every internal key with
    /// `<base>-`: no user key, whatever characters it holds, can name an
    /// internal key.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
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

    /// Trusts the root certificates in `pem` (one or more PEM `CERTIFICATE`
    /// blocks, e.g. a private CA) for `rediss://` servers, *instead of* the
    /// operating system's trust store; without it the system's store is used.
    /// Applies to [`connect`](Self::connect) and [`redlock`](Self::redlock);
    /// a PEM that cannot be parsed makes them fail with
    /// `LockError::InvalidOptions`. A certificate the server presents that
    /// does not chain to these roots makes them fail with
    /// `LockError::Tls`, which names the certificate problem.
    ///
    /// TLS uses rustls. At the first `rediss://` connection this installs
    /// rustls's `ring` provider as the process-wide default crypto provider,
    /// unless the application installed one before (which is then used).
    #[cfg(feature = "tls")]
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
    /// [`LockGuard::valid_until`]: crate::LockGuard::valid_until
    pub async fn redlock<I>(self, urls: I) -> Result<LockManager, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls = urls
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        let backend = RedlockBackend::connect(urls, self.redis, &self.tls).await?;
        Ok(self.build(Backend::Redlock(backend)))
    }

    /// A manager whose locks live in this process's memory.
    pub fn in_memory(self) -> LockManager {
        self.build(Backend::Memory(MemoryBackend::new()))
    }

    fn build(self, backend: Backend) -> LockManager {
        LockManager::new(backend, self.namespace)
    }
}
