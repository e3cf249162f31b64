//! `dlock release KEY --force [--kind rw|semaphore]`: frees a lock (or the
//! read/write lock, or the semaphore, of KEY) whoever holds it, after asking.

use std::io::{BufRead, Write};
use std::time::SystemTime;

use leasehold::admin::{ForcedRelease, ForcedRwRelease, ForcedSemaphoreRelease, LeaseInfo};
use leasehold::{Holder, LockManager};
use serde::Serialize;

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, HolderJson, Kind};

/// Why `release` without `--force` does nothing.
pub const WITHOUT_FORCE: &str = "refusing to release without --force: a forced release evicts a \
live holder, whose body is cancelled only at its next renewal; whatever it writes meanwhile is \
rejected only by storage that checks fencing tokens. Check the holder with `dlock show KEY` first.";

/// Releases `key`'s lock of `kind` by force, after a confirmation on stdin
/// unless `yes`; prints what was evicted (or JSON).
pub async fn run(
    manager: &LockManager,
    key: &str,
    kind: Kind,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    match kind {
        Kind::Lock => release_lock(manager, key, yes, json).await,
        Kind::Rw => release_rw(manager, key, yes, json).await,
        Kind::Semaphore => release_semaphore(manager, key, yes, json).await,
    }
}

/// The plain lock on `key`: confirms its holder, evicts it and raises the
/// fencing counter.
async fn release_lock(
    manager: &LockManager,
    key: &str,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    let confirmed_holder = if yes {
        None
    } else {
        let info = manager.inspect(key).await?;
        if !info.held {
            println!("`{key}` is not held; nothing released");
            return Ok(());
        }
        let question = format!(
            "Release {key} held by {}?",
            format::holder(info.holder.as_ref())
        );
        confirm(&question, key)?;
        Some(info.holder)
    };
    let forced = manager.force_release(key).await?;
    if confirmed_holder.is_some_and(|confirmed| forced.evicted != confirmed) {
        warn_changed(&format::holder(forced.evicted.as_ref()));
    }
    if json {
        return locks::print_json(&ForcedJson::new(&forced));
    }
    print!("{}", describe(&forced));
    Ok(())
}

/// The read/write lock on `key`: confirms its writer and readers, evicts
/// them all and raises the writers' fencing counter.
async fn release_rw(
    manager: &LockManager,
    key: &str,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    let confirmed = if yes {
        None
    } else {
        let info = manager.rwlock(key).inspect().await?;
        if info.writer.is_none() && info.reader_count == 0 {
            println!("read/write lock `{key}` is not held; nothing released");
            return Ok(());
        }
        let writer: Vec<LeaseInfo> = info.writer.into_iter().collect();
        let holders: Vec<String> = [
            holders_phrase("writer", &writer, writer.len()),
            holders_phrase("reader", &info.readers, info.reader_count),
        ]
        .into_iter()
        .filter(|phrase| !phrase.is_empty())
        .collect();
        let question = format!(
            "Release read/write lock {key} held by {}?",
            holders.join(" and ")
        );
        confirm(&question, key)?;
        Some((named(&writer), named(&info.readers), info.reader_count))
    };
    let forced = manager.rwlock(key).force_release().await?;
    if let Some((writer, readers, reader_count)) = confirmed {
        let evicted_writer: Vec<Holder> = forced.evicted_writer.iter().cloned().collect();
        if !same_holders(&writer, &evicted_writer)
            || !same_holders(&readers, &forced.evicted_readers)
            || reader_count != forced.evicted_reader_count
        {
            warn_changed(&describe_rw_holders(&forced));
        }
    }
    if json {
        return locks::print_json(&ForcedRwJson::new(&forced));
    }
    print!("{}", describe_rw(&forced));
    Ok(())
}

