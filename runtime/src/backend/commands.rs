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

/// The invocation of `acquire.lua`: take the lock for `ttl_ms`, or, when it
/// is busy and `queue_for` is not zero, keep a place in its waiter queue for
/// that long.
pub(super) fn acquire_invocation(
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
    queue_for: Duration,
) -> redis::ScriptInvocation<'static> {
    let mut invocation = scripts::ACQUIRE.prepare_invoke();
    invocation
        .key(&key.lock)
        .key(&key.fence)
        .key(&key.queue)
        .key(&key.waiters)
        .arg(token.as_str())
        .arg(ttl_ms)
        .arg(u64::try_from(queue_for.as_millis()).unwrap_or(u64::MAX));
    invocation
}

/// Runs `acquire.lua` once on one server; see [`acquire_invocation`].
pub(super) async fn acquire(
    connection: &mut ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
    queue_for: Duration,
) -> Result<Attempt, RedisError> {
    let (granted, value): (i64, i64) = acquire_invocation(key, token, ttl_ms, queue_for)
        .invoke_async(connection)
        .await?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `release.lua` once on one server: whether our lock was released.
/// With a `grant_window`, the lock goes straight to the first queued waiter
/// for that long (it confirms by renewing); zero never grants.
pub(super) async fn release(
    connection: &mut ConnectionManager,
    key: &LockKey,
    token: &OwnerToken,
    grant_window: Duration,
) -> Result<bool, RedisError> {
    let released: i64 = scripts::RELEASE
        .key(&key.lock)
        .key(&key.fence)
        .key(&key.queue)
        .key(&key.waiters)
        .arg(token.as_str())
        .arg(u64::try_from(grant_window.as_millis()).unwrap_or(u64::MAX))
        .invoke_async(connection)
        .await?;
    Ok(released == 1)
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
