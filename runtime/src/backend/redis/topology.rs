//! Where a Redis backend keeps its locks ([`Topology`]: one server, or a
//! Redis Cluster's seeds) and the command connection it opens there
//! ([`Commands`]), which the cluster link replaces when it stalls.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Client, Cmd, Pipeline, RedisFuture, Value};

use super::cluster_link::ClusterLink;
use super::cluster_seeds::ClusterSeeds;
use super::connection::{manager_config, open_manager, RedisConfig};
use crate::LockError;

/// Where a [`RedisBackend`](super::RedisBackend) keeps its locks: one server,
/// or a Redis Cluster, whose client sends each command to the primary of its
/// key's slot and follows redirections (`MOVED`, `ASK`) and failovers.
#[derive(Clone)]
///
/// Both clients are boxed: their sizes differ several times over, one way
/// without the `tls` feature and the other way with it.
pub(crate) enum Topology {
    Server(Box<Client>),
    Cluster(Box<ClusterSeeds>),
}

/// A command connection to a [`Topology`]: both reconnect by themselves, and
/// a cluster's is replaced when it stalls (see `cluster_link`).
#[derive(Clone)]
pub(in crate::backend) enum Commands {
    Server(ConnectionManager),
    Cluster(ClusterLink),
}

impl Topology {
    /// Opens a command connection, failing with `Connection` (or `Tls`) within
    /// the configured time limits; `response_timeout: None` leaves answers
    /// unbounded (for calls that bound themselves).
    pub(in crate::backend) async fn open(
        &self,
        config: RedisConfig,
        response_timeout: Option<Duration>,
    ) -> Result<Commands, LockError> {
        match self {
            Topology::Server(client) => {
                let settings = manager_config(config).set_response_timeout(response_timeout);
                Ok(Commands::Server(
                    open_manager(client, config, settings).await?,
                ))
            }
            Topology::Cluster(seeds) => {
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
        matches!(self, Topology::Cluster(_))
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
