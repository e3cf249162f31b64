//! The lock's state changes on one Redis server, each one command or script
//! and one round trip, shared by the single-server and Redlock backends; and
//! how their replies read.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError};

use super::lock_delay::NodeCheck;
use super::scripts::{self, run_or_load, run_script};
use super::session::SessionScript;
use crate::backend::step::{millis, Attempt, Claim};
use crate::keys::LockKey;
use crate::token::OwnerToken;

/// How long a lock's record (`LockKey::record`) is kept after it was last
/// written: a day. A holder granted the lock after a wait and holding it
/// longer than that is shown without its grant.
pub(in crate::backend) const RECORD_KEPT_MS: u64 = 24 * 60 * 60 * 1000;

/// Reads the `{granted, value}` reply of `acquire.lua`: granted, or the
/// holder's remaining TTL in ms (negative: none), or what is left of the
/// node's lock-delay (`granted` 2), after which it may be granted.
pub(in crate::backend) fn attempt_from_reply(granted: i64, value: i64) -> Attempt {
    match granted {
        1 => Attempt::GRANTED,
        2 => delayed(value),
        _ => Attempt::Busy {
            remaining: u64::try_from(value).ok().map(Duration::from_millis),
        },
    }
}

/// A refusal of a node in its lock-delay for `left_ms` more.
pub(in crate::backend) fn delayed(left_ms: i64) -> Attempt {
    let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
    tracing::warn!(?left, "the server grants nothing during its lock-delay: it was promoted or restarted without its data (a failover), and a lease it granted before may still be held");
    Attempt::Delayed { left }
}

/// The invocation of `acquire.lua`: take the lock for `ttl_ms`, or, when it
/// is busy and `place` is not zero, keep a place in its waiter queue for
/// that long; nothing is granted while the node is in the lock-delay
/// `check` keeps.
pub(in crate::backend) fn acquire_invocation(
    claim: Claim<'_>,
    place: Duration,
    seq: u64,
    check: NodeCheck<'_>,
) -> redis::ScriptInvocation<'static> {
    let Claim { key, token, ttl_ms } = claim;
    let mut invocation = scripts::ACQUIRE.prepare_invoke();
    invocation
        .key(key.lock())
        .key(key.as_lock().queue)
        .key(key.as_lock().places)
        .key(key.as_lock().record)
        .key(key.node())
        .arg(token.as_str())
        .arg(ttl_ms)
        .arg(millis(place))
        .arg(seq)
        .arg(RECORD_KEPT_MS)
        .arg(check);
    invocation
}

/// `SET key token NX PX ttl`: the uncontended attempt, exactly what a
/// hand-written lock sends (busy: the holder's remaining TTL is not known).
///
/// It does not look at the waiter queue: a newcomer can take a lock that is
/// free while waiters are queued. That happens only when the lock was not
/// released but expired (its holder, or a waiter it was handed to, died or
/// was cut off); a release always hands the lock to the first live waiter.
pub(in crate::backend) async fn try_set(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
) -> Result<Attempt, RedisError> {
    let set: Option<()> = set_command(claim.key.lock(), claim.token.as_str())
        .arg("NX")
        .arg("PX")
        .arg(claim.ttl_ms)
        .query_async(connection)
        .await?;
    Ok(if set.is_some() {
        Attempt::GRANTED
    } else {
        Attempt::Busy { remaining: None }
    })
}

/// The uncontended attempt where the node keeps the lock-delay of
/// `check`: `try_set_checked.lua` (sent under the sessions of `script`),
/// the node's check then what [`try_set`] sends. Busy during the delay,
/// with what is left of it.
pub(in crate::backend) async fn try_set_checked(
    connection: &mut (impl ConnectionLike + Send),
    script: &SessionScript,
    claim: Claim<'_>,
    check: NodeCheck<'_>,
) -> Result<Attempt, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let reply: i64 = script
        .run(connection, 2, |call| {
            call.arg(key.lock())
                .arg(key.node())
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(check);
        })
        .await?;
    Ok(match reply {
        1 => Attempt::GRANTED,
        0 => Attempt::Busy { remaining: None },
        left => delayed(-left),
    })
}

