//! The kinds of lock a key can have, the held locks matching a glob
//! inspected one by one, and the JSON shapes `ls`, `show` (of each kind) and
//! `release` print.

use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use leasehold::admin::{LeaseInfo, LockInfo, LockKind, RwLockInfo, SemaphoreInfo};
use leasehold::{Holder, LockError, LockManager};
use serde::Serialize;

use crate::failure::Failure;
use crate::format;

/// Which lock of a key: each kind keeps its own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// The plain lock (`acquire`, `#[distributed_lock]`).
    Lock,
    /// The read/write lock (`acquire_read` / `acquire_write`, `mode = ...`).
    Rw,
    /// The counting semaphore (`semaphore(key, n)`, `permits = n`).
    Semaphore,
}

impl Kind {
    /// The kind that the library's `kind` names; `None` for a kind this
    /// `dlock` does not know.
    pub fn of(kind: LockKind) -> Option<Kind> {
        match kind {
            LockKind::Lock => Some(Kind::Lock),
            LockKind::ReadWrite => Some(Kind::Rw),
            LockKind::Semaphore => Some(Kind::Semaphore),
            _ => None,
        }
    }

    /// Its name, as `--kind` takes it and `ls` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
        }
    }
}

/// One held lock of any kind, as inspected.
#[derive(Debug)]
pub enum HeldInfo {
    /// A plain lock.
    Lock(LockInfo),
    /// A read/write lock, held by a writer or by readers.
    Rw(RwLockInfo),
    /// A semaphore with a permit held.
    Semaphore(SemaphoreInfo),
}

impl HeldInfo {
    /// The key, without namespace.
    pub fn key(&self) -> &str {
        match self {
            HeldInfo::Lock(info) => &info.key,
            HeldInfo::Rw(info) => &info.key,
            HeldInfo::Semaphore(info) => &info.key,
        }
    }

    /// Which of the key's locks this is.
    pub fn kind(&self) -> Kind {
        match self {
            HeldInfo::Lock(_) => Kind::Lock,
            HeldInfo::Rw(_) => Kind::Rw,
            HeldInfo::Semaphore(_) => Kind::Semaphore,
        }
    }

    /// How many hold it: 1, a read/write lock's writer and readers, or a
    /// semaphore's permits.
    pub fn holders(&self) -> usize {
        match self {
            HeldInfo::Lock(_) => 1,
            HeldInfo::Rw(info) => usize::from(info.writer.is_some()) + info.reader_count,
            HeldInfo::Semaphore(info) => info.held,
        }
    }

    /// The holder a one-line view shows, if its token names it, and its
    /// lease left: a plain lock's holder; of several holders, the writer,
    /// else the one whose lease ends first.
    pub fn shown(&self) -> (Option<&Holder>, Option<Duration>) {
        match self {
            HeldInfo::Lock(info) => (info.holder.as_ref(), info.remaining),
            HeldInfo::Rw(info) => lease_shown(info.writer.as_ref().or(info.readers.first())),
            HeldInfo::Semaphore(info) => lease_shown(info.holders.first()),
        }
    }

    /// The fencing counter (a read/write lock's: its writers'); `None` for
    /// a semaphore, which has none, or when none was issued.
    pub fn fence(&self) -> Option<u64> {
        match self {
            HeldInfo::Lock(info) => info.fencing_counter,
            HeldInfo::Rw(info) => info.fencing_counter,
            HeldInfo::Semaphore(_) => None,
        }
    }

    /// Whether a plain lock's holder released it within its
    /// `hold_at_least`: it ends with the hold, as planned.
    pub fn released(&self) -> bool {
        matches!(self, HeldInfo::Lock(info) if info.released)
    }

    /// Waiters recorded in the backend (a read/write lock's: its waiting
    /// writers); `None` for a semaphore, whose waiters are not recorded.
    pub fn waiters(&self) -> Option<usize> {
        match self {
            HeldInfo::Lock(info) => Some(info.queued_count),
            HeldInfo::Rw(info) => Some(info.writers_waiting),
            HeldInfo::Semaphore(_) => None,
        }
    }
}

