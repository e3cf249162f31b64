//! `dlock show KEY`: everything `inspect` knows about what holds a key:
//! each kind of its locks that is held (lock, read/write lock, semaphore),
//! or the one kind `--kind` names; and a server in its lock-delay (after a
//! failover or a restart), which grants none of them: a `lock-delay:` line,
//! or each JSON object's `lock_delay`.

use std::fmt::Write as _;
use std::time::SystemTime;

use leasehold::admin::{LeaseInfo, LockInfo, RwLockInfo, SemaphoreInfo};
use leasehold::{LockDelayState, LockManager};
use serde::Serialize;

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, HeldInfo, HeldJson, Kind, LockJson, RwLockJson, SemaphoreJson};

/// Prints what holds `key`: its lock of `kind`, or without one, every kind
/// that is held (the plain lock, free, when none is); as text, or as JSON.
pub async fn run(
    manager: &LockManager,
    key: &str,
    kind: Option<Kind>,
    json: bool,
) -> Result<(), Failure> {
    let delay = manager.lock_delay_state().await?;
    let shown = Shown {
        json,
        delay: delay.map(|state| DelayJson::new(state, SystemTime::now())),
    };
    match kind {
        Some(kind) => run_kind(manager, key, kind, &shown).await?,
        None => run_held(manager, key, &shown).await?,
    }
    if !json {
        print!(
            "{}",
            lock_delay_line(delay, SystemTime::now()).unwrap_or_default()
        );
    }
    Ok(())
}

/// How `show` prints: as JSON or text, and the server's lock-delay, which
/// each JSON object carries.
struct Shown {
    json: bool,
    delay: Option<DelayJson>,
}

impl Shown {
    /// Prints `shown` as JSON, with the lock-delay.
    fn print_json(&self, shown: impl Serialize) -> Result<(), Failure> {
        locks::print_json(&self.with_delay(shown))
    }

    /// `shown` with the lock-delay, as JSON prints it.
    fn with_delay<T: Serialize>(&self, shown: T) -> WithDelay<'_, T> {
        WithDelay {
            shown,
            lock_delay: self.delay.as_ref(),
        }
    }
}

/// One shown lock as JSON, with `lock_delay`: `null` when the server grants.
#[derive(Serialize)]
struct WithDelay<'a, T> {
    #[serde(flatten)]
    shown: T,
    lock_delay: Option<&'a DelayJson>,
}

/// The server's lock-delay as JSON: `running` (it grants nothing for
/// `left_ms` more, until `ends_at_ms`, Unix ms), `pending` (it starts at the
/// next grant) or `deposed` (a replaced primary, for `left_ms` more).
#[derive(Serialize)]
struct DelayJson {
    state: &'static str,
    left_ms: Option<u64>,
    ends_at_ms: Option<u64>,
}

impl DelayJson {
    /// `state` as seen at `now`.
    fn new(state: LockDelayState, now: SystemTime) -> Self {
        let (name, left) = match state {
            LockDelayState::Running { left } => ("running", Some(left)),
            LockDelayState::Deposed { left } => ("deposed", Some(left)),
            _ => ("pending", None),
        };
        DelayJson {
            state: name,
            left_ms: left.map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
            ends_at_ms: left.map(|left| format::unix_ms(now + left)),
        }
    }
}

/// The line that shows the server in its lock-delay `state`, seen at `now`:
/// how long it grants nothing more, and until when; `None` when it grants.
fn lock_delay_line(state: Option<LockDelayState>, now: SystemTime) -> Option<String> {
    let state = match state? {
        LockDelayState::Running { left } => format!(
            "the server grants nothing for {} more, until {} UTC (promoted or restarted: a failover)",
            format::duration(left),
            format::clock(now + left)
        ),
        LockDelayState::Pending => "starts at the next grant or renewal (the server was promoted or restarted since it last granted)".to_owned(),
        LockDelayState::Deposed { left } => format!(
            "the server was replaced as the primary and deposed: it grants and renews nothing for {} more, until {} UTC",
            format::duration(left),
            format::clock(now + left)
        ),
        _ => return None,
    };
    Some(format!("lock-delay:      {state}\n"))
}

/// Prints every kind of `key`'s locks that is held, separated by a blank
/// line (JSON: one object, or an array of several); the free plain lock
/// when none is.
async fn run_held(manager: &LockManager, key: &str, shown: &Shown) -> Result<(), Failure> {
    let held = locks::held_kinds(manager, key).await?;
    if held.is_empty() {
        return run_kind(manager, key, Kind::Lock, shown).await;
    }
    let now = SystemTime::now();
    if shown.json {
        let each: Vec<_> = held
            .iter()
            .map(|info| shown.with_delay(HeldJson::new(info, now)))
            .collect();
        return match each.as_slice() {
            [one] => locks::print_json(one),
            _ => locks::print_json(&each),
        };
    }
    let described: Vec<String> = held
        .iter()
        .map(|info| match info {
            HeldInfo::Lock(info) => describe(info, now),
            HeldInfo::Rw(info) => describe_rw(info, now),
            HeldInfo::Semaphore(info) => describe_semaphore(info, now),
        })
        .collect();
    print!("{}", described.join("\n"));
    Ok(())
}

