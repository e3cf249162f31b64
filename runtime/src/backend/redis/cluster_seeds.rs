//! A Redis Cluster's seeds ([`ClusterSeeds`]): the nodes a cluster client
//! starts from, and how a client and a command connection are opened from
//! them within the configured time limits.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::RedisError;

use super::connection::{connect_error, ping, RedisConfig};
use super::tls::TlsConfig;
use crate::{redact_url, LockError};

/// Some nodes of a Redis Cluster and what its clients trust: each connection
/// gets a client of its own, as the time limits are set per client.
#[derive(Clone)]
pub(crate) struct ClusterSeeds {
    urls: Vec<String>,
    tls: TlsConfig,
}

impl ClusterSeeds {
    /// The seeds `urls`, checked as [`TlsConfig::open_cluster_client`] does.
    pub(crate) fn new(urls: Vec<String>, tls: TlsConfig) -> Result<Self, LockError> {
        tls.open_cluster_client(&urls, Duration::from_secs(1), None)?;
        Ok(ClusterSeeds { urls, tls })
    }

    /// A RESP3 client within `config`'s connect timeout and `response_timeout`
    /// per request, redirections and retries included (`None`: unbounded).
    pub(in crate::backend) fn client(
        &self,
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> Result<ClusterClient, LockError> {
        self.tls
            .open_cluster_client(&self.urls, config.connect_timeout, response_timeout)
    }

    /// A cluster command connection, failing with `Connection` (or `Tls`)
    /// within the configured time limits; `response_timeout: None` leaves
    /// answers unbounded.
    pub(in crate::backend) async fn open(
        &self,
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> Result<ClusterConnection, LockError> {
        let client = self.client(config, response_timeout)?;
        let settings = ClusterSeeds::settings(config, response_timeout);
        // The cluster client asks every seed in turn, each within the
        // connect timeout; bound the whole start as for one server.
        let limit = config
            .connect_timeout
            .saturating_mul(2)
            .saturating_add(config.response_timeout);
        let opened = async {
            let mut connection = client.get_async_connection_with_config(settings).await?;
            ping(&mut connection).await?;
            Ok::<_, RedisError>(connection)
        };
        match tokio::time::timeout(limit, opened).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(err)) => Err(connect_error(err, &self.described())),
            Err(_) => Err(LockError::connection(format!(
                "no cluster node of {} answered within {limit:?}",
                self.described()
            ))),
        }
    }

    /// The seed URLs for error messages, passwords hidden.
    fn described(&self) -> String {
        let urls: Vec<String> = self.urls.iter().map(|url| redact_url(url)).collect();
        urls.join(", ")
    }

    /// The per-connection settings that go with [`client`](Self::client)
    /// (redis-rs resets the per-attempt limit from them).
    pub(in crate::backend) fn settings(
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> ClusterConfig {
        let settings = ClusterConfig::new().set_connection_timeout(config.connect_timeout);
        match response_timeout {
            Some(timeout) => settings.set_response_timeout(timeout),
            None => settings,
        }
    }
}