/// The holder of `lease`, if its token names it, and the lease left.
fn lease_shown(lease: Option<&LeaseInfo>) -> (Option<&Holder>, Option<Duration>) {
    (
        lease.and_then(|lease| lease.holder.as_ref()),
        lease.map(|lease| lease.remaining),
    )
}

/// The held locks of every kind whose key matches `pattern`, sorted by key
/// then kind: at most `limit` of them are inspected; also how many more were
/// listed. A lock freed between listing and inspecting is left out, and so
/// is a kind this `dlock` does not know.
pub async fn held_all(
    manager: &LockManager,
    pattern: &str,
    limit: usize,
) -> Result<(Vec<HeldInfo>, usize), LockError> {
    let listed = manager.list_all(pattern).await?;
    let more = listed.len().saturating_sub(limit);
    let mut held = Vec::with_capacity(listed.len().min(limit));
    for listed in listed.iter().take(limit) {
        let Some(kind) = Kind::of(listed.kind) else {
            continue;
        };
        if let Some(info) = inspect_held(manager, &listed.key, kind).await? {
            held.push(info);
        }
    }
    Ok((held, more))
}

/// Every kind of lock on `key` that is held, in the order lock, read/write
/// lock, semaphore.
pub async fn held_kinds(manager: &LockManager, key: &str) -> Result<Vec<HeldInfo>, LockError> {
    let mut held = Vec::new();
    for kind in [Kind::Lock, Kind::Rw, Kind::Semaphore] {
        if let Some(info) = inspect_held(manager, key, kind).await? {
            held.push(info);
        }
    }
    Ok(held)
}

/// The lock of `kind` on `key`, if it is held.
async fn inspect_held(
    manager: &LockManager,
    key: &str,
    kind: Kind,
) -> Result<Option<HeldInfo>, LockError> {
    Ok(match kind {
        Kind::Lock => {
            let info = manager.inspect(key).await?;
            info.held.then_some(HeldInfo::Lock(info))
        }
        Kind::Rw => {
            let info = manager.rwlock(key).inspect().await?;
            (info.writer.is_some() || info.reader_count > 0).then_some(HeldInfo::Rw(info))
        }
        Kind::Semaphore => {
            // N is not stored: any N inspects the same holders.
            let info = manager.semaphore(key, 1).inspect().await?;
            (info.held > 0).then_some(HeldInfo::Semaphore(info))
        }
    })
}

/// A holder or queued waiter, as JSON.
#[derive(Debug, Serialize)]
pub struct HolderJson {
    /// The name of its manager.
    pub manager: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The acquisition's label.
    pub label: Option<String>,
    /// When it took the lock, or began to wait, by its clock (ms since the epoch).
    pub since_ms: u64,
    /// How long ago that was, by ours.
    pub for_ms: u64,
    /// The lease it asked for.
    pub ttl_ms: u64,
}

impl HolderJson {
    /// `holder` as seen at `now`.
    pub fn new(holder: &Holder, now: SystemTime) -> Self {
        HolderJson {
            manager: holder.manager.clone(),
            host: holder.host.clone(),
            pid: holder.pid,
            label: holder.label.clone(),
            since_ms: format::unix_ms(holder.acquired_at),
            for_ms: millis(format::since(holder.acquired_at, now)),
            ttl_ms: millis(holder.ttl),
        }
    }
}

/// One lock, as JSON.
#[derive(Debug, Serialize)]
pub struct LockJson {
    /// The key, without namespace.
    pub key: String,
    /// Whether it is held.
    pub held: bool,
    /// Its holder; `null` when free or unnamed.
    pub holder: Option<HolderJson>,
    /// Lease left in the backend.
    pub remaining_ms: Option<u64>,
    /// How long ago the holder was granted the lock, by the server's clock,
    /// when it waited for it; `null` when it was granted as it asked.
    pub granted_ago_ms: Option<u64>,
    /// How long it waited in the queue before, by the server's clock.
    pub waited_ms: Option<u64>,
    /// Whether its holder released it within its `hold_at_least`: it is
    /// kept until the hold ends.
    pub released: bool,
    /// The last fencing token issued for the key.
    pub fencing_counter: Option<u64>,
    /// Waiters queued in the backend.
    pub queued_count: usize,
    /// The named ones among them, in arrival order (at most 100).
    pub queued: Vec<HolderJson>,
}