/// `SET key value`, for the caller to add its options (at most four
/// arguments: `NX PX ms`, `IFEQ value PX ms`): allocated once at its full
/// size, where `redis::cmd` grows its buffers argument by argument, since
/// every lock cycle sends one.
pub(in crate::backend) fn set_command(key: &str, value: &str) -> redis::Cmd {
    const OPTIONS_SIZE: usize = 48;
    let mut set = redis::Cmd::with_capacity(7, 3 + key.len() + 2 * value.len() + OPTIONS_SIZE);
    set.arg("SET").arg(key).arg(value);
    set
}

/// Runs `acquire_fenced.lua` once on one server, under the sessions of
/// `script`: `SET key token NX PX ttl`
/// (as [`try_set`], busy when held, but with the holder's remaining TTL)
/// and, when it took the lock, the lock's next fencing token from the same
/// call (`None` if it could not be issued); busy while the node is in its
/// lock-delay `check` keeps, with what is left of it.
pub(in crate::backend) async fn try_set_fenced(
    connection: &mut (impl ConnectionLike + Send),
    script: &SessionScript,
    claim: Claim<'_>,
    check: NodeCheck<'_>,
) -> Result<(Attempt, Option<u64>), RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let reply: redis::Value = script
        .run(connection, 3, |call| {
            call.arg(key.lock())
                .arg(key.fence())
                .arg(key.node())
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(fence_retention_ms(ttl_ms))
                .arg(check);
        })
        .await?;
    // One integer, or `{2, ms}` in the node's lock-delay.
    if let redis::Value::Array(_) = reply {
        let (_, left_ms): (i64, i64) = redis::from_redis_value(reply)?;
        return Ok((delayed(left_ms), None));
    }
    Ok(fenced_attempt_from_reply(redis::from_redis_value(reply)?))
}

/// Reads the one integer `acquire_fenced.lua` replies: a token (at least
/// one) or 0 when granted; when busy, `-2 - ms`, where `ms` is the holder's
/// remaining TTL (-1 for none).
fn fenced_attempt_from_reply(reply: i64) -> (Attempt, Option<u64>) {
    if reply >= 0 {
        let fence = u64::try_from(reply).ok().filter(|&fence| fence > 0);
        return (Attempt::GRANTED, fence);
    }
    let remaining = u64::try_from(-2 - reply).ok().map(Duration::from_millis);
    (Attempt::Busy { remaining }, None)
}

/// [`acquire`] where the node keeps the lock-delay of `check`, sent
/// under the sessions of `script`, so its check is cheap.
pub(in crate::backend) async fn acquire_checked(
    connection: &mut (impl ConnectionLike + Send),
    script: &SessionScript,
    claim: Claim<'_>,
    (place, seq): (Duration, u64),
    check: NodeCheck<'_>,
) -> Result<Attempt, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let (granted, value): (i64, i64) = script
        .run(connection, 5, |call| {
            call.arg(key.lock())
                .arg(key.as_lock().queue)
                .arg(key.as_lock().places)
                .arg(key.as_lock().record)
                .arg(key.node())
                .arg(token.as_str())
                .arg(ttl_ms)
                .arg(millis(place))
                .arg(seq)
                .arg(RECORD_KEPT_MS)
                .arg(check);
        })
        .await?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `acquire.lua` once on one server (see [`acquire_invocation`]):
/// busy, it reports the holder's remaining TTL (or the lock-delay's).
pub(in crate::backend) async fn acquire(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
    place: Duration,
    seq: u64,
    check: NodeCheck<'_>,
) -> Result<Attempt, RedisError> {
    let call = Cmd::invoke_script(&acquire_invocation(claim, place, seq, check));
    let (granted, value): (i64, i64) = run_or_load(connection, &scripts::ACQUIRE, call).await?;
    Ok(attempt_from_reply(granted, value))
}

/// Runs `release.lua` once on one server: whether our lock was released.
/// With a `grant_window`, the lock goes straight to the first queued waiter
/// for that long (it confirms by renewing); zero never grants, nor does a
/// node in its lock-delay of `lock_delay_ms` (0: none). `sharded`: the
/// release message goes out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn release(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    token: &OwnerToken,
    (grant_window, lock_delay_ms): (Duration, u64),
    sharded: bool,
) -> Result<bool, RedisError> {
    let script = scripts::RELEASE.on(sharded);
    let released: i64 = run_script!(
        script,
        connection,
        keys [key.lock(), key.as_lock().queue, key.as_lock().places, key.as_lock().record, key.node()],
        args [token.as_str(), millis(grant_window), RECORD_KEPT_MS, lock_delay_ms]
    )?;
    Ok(released == 1)
}