/// The semaphore on `key`: confirms its permits' holders and takes every
/// permit back.
async fn release_semaphore(
    manager: &LockManager,
    key: &str,
    yes: bool,
    json: bool,
) -> Result<(), Failure> {
    // N is not stored: any N reaches the same holders.
    let semaphore = manager.semaphore(key, 1);
    let confirmed = if yes {
        None
    } else {
        let info = semaphore.inspect().await?;
        if info.held == 0 {
            println!("semaphore `{key}` has no permit held; nothing released");
            return Ok(());
        }
        let question = format!(
            "Release semaphore {key}, taking back {}?",
            holders_phrase("permit", &info.holders, info.held)
        );
        confirm(&question, key)?;
        Some((named(&info.holders), info.held))
    };
    let forced = semaphore.force_release().await?;
    if let Some((holders, count)) = confirmed {
        if !same_holders(&holders, &forced.evicted) || count != forced.evicted_count {
            warn_changed(&holders_list(&forced.evicted, forced.evicted_count));
        }
    }
    if json {
        return locks::print_json(&ForcedSemaphoreJson::new(&forced));
    }
    print!("{}", describe_semaphore(&forced));
    Ok(())
}

/// Asks `question` on stderr; `NotDone` (`key` not released) unless stdin
/// answers `y` or `yes`.
fn confirm(question: &str, key: &str) -> Result<(), Failure> {
    let mut stderr = std::io::stderr();
    write!(stderr, "{question} [y/N] ")?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    let answer = answer.trim();
    if answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes") {
        Ok(())
    } else {
        Err(Failure::NotDone(format!("`{key}` not released")))
    }
}

/// Warns on stderr that the holders changed between the confirmation and
/// the release, naming those `evicted`.
fn warn_changed(evicted: &str) {
    eprintln!("dlock: warning: the holder changed while you confirmed; evicted {evicted}");
}

/// `count` leases of `what` (`writer`, `permit`, ...) and their holders:
/// `2 permits: a (pid 1 on h), b (pid 2 on h)`; empty when `count` is 0.
fn holders_phrase(what: &str, leases: &[LeaseInfo], count: usize) -> String {
    if count == 0 {
        return String::new();
    }
    let holders: Vec<Option<Holder>> = leases.iter().map(|lease| lease.holder.clone()).collect();
    format!("{}: {}", counted(count, what), names(&holders, count))
}

/// `1 permit`, `2 permits`.
fn counted(count: usize, what: &str) -> String {
    let plural = if count == 1 { "" } else { "s" };
    format!("{count} {what}{plural}")
}

/// `holders` (of `count` in all) as text: `a (pid 1 on h), b (...)`, or
/// `none`.
fn holders_list(holders: &[Holder], count: usize) -> String {
    let holders: Vec<Option<Holder>> = holders.iter().cloned().map(Some).collect();
    names(&holders, count)
}

/// `holders` joined by commas, with `and N more` for those of `count` not
/// among them; `none` if there are none.
fn names(holders: &[Option<Holder>], count: usize) -> String {
    if count == 0 {
        return "none".to_owned();
    }
    let mut text: Vec<String> = holders
        .iter()
        .map(|holder| format::holder(holder.as_ref()))
        .collect();
    if count > holders.len() {
        text.push(format!("and {} more", count - holders.len()));
    }
    text.join(", ")
}

/// The holders of `leases` that their tokens name.
fn named(leases: &[LeaseInfo]) -> Vec<Holder> {
    leases
        .iter()
        .filter_map(|lease| lease.holder.clone())
        .collect()
}

/// Whether `a` and `b` hold the same holders, in any order.
fn same_holders(a: &[Holder], b: &[Holder]) -> bool {
    a.len() == b.len() && a.iter().all(|holder| b.contains(holder))
}

/// What `forced` did, as text.
fn describe(forced: &ForcedRelease) -> String {
    let counter = forced.fencing_counter;
    if forced.was_held {
        format!(
            "released `{}`, held by {}\nfencing counter raised to {counter}: storage that checks \
             fencing tokens now rejects the evicted holder's writes\n",
            forced.key,
            format::holder(forced.evicted.as_ref())
        )
    } else {
        format!(
            "`{}` was not held; fencing counter is now {counter}\n",
            forced.key
        )
    }
}

/// The writer and readers `forced` evicted, as text.
fn describe_rw_holders(forced: &ForcedRwRelease) -> String {
    let writer = if forced.writer_was_held {
        format::holder(forced.evicted_writer.as_ref())
    } else {
        "none".to_owned()
    };
    format!(
        "writer {writer}; readers {}",
        holders_list(&forced.evicted_readers, forced.evicted_reader_count)
    )
}