impl LockJson {
    /// `info` as seen at `now`.
    pub fn new(info: &LockInfo, now: SystemTime) -> Self {
        LockJson {
            key: info.key.clone(),
            held: info.held,
            holder: info
                .holder
                .as_ref()
                .map(|holder| HolderJson::new(holder, now)),
            remaining_ms: info.remaining.map(millis),
            granted_ago_ms: info.granted_ago.map(millis),
            waited_ms: info.waited.map(millis),
            released: info.released,
            fencing_counter: info.fencing_counter,
            queued_count: info.queued_count,
            queued: info
                .queued
                .iter()
                .map(|waiter| HolderJson::new(waiter, now))
                .collect(),
        }
    }
}

/// One lease of a read/write lock or a semaphore, as JSON.
#[derive(Debug, Serialize)]
pub struct LeaseJson {
    /// Its holder; `null` when unnamed.
    pub holder: Option<HolderJson>,
    /// Lease left in the backend.
    pub remaining_ms: u64,
}

impl LeaseJson {
    /// `lease` as seen at `now`.
    fn new(lease: &LeaseInfo, now: SystemTime) -> Self {
        LeaseJson {
            holder: lease
                .holder
                .as_ref()
                .map(|holder| HolderJson::new(holder, now)),
            remaining_ms: millis(lease.remaining),
        }
    }
}

/// A read/write lock, as JSON.
#[derive(Debug, Serialize)]
pub struct RwLockJson {
    /// The key, without namespace.
    pub key: String,
    /// The writer holding it, if any.
    pub writer: Option<LeaseJson>,
    /// How many readers hold it.
    pub reader_count: usize,
    /// The readers, earliest lease end first (at most 100).
    pub readers: Vec<LeaseJson>,
    /// Writers waiting for it, in every process.
    pub writers_waiting: usize,
    /// The last fencing token issued to a writer.
    pub fencing_counter: Option<u64>,
}

impl RwLockJson {
    /// `info` as seen at `now`.
    pub fn new(info: &RwLockInfo, now: SystemTime) -> Self {
        RwLockJson {
            key: info.key.clone(),
            writer: info
                .writer
                .as_ref()
                .map(|writer| LeaseJson::new(writer, now)),
            reader_count: info.reader_count,
            readers: info
                .readers
                .iter()
                .map(|reader| LeaseJson::new(reader, now))
                .collect(),
            writers_waiting: info.writers_waiting,
            fencing_counter: info.fencing_counter,
        }
    }
}

/// A semaphore, as JSON.
#[derive(Debug, Serialize)]
pub struct SemaphoreJson {
    /// The key, without namespace.
    pub key: String,
    /// How many permits are held.
    pub held: usize,
    /// The permits' holders, earliest lease end first (at most 100).
    pub holders: Vec<LeaseJson>,
}

impl SemaphoreJson {
    /// `info` as seen at `now`.
    pub fn new(info: &SemaphoreInfo, now: SystemTime) -> Self {
        SemaphoreJson {
            key: info.key.clone(),
            held: info.held,
            holders: info
                .holders
                .iter()
                .map(|permit| LeaseJson::new(permit, now))
                .collect(),
        }
    }
}

/// One held lock of any kind, as JSON: what `show --kind KIND` prints, and
/// its `kind`.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum HeldJson {
    /// A plain lock.
    Lock(LockJson),
    /// A read/write lock.
    Rw(RwLockJson),
    /// A semaphore.
    Semaphore(SemaphoreJson),
}

impl HeldJson {
    /// `held` as seen at `now`.
    pub fn new(held: &HeldInfo, now: SystemTime) -> Self {
        match held {
            HeldInfo::Lock(info) => HeldJson::Lock(LockJson::new(info, now)),
            HeldInfo::Rw(info) => HeldJson::Rw(RwLockJson::new(info, now)),
            HeldInfo::Semaphore(info) => HeldJson::Semaphore(SemaphoreJson::new(info, now)),
        }
    }
}

/// `duration` in whole milliseconds.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|err| Failure::Io(err.into()))?;
    println!("{text}");
    Ok(())
}
