//! What the Redis backends (single server, Cluster, Redlock) and their
//! notification listeners share about connections: time limits, how a
//! multiplexed auto-reconnecting connection is opened, and how redis-rs errors
//! become ours.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ErrorKind, RedisError, ServerErrorKind, Value};

use super::acl::permission_denied;
use super::lock_delay::LockDelay;
use crate::{Cause, LockError};

/// Time limits of the Redis connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisConfig {
    /// Longest time to open a TCP connection (and its handshake).
    pub(crate) connect_timeout: Duration,
    /// Longest time to wait for the answer to one command.
    pub(crate) response_timeout: Duration,
    /// What a server that was promoted or lost its data grants nothing for.
    pub(crate) lock_delay: LockDelay,
    /// Whether a server that started less than the lock-delay ago and holds
    /// no marker keeps the delay too (it may have restarted empty).
    pub(crate) delay_after_start: bool,
}

/// The settings of every command connection: the configured time limits,
/// one reconnection attempt per failed command.
pub(in crate::backend) fn manager_config(config: RedisConfig) -> ConnectionManagerConfig {
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
pub(in crate::backend) async fn open_manager(
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
pub(in crate::backend) async fn ping(
    connection: &mut (impl ConnectionLike + Send),
) -> Result<(), RedisError> {
    redis::cmd("PING").query_async::<Value>(connection).await?;
    Ok(())
}

/// Our error for a failure to connect to `address` (`host:port`, or seed
/// URLs already redacted): `Auth` when the server refused the credentials,
/// `Tls` when the handshake failed, else `Connection`. Each names the
/// address, never a password, and keeps `err` as its source.
pub(in crate::backend) fn connect_error(err: RedisError, address: &str) -> LockError {
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
pub(in crate::backend) fn auth_refusal(err: &RedisError) -> Option<&'static str> {
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
pub(in crate::backend) fn describe(err: &RedisError) -> String {
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
pub(in crate::backend) fn lock_error(err: RedisError) -> LockError {
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