/// How long a key's fencing counter outlives the last token issued for a
/// lease of `ttl_ms`: max(2 × ttl, 10 minutes), capped at 100 years (a `PX`
/// Redis accepts, whatever lease it accepted).
pub(in crate::backend) fn fence_retention_ms(ttl_ms: u64) -> u64 {
    const TEN_MINUTES_MS: u64 = 600_000;
    const HUNDRED_YEARS_MS: u64 = 3_155_760_000_000;
    ttl_ms
        .saturating_mul(2)
        .clamp(TEN_MINUTES_MS, HUNDRED_YEARS_MS)
}

/// Runs `fence.lua` once on one server: the next fencing token of `key` if
/// `token` holds it there, `None` if it does not.
pub(in crate::backend) async fn issue_fence(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
) -> Result<Option<u64>, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let fence: i64 = run_script!(
        scripts::FENCE,
        connection,
        keys [key.lock(), key.fence()],
        args [token.as_str(), fence_retention_ms(ttl_ms)]
    )?;
    Ok(u64::try_from(fence).ok())
}

/// Runs `renew.lua` once on one server: whether our lease was extended
/// (never while the node is in its lock-delay of `lock_delay_ms`; 0: none).
pub(in crate::backend) async fn renew(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
    lock_delay_ms: u64,
) -> Result<bool, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let renewed: i64 = run_script!(
        scripts::RENEW,
        connection,
        keys [key.lock(), key.node()],
        args [token.as_str(), ttl_ms, lock_delay_ms]
    )?;
    Ok(renewed == 1)
}

/// Runs `hold_down.lua` once on one server: keeps the claim's lock for
/// `claim.ttl_ms` (what is left of its hold) and notes that its holder
/// released it; whether it was still ours.
pub(in crate::backend) async fn hold_down(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
) -> Result<bool, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let kept: i64 = run_script!(
        scripts::HOLD_DOWN,
        connection,
        keys [key.lock(), key.as_lock().record],
        args [token.as_str(), ttl_ms]
    )?;
    Ok(kept == 1)
}

/// Runs `renew.lua` for a waiter that confirms a lock handed to it, in one
/// round trip whatever the server's script cache holds: `SCRIPT LOAD`
/// (which changes nothing when the script is known) pipelined before the
/// `EVALSHA`. A server that has not seen the script (first use, a restart,
/// a failover, `SCRIPT FLUSH`) would otherwise answer `NOSCRIPT` first,
/// and the confirmation would take several round trips, which on a slow
/// link outlast the grant window (see `release.lua`): the grant would lapse
/// and the lock sit idle until then. Whether the claim's lease was extended.
pub(in crate::backend) async fn confirm(
    connection: &mut (impl ConnectionLike + Send),
    claim: Claim<'_>,
) -> Result<bool, RedisError> {
    let Claim { key, token, ttl_ms } = claim;
    let mut invocation = scripts::RENEW.key(key.lock());
    invocation.arg(token.as_str()).arg(ttl_ms);
    let (renewed,): (i64,) = redis::pipe()
        .load_script(&scripts::RENEW)
        .ignore()
        .invoke_script(&invocation)
        .query_async(connection)
        .await?;
    Ok(renewed == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_attempt_replies_read_as_token_grant_or_remaining_ttl() {
        let busy = |ms: Option<u64>| Attempt::Busy {
            remaining: ms.map(Duration::from_millis),
        };
        for (reply, read) in [
            (
                1_733_000_000_000_000,
                (Attempt::GRANTED, Some(1_733_000_000_000_000)),
            ),
            (0, (Attempt::GRANTED, None)),
            (-1, (busy(None), None)),
            (-2, (busy(Some(0)), None)),
            (-2 - 29_999, (busy(Some(29_999)), None)),
        ] {
            assert_eq!(fenced_attempt_from_reply(reply), read, "{reply}");
        }
    }
}
