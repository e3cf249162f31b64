//! The steps of a read/write lock on one Redis server (or one Cluster slot),
//! each one script and one round trip.
//!
//! A read/write lock lives in four keys of one slot (see `keys`): the
//! writer key, holding the writer's owner token with its lease as TTL (a
//! lock's key, so the writer renews with `renew.lua` and gets fencing tokens
//! from `fence.lua`); the readers, a sorted set of owner token -> lease end
//! like a semaphore's holders (so a reader renews with `semaphore_renew.lua`);
//! the writers' intents, a sorted set of waiting writer -> when its place
//! ends, which new readers respect; and the readers' turn, which says that
//! a reader waits and, once a writer left, lets the readers in first. Waiters reuse the release notifications
//! (`notify`): readers wait on the writer key's channel, where a writer's
//! release wakes them all, and writers on the readers' channel, where a
//! reader's release (or a writer's) wakes one of them (see
//! [`LockKey::channel`]).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::commands::attempt_from_reply;
use super::scripts::{self, run_script};
use super::Attempt;
use crate::keys::LockKey;
use crate::token::OwnerToken;

/// How long the readers' turn lasts: after a writer released while a reader
/// waited, readers get in past waiting writers' intents, and no writer
/// does, for this long (see `rw_read_acquire.lua`).
pub(crate) const READERS_TURN: Duration = Duration::from_secs(1);

/// Runs `rw_read_acquire.lua` once: a read lease of `key` for `ttl_ms`,
/// unless a writer holds the lock or waits for it (and it is not the
/// readers' turn); blocked, unless `waiting_for` is zero, it marks that a
/// reader waits, for that long.
pub(super) async fn acquire_read(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
    waiting_for: Duration,
) -> Result<Attempt, RedisError> {
    let (granted, value): (i64, i64) = run_script!(
        scripts::RW_READ_ACQUIRE,
        connection,
        keys [&key.lock, &key.readers, &key.queue, &key.waiters],
        args [token.as_str(), ttl_ms, millis(waiting_for)]
    )?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `rw_write_acquire.lua` once: the write lease of `key` for `ttl_ms`
/// if nobody holds the lock; otherwise, unless `intent_for` is zero, this
/// writer's intent is kept for that long, holding new readers back.
pub(super) async fn acquire_write(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    ttl_ms: u64,
    intent_for: Duration,
) -> Result<Attempt, RedisError> {
    let (granted, value): (i64, i64) = run_script!(
        scripts::RW_WRITE_ACQUIRE,
        connection,
        keys [&key.lock, &key.readers, &key.queue, &key.waiters],
        args [token.as_str(), ttl_ms, millis(intent_for)]
    )?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `rw_read_release.lua` once: whether our read lease was given back.
/// `sharded`: the release message goes out by SPUBLISH (Redis Cluster).
pub(super) async fn release_read(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    sharded: bool,
) -> Result<bool, RedisError> {
    let script = scripts::RW_READ_RELEASE.on(sharded);
    let released: i64 = run_script!(script, connection, keys[&key.readers], args[token.as_str()])?;
    Ok(released == 1)
}

/// Runs `rw_write_release.lua` once: whether our write lease was given
/// back (a reader waiting then gets the readers' turn); a waiting writer's
/// intent is withdrawn either way.
pub(super) async fn release_write(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    sharded: bool,
) -> Result<bool, RedisError> {
    let script = scripts::RW_WRITE_RELEASE.on(sharded);
    let released: i64 = run_script!(
        script,
        connection,
        keys [&key.lock, &key.queue, &key.readers, &key.waiters],
        args [token.as_str(), millis(READERS_TURN)]
    )?;
    Ok(released == 1)
}

/// `duration` in whole milliseconds, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
