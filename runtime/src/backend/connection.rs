//! What the Redis backends (single server, Cluster, Redlock) and their
//! notification listeners share about connections: time limits, how a
//! multiplexed auto-reconnecting connection is opened, and how redis-rs errors
//! become ours.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use super::acl::permission_denied;
use super::cluster_link::ClusterLink;
use super::lock_delay::LockDelay;
use super::tls::TlsConfig;
use crate::{redact_url, Cause, LockError};

/// Time limits of the Redis connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisConfig {
    /// Longest time to open a TCP connection (and its handshake).
    pub(crate) connect_timeout: Duration,
    /// Longest time to wait for the answer to one command.
    pub(crate) response_timeout: Duration,
    /// What a server that was promoted or lost its data grants nothing for.
    pub(crate) lock_delay: LockDelay,
}

/// The settings of every command connection: the configured time limits,
/// one reconnection attempt per failed command.
pub(super) fn manager_config(config: RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(1)
        .set_max_delay(config.connect_timeout)
}

/// Opens a connection, failing with `Connection` (`Tls` when the handshake
/// failed, `Auth` when the server refused the credentials) within the
/// configured time limits.
///
/// It returns only once a `PING` has been answered on the connection: a
/// server that asks for a password the URL lacks accepts the connection and
/// refuses every command (`NOAUTH`), which must fail here, as `Auth`, and not
/// at the first lock.
pub(super) async fn open_manager(
    client: &Client,
    config: RedisConfig,
    settings: ConnectionManagerConfig,
) -> Result<ConnectionManager, LockError> {
    let address = client.get_connection_info().addr().to_string();
    let opened = async {
        let mut connection = client.get_connection_manager_with_config(settings).await?;
        ping(&mut connection).await?;
        Ok::<_, RedisError>(connection)
    };
    match opened.await {
        Ok(connection) => Ok(connection),
        Err(err)
            if err.kind() == ErrorKind::AuthenticationFailed
                && has_no_password(client, config).await =>
        {
            Err(LockError::Auth {
                detail: format!("{address} {NEEDLESS_PASSWORD}"),
                source: Some(Arc::new(err)),
            })
        }
        Err(err) => Err(connect_error(err, &address)),
    }
}

/// One authenticated round trip on `connection`.
async fn ping(connection: &mut (impl ConnectionLike + Send)) -> Result<(), RedisError> {
    redis::cmd("PING").query_async::<Value>(connection).await?;
    Ok(())
}

/// Our error for a failure to connect to `address` (`host:port`, or seed
/// URLs already redacted): `Auth` when the server refused the credentials,
/// `Tls` when the handshake failed, else `Connection`. Each names the
/// address, never a password, and keeps `err` as its source.
pub(super) fn connect_error(err: RedisError, address: &str) -> LockError {
    if let Some(refused) = auth_refusal(&err) {
        return LockError::Auth {
            detail: format!("{address} {refused}"),
            source: Some(Arc::new(err)),
        };
    }
    let detail = format!("cannot connect to {address}: {}", describe(&err));
    // Classified on redis-rs's text alone: a host name may contain "tls".
    if is_tls_failure(&err.to_string()) {
        LockError::Tls {
            detail,
            source: Some(Arc::new(err)),
        }
    } else {
        LockError::Connection {
            detail,
            source: Some(Arc::new(err)),
        }
    }
}

/// Whether a failure to connect came from the TLS handshake (redis-rs reports
/// those as I/O errors whose text comes from rustls).
fn is_tls_failure(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("certificate") || message.contains("tls")
}

/// What the server (or the client's login step) refused, in our words, when
/// `err` is a refusal of the credentials: a missing password (`NOAUTH`), a
/// wrong one (`WRONGPASS`, or the client's failed `AUTH`), or a password
/// sent to a server that has none.
///
/// A cluster client reports a node's refusal inside an I/O error, so the
/// server's codes are also looked for in the error's text.
pub(super) fn auth_refusal(err: &RedisError) -> Option<&'static str> {
    let detail = err.detail().unwrap_or_default();
    let text = err.to_string();
    match err.code() {
        Some("NOAUTH") => Some(MISSING_PASSWORD),
        Some("WRONGPASS") => Some(WRONG_PASSWORD),
        Some("ERR") if detail.contains(NO_PASSWORD_SET) => Some(NEEDLESS_PASSWORD),
        _ if err.kind() == ErrorKind::AuthenticationFailed || text.contains("WRONGPASS") => {
            Some(WRONG_PASSWORD)
        }
        _ if text.contains("NOAUTH") => Some(MISSING_PASSWORD),
        _ => None,
    }
}

