//! The lock's state changes on one Redis server, each one script and one
//! round trip, shared by the single-server and Redlock backends; and how their
//! replies read.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::RedisError;

use super::scripts;
use super::{Attempt, LockKey};
use crate::token::OwnerToken;

/// Reads the `{granted, value}` reply of `acquire.lua`: the fencing token
/// when granted, else the holder's remaining TTL in ms (negative: none).
pub(super) fn attempt_from_reply(granted: i64, value: i64) -> Attempt {
    if granted == 1 {
        Attempt::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        }
    } else {
        Attempt::Busy {
            remaining: u64::try_from(value).ok().map(Duration::from_millis),
        }
    }
}

/// Runs `acquire.lua` once on one server.
pub(super) async fn acquire(
    connection: &mut ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
) -> Result<Attempt, RedisError> {
    let (granted, value): (i64, i64) = scripts::ACQUIRE
        .key(&key.lock)
        .key(&key.fence)
        .arg(token.as_str())
        .arg(ttl_ms)
        .invoke_async(connection)
        .await?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `release.lua` once on one server: whether our lock was deleted.
pub(super) async fn release(
    connection: &mut ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
) -> Result<bool, RedisError> {
    let deleted: i64 = scripts::RELEASE
        .key(&key.lock)
        .arg(token.as_str())
        .arg(&key.lock)
        .invoke_async(connection)
        .await?;
    Ok(deleted == 1)
}

/// Runs `renew.lua` once on one server: whether our lease was extended.
pub(super) async fn renew(
    connection: &mut ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
) -> Result<bool, RedisError> {
    let renewed: i64 = scripts::RENEW
        .key(&key.lock)
        .arg(token.as_str())
        .arg(ttl_ms)
        .invoke_async(connection)
        .await?;
    Ok(renewed == 1)
}
