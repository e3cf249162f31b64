//! The steps of a read/write lock on one Redis server (or one Cluster slot),
//! each one script and one round trip.
//!
//! A read/write lock lives in four keys of one slot (see `keys`): the
//! writer key, holding the writer's owner token with its lease as TTL (a
//! lock's key, so the writer renews with `renew.lua` and gets fencing tokens
//! from `fence.lua`); the readers, a sorted set of owner token -> lease end
//! like a semaphore's holders (so a reader renews with `member_renew.lua`
//! and gives its lease back with `member_release.lua`); the writers'
//! intents, a sorted set of waiting writer -> when its place ends, which
//! new readers respect; and the readers' turn, which says that a reader
//! waits and, once a writer left, lets the readers in first. Waiters reuse
//! the release notifications (`notify`): readers wait on the writer key's channel, where a writer's
//! release wakes them all, and writers on the readers' channel, where a
//! reader's release (or a writer's) wakes one of them (see
//! [`LockKey::channel`]).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::commands::attempt_from_reply;
use super::lock_delay::NodeCheck;
use super::scripts::{self, run_script};
use super::session::SessionScript;
use crate::backend::step::{millis, Attempt, Claim};
use crate::keys::LockKey;
use crate::token::OwnerToken;

/// How long the readers' turn lasts: after a writer released while a reader
/// waited, readers get in past waiting writers' intents, and no writer
/// does, for this long (see `rw_read_acquire.lua`).
pub(crate) const READERS_TURN: Duration = Duration::from_secs(1);

/// Runs `script` (`rw_read_acquire.lua` or `rw_write_acquire.lua`, under
/// its sessions) once
/// for a read lease or the write lease of `claim`'s key. A reader is let in
/// unless a writer holds the lock or waits for it (and it is not the
/// readers' turn), a writer if nobody holds the lock. Blocked, unless
/// `place` is zero, a reader marks that a reader waits, a writer keeps its
/// intent (holding new readers back), for that long. Nothing is granted
/// while the node is in the lock-delay `check` keeps.
pub(in crate::backend) async fn acquire_rw(
    connection: &mut (impl ConnectionLike + Send),
    script: &SessionScript,
    claim: Claim<'_>,
    (place, check): (Duration, NodeCheck<'_>),
) -> Result<Attempt, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let (granted, value): (i64, i64) = script
        .run(connection, 5, |call| {
            let names = key.as_rw();
            call.arg(names.writer)
                .arg(names.readers)
                .arg(names.intents)
                .arg(names.turn)
                .arg(key.node())
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(millis(place))
                .arg(check);
        })
        .await?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `rw_write_release.lua` once: whether our write lease was given
/// back (a reader waiting then gets the readers' turn); a waiting writer's
/// intent is withdrawn either way.
pub(in crate::backend) async fn release_write(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    sharded: bool,
) -> Result<bool, RedisError> {
    let script = scripts::RW_WRITE_RELEASE.on(sharded);
    let names = key.as_rw();
    let released: i64 = run_script!(
        script,
        connection,
        keys [names.writer, names.intents, names.readers, names.turn],
        args [token.as_str(), millis(READERS_TURN)]
    )?;
    Ok(released == 1)
}