/// What a server that asks for a password answers a client that gave none.
const MISSING_PASSWORD: &str =
    "asks for a password (NOAUTH) and none was given: put it in the URL (redis://user:password@host:port)";

/// What a server answers a wrong user name or password.
const WRONG_PASSWORD: &str = "refused the user name or password: check the credentials in the URL against the server's requirepass or ACL user";

/// What a server without a password answers a client that sends one.
const NEEDLESS_PASSWORD: &str = "has no password set, but the URL gives one: remove it from the URL, or set requirepass on the server";

/// Redis's words for a password sent to a server that has none.
const NO_PASSWORD_SET: &str = "without any password configured";

/// Whether the server of `client`, whose login with a password and no user
/// name failed, has no password at all: it then answers a `PING` without
/// one. (The client library reports the server's "no password configured"
/// as a failed login, without the server's words.)
///
/// Its future is boxed as a trait object: the connection future inside,
/// nested in every acquisition's future (a replicated one opens a
/// connection), would otherwise overflow the trait solver of callers that
/// spawn an acquisition.
fn has_no_password(
    client: &Client,
    config: RedisConfig,
) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
    Box::pin(plain_ping_answers(client, config))
}

/// Whether the server of `client` answers a `PING` sent without the
/// client's password (see [`has_no_password`]).
async fn plain_ping_answers(client: &Client, config: RedisConfig) -> bool {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    if settings.password().is_none() || settings.username().is_some() {
        return false;
    }
    let without_password = redis::RedisConnectionInfo::default()
        .set_protocol(settings.protocol())
        .set_db(settings.db());
    let plain = info.clone().set_redis_settings(without_password);
    let Ok(plain) = Client::open(plain) else {
        return false;
    };
    let connection_config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout));
    let Ok(mut connection) = plain
        .get_multiplexed_async_connection_with_config(&connection_config)
        .await
    else {
        return false;
    };
    ping(&mut connection).await.is_ok()
}

/// What went wrong in `err`, in our words: the server's own error reply
/// (its code and message), or what happened to the connection. Never a
/// client library's type names.
pub(super) fn describe(err: &RedisError) -> String {
    if err.is_timeout() {
        "no answer in time".to_owned()
    } else if err.is_connection_refusal() {
        "connection refused".to_owned()
    } else if err.is_connection_dropped() {
        "the connection was closed".to_owned()
    } else if err.is_io_error() {
        "the network connection failed".to_owned()
    } else if let Some(code) = err.code() {
        match err.detail() {
            Some(detail) => format!("{code} {detail}"),
            None => code.to_owned(),
        }
    } else {
        "its reply could not be read".to_owned()
    }
}

/// Error replies of a Redis Cluster in flux (a failover or a resharding
/// under way) that outlasted the cluster client's own retries: transient,
/// like a lost connection.
const CLUSTER_IN_FLUX: [ServerErrorKind; 4] = [
    ServerErrorKind::ClusterDown,
    ServerErrorKind::TryAgain,
    ServerErrorKind::Moved,
    ServerErrorKind::Ask,
];

/// Our error for a redis-rs error: `Connection` when the server could not be
/// reached or did not answer in time, or the cluster is in flux (retry),
/// `PermissionDenied` for an ACL refusal, `Auth` for refused credentials
/// (a password changed on the server while we run), else `Server` (an error
/// reply). Each keeps `err` as its source.
pub(super) fn lock_error(err: RedisError) -> LockError {
    if let Some(denied) = permission_denied(&err) {
        return denied;
    }
    if let Some(refused) = auth_refusal(&err) {
        return LockError::Auth {
            detail: format!("the server {refused}"),
            source: Some(Arc::new(err)),
        };
    }
    let in_flux = matches!(err.kind(), ErrorKind::Server(kind) if CLUSTER_IN_FLUX.contains(&kind));
    let transient = err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || in_flux;
    let detail = describe(&err);
    let source: Option<Cause> = Some(Arc::new(err));
    if transient {
        LockError::Connection { detail, source }
    } else {
        LockError::Server { detail, source }
    }
}

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
    pub(super) fn client(
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
    pub(super) async fn open(
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
    pub(super) fn settings(
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
pub(super) enum Commands {
    Server(ConnectionManager),
    Cluster(ClusterLink),
}

impl Target {
    /// Opens a command connection, failing with `Connection` (or `Tls`) within
    /// the configured time limits; `response_timeout: None` leaves answers
    /// unbounded (for calls that bound themselves).
    pub(super) async fn open(
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
    pub(super) fn sharded_pubsub(&self) -> bool {
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