/// What the forced release of a read/write lock did, as text.
fn describe_rw(forced: &ForcedRwRelease) -> String {
    let counter = forced.fencing_counter;
    if !forced.writer_was_held && forced.evicted_reader_count == 0 {
        return format!(
            "read/write lock `{}` was not held; writers' fencing counter is now {counter}\n",
            forced.key
        );
    }
    format!(
        "released read/write lock `{}`: evicted {}\nwriters' fencing counter raised to \
         {counter}: storage that checks fencing tokens now rejects the evicted writer's writes\n",
        forced.key,
        describe_rw_holders(forced)
    )
}

/// What the forced release of a semaphore did, as text.
fn describe_semaphore(forced: &ForcedSemaphoreRelease) -> String {
    if forced.evicted_count == 0 {
        return format!(
            "semaphore `{}` had no permit held; nothing released\n",
            forced.key
        );
    }
    format!(
        "released semaphore `{}`: took back {} from {}\n(semaphores have no fencing tokens: \
         each holder is cancelled at its next renewal)\n",
        forced.key,
        counted(forced.evicted_count, "permit"),
        holders_list(&forced.evicted, forced.evicted_count)
    )
}

/// A forced release, as JSON.
#[derive(Debug, Serialize)]
struct ForcedJson {
    /// The key, without namespace.
    key: String,
    /// Whether someone held the lock.
    was_held: bool,
    /// Who held it, if named.
    evicted: Option<HolderJson>,
    /// The fencing counter after the release.
    fencing_counter: u64,
}

impl ForcedJson {
    /// `forced` as JSON.
    fn new(forced: &ForcedRelease) -> Self {
        let now = SystemTime::now();
        ForcedJson {
            key: forced.key.clone(),
            was_held: forced.was_held,
            evicted: forced
                .evicted
                .as_ref()
                .map(|holder| HolderJson::new(holder, now)),
            fencing_counter: forced.fencing_counter,
        }
    }
}

/// A forced release of a read/write lock, as JSON.
#[derive(Debug, Serialize)]
struct ForcedRwJson {
    /// The key, without namespace.
    key: String,
    /// Whether a writer held the lock.
    writer_was_held: bool,
    /// The evicted writer, if named.
    evicted_writer: Option<HolderJson>,
    /// How many readers were evicted.
    evicted_reader_count: usize,
    /// The named ones among them (at most 100).
    evicted_readers: Vec<HolderJson>,
    /// The writers' fencing counter after the release.
    fencing_counter: u64,
}

impl ForcedRwJson {
    /// `forced` as JSON.
    fn new(forced: &ForcedRwRelease) -> Self {
        let now = SystemTime::now();
        ForcedRwJson {
            key: forced.key.clone(),
            writer_was_held: forced.writer_was_held,
            evicted_writer: forced
                .evicted_writer
                .as_ref()
                .map(|holder| HolderJson::new(holder, now)),
            evicted_reader_count: forced.evicted_reader_count,
            evicted_readers: holders_json(&forced.evicted_readers, now),
            fencing_counter: forced.fencing_counter,
        }
    }
}

/// A forced release of a semaphore, as JSON.
#[derive(Debug, Serialize)]
struct ForcedSemaphoreJson {
    /// The key, without namespace.
    key: String,
    /// How many permits were taken back.
    evicted_count: usize,
    /// The named ones among their holders (at most 100).
    evicted: Vec<HolderJson>,
}

impl ForcedSemaphoreJson {
    /// `forced` as JSON.
    fn new(forced: &ForcedSemaphoreRelease) -> Self {
        ForcedSemaphoreJson {
            key: forced.key.clone(),
            evicted_count: forced.evicted_count,
            evicted: holders_json(&forced.evicted, SystemTime::now()),
        }
    }
}

/// `holders` as JSON, as seen at `now`.
fn holders_json(holders: &[Holder], now: SystemTime) -> Vec<HolderJson> {
    holders
        .iter()
        .map(|holder| HolderJson::new(holder, now))
        .collect()
}
