//! The steps of a counting semaphore on one Redis server (or one Cluster
//! slot), each one script and one round trip; and how their replies read.
//!
//! A semaphore lives in one sorted set, its holder set: owner token -> when
//! that holder's lease ends, in server milliseconds. Every script first
//! drops the members whose lease ended, so a crashed holder's permit comes
//! back when its lease ends, and the set expires with its last lease. The
//! number of permits is not stored: each acquisition passes its own. The
//! release script publishes on the set's name, as a lock's release does on
//! the lock key, so waiters reuse the release notifications (`notify`).

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::commands::attempt_from_reply;
use super::lock_delay::NodeCheck;
use super::scripts::{self, run_script};
use super::session::SessionScript;
use crate::backend::step::{Attempt, Claim};
use crate::token::OwnerToken;

/// Runs `semaphore_acquire.lua` once, under the sessions of `script`: a permit of `claim`'s key, if fewer
/// than `permits` are held and the node is not in the lock-delay `check`
/// keeps.
pub(in crate::backend) async fn acquire_permit(
    connection: &mut (impl ConnectionLike + Send),
    script: &SessionScript,
    claim: Claim<'_>,
    (permits, check): (u32, NodeCheck<'_>),
) -> Result<Attempt, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let (granted, value): (i64, i64) = script
        .run(connection, 2, |call| {
            call.arg(key.lock())
                .arg(key.node())
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(permits)
                .arg(check);
        })
        .await?;
    // Granted, the value is how many permits were left free after ours.
    Ok(match attempt_from_reply(granted, value) {
        Attempt::Granted { .. } => Attempt::Granted {
            room_left: value > 0,
        },
        refused => refused,
    })
}

/// Runs `member_renew.lua` once on the lease set `set` (a semaphore's
/// holders, or a read/write lock's readers): whether the claim's lease in
/// it was extended. The node is looked at for the lock-delay of
/// `lock_delay_ms` (0: none) as `renew.lua` does.
pub(in crate::backend) async fn renew_member(
    connection: &mut (impl ConnectionLike + Send),
    set: &str,
    claim: Claim<'_>,
    lock_delay_ms: u64,
) -> Result<bool, RedisError> {
    let args = (claim.token.as_str(), claim.ttl_ms);
    let renewed: i64 = run_script!(
        scripts::MEMBER_RENEW,
        connection,
        keys [set, claim.key.node()],
        args [args.0, args.1, lock_delay_ms]
    )?;
    Ok(renewed == 1)
}

/// Runs `member_release.lua` once on the lease set `set` (a semaphore's
/// holders, or a read/write lock's readers): whether our lease in it was
/// given back. `sharded`: the release message goes out by SPUBLISH (Redis
/// Cluster).
pub(in crate::backend) async fn release_member(
    connection: &mut (impl ConnectionLike + Send),
    set: &str,
    token: &OwnerToken,
    sharded: bool,
) -> Result<bool, RedisError> {
    let script = scripts::MEMBER_RELEASE.on(sharded);
    let released: i64 = run_script!(script, connection, keys[set], args[token.as_str()])?;
    Ok(released == 1)
}
