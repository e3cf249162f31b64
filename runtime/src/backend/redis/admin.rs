//! Operators' steps on one Redis server (or one cluster node): read a lock's,
//! semaphore's or read/write lock's state, free it whoever holds it, and find
//! their keys. Each is one script or command per round trip; `SCAN` walks the
//! keyspace in bounded batches.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError};

use super::commands::fence_retention_ms;
use super::scripts::{self, run_or_load, run_script};
use crate::backend::state::{Evicted, State, MOST_WAITERS_SHOWN};
use crate::keys::LockKey;

/// Keys `SCAN` is asked to look at per round trip.
const SCAN_BATCH: usize = 1000;
/// Most `SCAN` round trips on one node: 10 million keys looked at.
const MOST_SCAN_ROUNDS: usize = 10_000;

/// Runs `inspect.lua` for the lock `key`.
pub(in crate::backend) async fn inspect_lock(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
) -> Result<State, RedisError> {
    let names = key.as_lock();
    let (holder, pttl, fence, queued, queued_count, granted_ago, waited, released): (
        String,
        i64,
        String,
        Vec<String>,
        i64,
        i64,
        i64,
        i64,
    ) = run_script!(
        scripts::INSPECT,
        connection,
        keys [names.lock, names.fence, names.queue, names.places, names.record],
        args [MOST_WAITERS_SHOWN]
    )?;
    let millis = |ms: i64| u64::try_from(ms).ok().map(Duration::from_millis);
    let held = !holder.is_empty();
    Ok(State {
        holder: held.then_some(holder),
        remaining: u64::try_from(pttl)
            .ok()
            .filter(|_| held)
            .map(Duration::from_millis),
        fence: fence.parse().ok(),
        queued,
        queued_count: usize::try_from(queued_count).unwrap_or(0),
        granted_ago: millis(granted_ago),
        waited: millis(waited),
        released: held && released == 1,
        ..State::default()
    })
}

/// Runs `inspect_members.lua` for the member leases of `key` (a
/// semaphore's permits, a read/write lock's readers) and, `with_writer`,
/// a read/write lock's writer, waiting writers and writers' fencing counter.
pub(in crate::backend) async fn inspect_members(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    with_writer: bool,
) -> Result<State, RedisError> {
    let mut invocation = scripts::INSPECT_MEMBERS.prepare_invoke();
    invocation.key(key.members());
    if with_writer {
        let names = key.as_rw();
        invocation
            .key(names.writer)
            .key(names.intents)
            .key(names.fence);
    }
    let (holders, holder_count, writer, writer_pttl, writers_waiting, fence): (
        Vec<String>,
        i64,
        String,
        i64,
        i64,
        String,
    ) = run_or_load(
        connection,
        &scripts::INSPECT_MEMBERS,
        Cmd::invoke_script(invocation.arg(MOST_WAITERS_SHOWN)),
    )
    .await?;
    let members = holders
        .chunks_exact(2)
        .map(|pair| {
            let remaining = pair[1].parse().unwrap_or(0);
            (pair[0].clone(), Duration::from_millis(remaining))
        })
        .collect();
    let writer_remaining = u64::try_from(writer_pttl).ok().map(Duration::from_millis);
    let (holder, remaining) = (!writer.is_empty())
        .then_some(writer)
        .zip(writer_remaining)
        .unzip();
    Ok(State {
        holder,
        remaining,
        members,
        member_count: usize::try_from(holder_count).unwrap_or(0),
        queued_count: usize::try_from(writers_waiting).unwrap_or(0),
        fence: fence.parse().ok(),
        ..State::default()
    })
}

/// Runs `force_release.lua` for the lock `key`; `sharded`: its message
/// goes out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_lock(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    sharded: bool,
) -> Result<Evicted, RedisError> {
    let script = scripts::FORCE_RELEASE.on(sharded);
    // The counter is kept as long as for the longest lease it could fence:
    // unknown here, so for the 10-minute floor of fence.lua's retention.
    let (holder, fence): (String, String) = run_script!(
        script,
        connection,
        keys [key.lock(), key.fence()],
        args [fence_retention_ms(0)]
    )?;
    Ok(Evicted {
        holder: (!holder.is_empty()).then_some(holder),
        fence: fence.parse().unwrap_or(0),
        ..Evicted::default()
    })
}

/// Runs `semaphore_force_release.lua` for the semaphore `key`; `sharded`:
/// its message goes out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_semaphore(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    sharded: bool,
) -> Result<Evicted, RedisError> {
    let script = scripts::SEMAPHORE_FORCE_RELEASE.on(sharded);
    let (holders, holder_count): (Vec<String>, i64) = run_script!(
        script,
        connection,
        keys[key.members()],
        args[MOST_WAITERS_SHOWN]
    )?;
    Ok(Evicted {
        members: holders,
        member_count: usize::try_from(holder_count).unwrap_or(0),
        ..Evicted::default()
    })
}

/// Runs `rw_force_release.lua` for the read/write lock `key`; `sharded`:
/// its messages go out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_rw(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    sharded: bool,
) -> Result<Evicted, RedisError> {
    let script = scripts::RW_FORCE_RELEASE.on(sharded);
    // Kept for the 10-minute floor of fence.lua's retention, as for a lock.
    let (writer, readers, reader_count, fence): (String, Vec<String>, i64, String) = run_script!(
        script,
        connection,
        keys [key.lock(), key.members(), key.fence()],
        args [fence_retention_ms(0), MOST_WAITERS_SHOWN]
    )?;
    Ok(Evicted {
        holder: (!writer.is_empty()).then_some(writer),
        members: readers,
        member_count: usize::try_from(reader_count).unwrap_or(0),
        fence: fence.parse().unwrap_or(0),
    })
}

/// The keys of one node matching the glob `pattern`, by `SCAN` (never
/// `KEYS`, which blocks the server): at most [`MOST_SCAN_ROUNDS`] round
/// trips of [`SCAN_BATCH`] keys each. `send` runs one `SCAN` on the node.
pub(in crate::backend) async fn scan<F, Fut>(
    pattern: &str,
    mut send: F,
) -> Result<Vec<String>, RedisError>
where
    F: FnMut(redis::Cmd) -> Fut,
    Fut: std::future::Future<Output = Result<(u64, Vec<String>), RedisError>>,
{
    let mut found = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..MOST_SCAN_ROUNDS {
        let mut command = redis::cmd("SCAN");
        command
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_BATCH);
        let (next, keys) = send(command).await?;
        found.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}