/// Prints `key`'s lock of `kind`, held or not: as text, or as JSON.
async fn run_kind(
    manager: &LockManager,
    key: &str,
    kind: Kind,
    shown: &Shown,
) -> Result<(), Failure> {
    let json = shown.json;
    let now = SystemTime::now();
    match kind {
        Kind::Lock => {
            let info = manager.inspect(key).await?;
            if json {
                return shown.print_json(LockJson::new(&info, now));
            }
            print!("{}", describe(&info, now));
        }
        Kind::Rw => {
            let info = manager.rwlock(key).inspect().await?;
            if json {
                return shown.print_json(RwLockJson::new(&info, now));
            }
            print!("{}", describe_rw(&info, now));
        }
        Kind::Semaphore => {
            // N is not stored: any N inspects the same holders.
            let info = manager.semaphore(key, 1).inspect().await?;
            if json {
                return shown.print_json(SemaphoreJson::new(&info, now));
            }
            print!("{}", describe_semaphore(&info, now));
        }
    }
    Ok(())
}

/// The read/write lock `info` as text, seen at `now`.
fn describe_rw(info: &RwLockInfo, now: SystemTime) -> String {
    let mut text = format!("read/write lock: {}\n", info.key);
    match &info.writer {
        Some(writer) => {
            let _ = writeln!(text, "writer:          {}", lease_line(writer, now));
        }
        None => text.push_str("writer:          none\n"),
    }
    let _ = writeln!(text, "readers:         {}", info.reader_count);
    for reader in &info.readers {
        let _ = writeln!(text, "  {}", lease_line(reader, now));
    }
    let _ = writeln!(text, "writers waiting: {}", info.writers_waiting);
    let counter = info
        .fencing_counter
        .map_or_else(|| "none issued".to_owned(), |counter| counter.to_string());
    let _ = writeln!(text, "fencing counter: {counter} (writers only)");
    text
}

/// The semaphore `info` as text, seen at `now`.
fn describe_semaphore(info: &SemaphoreInfo, now: SystemTime) -> String {
    let mut text = format!("semaphore:       {}\n", info.key);
    let _ = writeln!(text, "permits held:    {}", info.held);
    for permit in &info.holders {
        let _ = writeln!(text, "  {}", lease_line(permit, now));
    }
    text
}

/// One lease on one line: who, label, for how long, and what is left.
fn lease_line(lease: &LeaseInfo, now: SystemTime) -> String {
    let remaining = format::duration(lease.remaining);
    match &lease.holder {
        Some(holder) => format!(
            "{} (pid {} on {}) label {} held for {}, {remaining} left",
            holder.manager,
            holder.pid,
            holder.host,
            holder.label.as_deref().unwrap_or("-"),
            format::duration(format::since(holder.acquired_at, now)),
        ),
        None => format!("an unnamed holder, {remaining} left"),
    }
}

/// `info` as text, seen at `now`.
fn describe(info: &LockInfo, now: SystemTime) -> String {
    let mut text = format!("key:             {}\n", info.key);
    if !info.held {
        text.push_str("held:            no\n");
    } else if let Some(holder) = &info.holder {
        let _ = writeln!(text, "held by:         {}", holder.manager);
        let _ = writeln!(text, "host:            {}", holder.host);
        let _ = writeln!(text, "pid:             {}", holder.pid);
        let _ = writeln!(
            text,
            "label:           {}",
            holder.label.as_deref().unwrap_or("-")
        );
        let asked = format!(
            "asked at {} UTC, by its clock",
            format::clock(holder.acquired_at)
        );
        match info.granted_ago {
            Some(granted_ago) => {
                let _ = writeln!(
                    text,
                    "held for:        {} (granted after a wait, by the server's clock)",
                    format::duration(granted_ago)
                );
                let waited = info.waited.map_or_else(
                    || "no place in the queue recorded".to_owned(),
                    |waited| format!("{} in the queue", format::duration(waited)),
                );
                let _ = writeln!(text, "waited:          {waited} ({asked})");
            }
            None => {
                let _ = writeln!(
                    text,
                    "held for:        {} (granted when it asked: {asked})",
                    format::duration(format::since(holder.acquired_at, now))
                );
                text.push_str("waited:          none recorded\n");
            }
        }
        let _ = writeln!(text, "ttl:             {}", format::duration(holder.ttl));
    } else {
        text.push_str("held by:         an unnamed holder (its token records no identity)\n");
    }
    if let Some(remaining) = info.remaining {
        let released = if info.released {
            " (released by its holder; kept until its hold_at_least ends)"
        } else {
            ""
        };
        let _ = writeln!(
            text,
            "remaining:       {}{released}",
            format::duration(remaining)
        );
    }
    let counter = info
        .fencing_counter
        .map_or_else(|| "none issued".to_owned(), |counter| counter.to_string());
    let _ = writeln!(text, "fencing counter: {counter}");
    let _ = writeln!(text, "queued waiters:  {}", info.queued_count);
    for (place, waiter) in info.queued.iter().enumerate() {
        let _ = writeln!(
            text,
            "  {}. {} (pid {} on {}) label {} waiting for {}",
            place + 1,
            waiter.manager,
            waiter.pid,
            waiter.host,
            waiter.label.as_deref().unwrap_or("-"),
            format::duration(format::since(waiter.acquired_at, now))
        );
    }
    text.push_str("local waiters:   not applicable (each process sees only its own)\n");
    text
}
