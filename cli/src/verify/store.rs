//! The fenced counters of a `verify` contest, kept on the deployment under
//! test: one hash per key (`value`, and the highest fencing `token` seen).
//! A read or write under a token lower than one already seen is refused, so
//! a holder cut off from its lease cannot read, or write, once a later
//! holder has read: what storage that checks fencing tokens does. Also
//! what the contest leaves behind, found and deleted at the end.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, RedisError, Script, Value};

/// Reads a counter under a token: its value, or nil when a newer token
/// has been seen (then nothing changes).
/// `KEYS[1]` the counter hash; `ARGV[1]` the reader's fencing token.
const READ: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then return false end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
";

/// Writes a counter under a token: 1, or 0 when a newer token has been
/// seen (then nothing changes).
/// `KEYS[1]` the counter hash; `ARGV[1]` the writer's fencing token; `ARGV[2]` the value.
const WRITE: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
";

/// Most keys one cleanup deletes: the contest writes a few dozen.
const MOST_KEYS_CLEANED: usize = 100_000;

/// The most `SCAN` calls per node: about 1,000 keys looked at each, so a
/// node of up to 10 million keys is walked whole, and a cursor that never
/// returns to 0 cannot loop for ever.
const MOST_SCAN_ROUNDS: usize = 10_000;

/// A connection to where the counters live.
#[derive(Clone)]
pub enum Store {
    /// One server: the server, the first Redlock node, a Sentinel's primary.
    Server(ConnectionManager),
    /// A Redis Cluster, each key on its slot's primary.
    Cluster(ClusterConnection),
}

impl Store {
    /// The store on the server `node` names (a URL, or connection
    /// settings), within `timeout` per step.
    pub async fn server(
        node: impl redis::IntoConnectionInfo,
        timeout: Duration,
    ) -> Result<Store, RedisError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let client = Client::open(node)?;
        Ok(Store::Server(
            client.get_connection_manager_with_config(config).await?,
        ))
    }

    /// The store on the Redis Cluster of `urls`, within `timeout` per step.
    pub async fn cluster(urls: &[String], timeout: Duration) -> Result<Store, RedisError> {
        let client = redis::cluster::ClusterClientBuilder::new(urls.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()?;
        Ok(Store::Cluster(client.get_async_connection().await?))
    }

    /// The counter of `key` read under `token`; `None` when refused.
    pub async fn read(&self, key: &str, token: u64) -> Result<Option<u64>, RedisError> {
        let script = Script::new(READ);
        let mut invocation = script.key(key);
        invocation.arg(token);
        match self.clone() {
            Store::Server(mut connection) => invocation.invoke_async(&mut connection).await,
            Store::Cluster(mut connection) => invocation.invoke_async(&mut connection).await,
        }
    }

    /// Writes `value` to the counter of `key` under `token`: whether the
    /// store accepted it.
    pub async fn write(&self, key: &str, token: u64, value: u64) -> Result<bool, RedisError> {
        let script = Script::new(WRITE);
        let mut invocation = script.key(key);
        invocation.arg(token).arg(value);
        let written: i64 = match self.clone() {
            Store::Server(mut connection) => invocation.invoke_async(&mut connection).await?,
            Store::Cluster(mut connection) => invocation.invoke_async(&mut connection).await?,
        };
        Ok(written == 1)
    }

    /// The counter of `key` as it stands (0 if it was never written).
    pub async fn value(&self, key: &str) -> Result<u64, RedisError> {
        let mut command = redis::cmd("HGET");
        command.arg(key).arg("value");
        let value: Option<u64> = self.query(&command).await?;
        Ok(value.unwrap_or(0))
    }

    /// Every key matching `pattern` on the store's nodes (SCAN, never
    /// KEYS), at most [`MOST_KEYS_CLEANED`].
    pub async fn scan(&self, pattern: &str) -> Result<Vec<String>, RedisError> {
        let mut found = Vec::new();
        for node in self.nodes().await? {
            let mut cursor = 0_u64;
            for _ in 0..MOST_SCAN_ROUNDS {
                let mut command = redis::cmd("SCAN");
                command
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (next, keys): (u64, Vec<String>) =
                    self.on_node(node.as_ref(), &command).await?;
                found.extend(keys);
                cursor = next;
                if cursor == 0 || found.len() >= MOST_KEYS_CLEANED {
                    break;
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    /// Deletes `keys`, one by one (on a cluster they live on several slots).
    pub async fn delete(&self, keys: &[String]) -> Result<(), RedisError> {
        for key in keys {
            let mut command = redis::cmd("DEL");
            command.arg(key);
            let _: i64 = self.query(&command).await?;
        }
        Ok(())
    }

    /// The nodes to scan: `None` for the one server; a cluster's primaries.
    async fn nodes(&self) -> Result<Vec<Option<(String, u16)>>, RedisError> {
        let Store::Cluster(connection) = self else {
            return Ok(vec![None]);
        };
        let reply = connection
            .clone()
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let ranges: Vec<Vec<Value>> = redis::from_redis_value(reply)?;
        let mut primaries: Vec<Option<(String, u16)>> = ranges
            .into_iter()
            .filter_map(|range| {
                let Value::Array(node) = range.into_iter().nth(2)? else {
                    return None;
                };
                let mut fields = node.into_iter();
                let host: String = redis::from_redis_value(fields.next()?).ok()?;
                let port: u16 = redis::from_redis_value(fields.next()?).ok()?;
                Some(Some((host, port)))
            })
            .collect();
        primaries.sort_unstable();
        primaries.dedup();
        Ok(primaries)
    }

    /// `command` on `node` (a cluster's primary), or on the one server.
    async fn on_node<T: redis::FromRedisValue>(
        &self,
        node: Option<&(String, u16)>,
        command: &Cmd,
    ) -> Result<T, RedisError> {
        match (self.clone(), node) {
            (Store::Cluster(mut connection), Some((host, port))) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let reply = connection.route_command(command.clone(), routing).await?;
                Ok(redis::from_redis_value(reply)?)
            }
            _ => self.query(command).await,
        }
    }

    /// `command` routed as its key says.
    async fn query<T: redis::FromRedisValue>(&self, command: &Cmd) -> Result<T, RedisError> {
        match self.clone() {
            Store::Server(mut connection) => command.query_async(&mut connection).await,
            Store::Cluster(mut connection) => command.query_async(&mut connection).await,
        }
    }
}
