//! Operators' steps on one Redis server (or one cluster node): read a lock's,
//! semaphore's or read/write lock's state, free it whoever holds it, and find
//! their keys. Each is one script or command per round trip; `SCAN` walks the
//! keyspace in bounded batches.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::commands::fence_retention_ms;
use super::scripts::{self, run_script};
use crate::keys::LockKey;
use crate::kinds::kind::Kind;

/// Most queued waiters an inspection returns (the count covers all).
pub(crate) const MOST_WAITERS_SHOWN: usize = 100;
/// Keys `SCAN` is asked to look at per round trip.
const SCAN_BATCH: usize = 1000;
/// Most `SCAN` round trips on one node: 10 million keys looked at.
const MOST_SCAN_ROUNDS: usize = 10_000;

/// What a backend holds for one lock now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LockState {
    /// The holder's owner token, if the lock is held.
    pub(crate) holder: Option<String>,
    /// How long the lock has left, if held.
    pub(crate) remaining: Option<Duration>,
    /// The last fencing token issued (or the value a forced release raised
    /// the counter to), while the counter is retained.
    pub(crate) fence: Option<u64>,
    /// Owner tokens of the waiters queued in the backend, in arrival order
    /// (at most [`MOST_WAITERS_SHOWN`]).
    pub(crate) queued: Vec<String>,
    /// How many waiters are queued in the backend.
    pub(crate) queued_count: usize,
    /// How long ago the holder was granted the lock, by the server's clock,
    /// when it waited and the grant is recorded (see `LockKey::record`).
    pub(crate) granted_ago: Option<Duration>,
    /// How long the holder waited in the queue before that grant.
    pub(crate) waited: Option<Duration>,
    /// Whether the holder released the lock within its `hold_at_least`: it
    /// is kept until the hold ends, as planned.
    pub(crate) released: bool,
}

/// What a backend holds for one semaphore or read/write lock now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SharedState {
    /// Owner tokens and remaining leases of the live lease holders (a
    /// semaphore's permits, a read/write lock's readers), earliest end
    /// first, at most [`MOST_WAITERS_SHOWN`].
    pub(crate) holders: Vec<(String, Duration)>,
    /// How many live lease holders there are.
    pub(crate) holder_count: usize,
    /// A read/write lock's writer: its owner token and remaining lease.
    pub(crate) writer: Option<(String, Duration)>,
    /// A read/write lock's live writers' intents: writers waiting.
    pub(crate) writers_waiting: usize,
    /// A read/write lock's writers' fencing counter, while it is retained.
    pub(crate) fence: Option<u64>,
}

/// What a forced release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// The owner token of the holder it evicted, if there was one.
    pub(crate) holder: Option<String>,
    /// The fencing counter after the release: above every token issued
    /// before it.
    pub(crate) fence: u64,
}

/// The lease holders a forced release of a semaphore or of a read/write
/// lock's readers evicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EvictedLeases {
    /// Their owner tokens, earliest lease end first (at most
    /// [`MOST_WAITERS_SHOWN`]).
    pub(crate) holders: Vec<String>,
    /// How many there were.
    pub(crate) holder_count: usize,
}

/// What a forced release of a read/write lock did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvictedRw {
    /// The owner token of the writer it evicted, if there was one.
    pub(crate) writer: Option<String>,
    /// The readers it evicted.
    pub(crate) readers: EvictedLeases,
    /// The writers' fencing counter after the release: above every
    /// writer's token issued before it.
    pub(crate) fence: u64,
}

/// Runs `inspect.lua` for `key`.
pub(in crate::backend) async fn inspect(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
) -> Result<LockState, RedisError> {
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
        keys [key.lock(), key.fence(), key.queue(), key.waiters(), key.record()],
        args [MOST_WAITERS_SHOWN]
    )?;
    let millis = |ms: i64| u64::try_from(ms).ok().map(Duration::from_millis);
    let held = !holder.is_empty();
    Ok(LockState {
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
    })
}

/// Runs `inspect_shared.lua` for the semaphore or read/write lock `key`.
pub(in crate::backend) async fn inspect_shared(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
) -> Result<SharedState, RedisError> {
    let mut invocation = scripts::INSPECT_SHARED.prepare_invoke();
    match key.kind {
        Kind::Semaphore { .. } => invocation.key(key.members()),
        Kind::Lock | Kind::ReadWrite(_) => invocation
            .key(key.members())
            .key(key.lock())
            .key(key.queue())
            .key(key.fence()),
    };
    let (holders, holder_count, writer, writer_pttl, writers_waiting, fence): (
        Vec<String>,
        i64,
        String,
        i64,
        i64,
        String,
    ) = invocation
        .arg(MOST_WAITERS_SHOWN)
        .invoke_async(connection)
        .await?;
    let holders = holders
        .chunks_exact(2)
        .map(|pair| {
            let remaining = pair[1].parse().unwrap_or(0);
            (pair[0].clone(), Duration::from_millis(remaining))
        })
        .collect();
    let writer_remaining = u64::try_from(writer_pttl).ok().map(Duration::from_millis);
    Ok(SharedState {
        holders,
        holder_count: usize::try_from(holder_count).unwrap_or(0),
        writer: (!writer.is_empty()).then_some(writer).zip(writer_remaining),
        writers_waiting: usize::try_from(writers_waiting).unwrap_or(0),
        fence: fence.parse().ok(),
    })
}

/// Runs `force_release.lua` for `key`; `sharded`: its message goes out by
/// SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_release(
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
    })
}

/// Runs `semaphore_force_release.lua` for the semaphore `key`; `sharded`:
/// its message goes out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_release_semaphore(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    sharded: bool,
) -> Result<EvictedLeases, RedisError> {
    let script = scripts::SEMAPHORE_FORCE_RELEASE.on(sharded);
    let (holders, holder_count): (Vec<String>, i64) = run_script!(
        script,
        connection,
        keys[key.lock()],
        args[MOST_WAITERS_SHOWN]
    )?;
    Ok(EvictedLeases {
        holders,
        holder_count: usize::try_from(holder_count).unwrap_or(0),
    })
}

/// Runs `rw_force_release.lua` for the read/write lock `key`; `sharded`:
/// its messages go out by SPUBLISH (Redis Cluster).
pub(in crate::backend) async fn force_release_rw(
    connection: &mut (impl ConnectionLike + Send),
    key: &LockKey,
    sharded: bool,
) -> Result<EvictedRw, RedisError> {
    let script = scripts::RW_FORCE_RELEASE.on(sharded);
    // Kept for the 10-minute floor of fence.lua's retention, as for a lock.
    let (writer, readers, reader_count, fence): (String, Vec<String>, i64, String) = run_script!(
        script,
        connection,
        keys [key.lock(), key.members(), key.fence()],
        args [fence_retention_ms(0), MOST_WAITERS_SHOWN]
    )?;
    Ok(EvictedRw {
        writer: (!writer.is_empty()).then_some(writer),
        readers: EvictedLeases {
            holders: readers,
            holder_count: usize::try_from(reader_count).unwrap_or(0),
        },
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
