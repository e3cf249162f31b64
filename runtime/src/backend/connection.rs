//! What both Redis backends (single server and Redlock) and their
//! notification listeners share about connections: time limits, how a
//! multiplexed auto-reconnecting connection is opened, and how redis-rs errors
//! become ours.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};

use crate::LockError;

/// Time limits of the Redis connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisConfig {
    /// Longest time to open a TCP connection (and its handshake).
    pub(crate) connect_timeout: Duration,
    /// Longest time to wait for the answer to one command.
    pub(crate) response_timeout: Duration,
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

/// Opens a connection, failing with `Connection` (or `Tls` when the
/// handshake failed) within the configured time limits.
pub(super) async fn open_manager(
    client: &Client,
    config: ConnectionManagerConfig,
) -> Result<ConnectionManager, LockError> {
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(|err| {
            let message = err.to_string();
            if is_tls_failure(&message) {
                LockError::Tls(message)
            } else {
                LockError::Connection(message)
            }
        })
}

/// Whether a failure to connect came from the TLS handshake (redis-rs reports
/// those as I/O errors whose text comes from rustls).
fn is_tls_failure(message: &str) -> bool {
    let message = message.to_lowercase();
    message.contains("certificate") || message.contains("tls")
}

/// Our error for a redis-rs error: `Connection` when the server could not be
/// reached or did not answer in time, else `Server` (an error reply).
pub(super) fn lock_error(err: RedisError) -> LockError {
    if err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
    {
        LockError::Connection(err.to_string())
    } else {
        LockError::Server(err.to_string())
    }
}
