//! Where a Redis backend keeps its locks ([`Target`]: one server, or a
//! Redis Cluster's seeds) and the command connection it opens there
//! ([`Commands`]), which the cluster link replaces when it stalls.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, Value};

use super::cluster_link::ClusterLink;
use super::connection::{connect_error, manager_config, open_manager, ping, RedisConfig};
use super::tls::TlsConfig;
use crate::{redact_url, LockError};

/// Where a [`RedisBackend`](super::RedisBackend) keeps its locks: one server,
/// or a Redis Cluster, whose client sends each command to the primary of its
/// key's slot and follows redirections (`MOVED`, `ASK`) and failovers.
#[derive(Clone)]
///
/// Both clients are boxed: their sizes differ several times over, one way
/// without the `tls` feature and the other way with it.
pub(crate) enum Target {
    Server(Box<Client>),
    Cluster(Box<ClusterSeeds>),
}

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

/// A command connection to a [`Target`]: both reconnect by themselves, and
/// a cluster's is replaced when it stalls (see `cluster_link`).
#[derive(Clone)]
pub(in crate::backend) enum Commands {
    Server(ConnectionManager),
    Cluster(ClusterLink),
}

impl Target {
    /// Opens a command connection, failing with `Connection` (or `Tls`) within
    /// the configured time limits; `response_timeout: None` leaves answers
    /// unbounded (for calls that bound themselves).
    pub(in crate::backend) async fn open(
        &self,
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> Result<Commands, LockError> {
        match self {
            Target::Server(client) => {
                let settings = manager_config(config).set_response_timeout(response_timeout);
                Ok(Commands::Server(
                    open_manager(client, config, settings).await?,
                ))
            }
            Target::Cluster(seeds) => {
                let connection = seeds.open(config, response_timeout).await?;
                Ok(Commands::Cluster(ClusterLink::new(
                    connection,
                    (**seeds).clone(),
                    config,
                    response_timeout,
                )))
            }
        }
    }

    /// Whether release messages go out on sharded channels (`SPUBLISH`),
    /// which a cluster keeps on the nodes of the channel's slot.
    pub(in crate::backend) fn sharded_pubsub(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }
}

impl ConnectionLike for Commands {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Commands::Server(connection) => connection.req_packed_command(cmd),
            Commands::Cluster(link) => Box::pin(async move {
                let answer = link.connection().req_packed_command(cmd).await;
                link.observe(&answer);
                answer
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Commands::Server(connection) => connection.req_packed_commands(pipeline, offset, count),
            Commands::Cluster(link) => Box::pin(async move {
                let answer = link
                    .connection()
                    .req_packed_commands(pipeline, offset, count)
                    .await;
                link.observe(&answer);
                answer
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Commands::Server(connection) => connection.get_db(),
            Commands::Cluster(link) => link.connection().get_db(),
        }
    }
}
