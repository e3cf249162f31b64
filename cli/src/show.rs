//! `dlock show KEY`: everything `inspect` knows about one lock.

use std::fmt::Write as _;
use std::time::SystemTime;

use distributed_lock::{LockInfo, LockManager};

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, LockJson};

/// Prints the lock on `key`: as text, or as JSON.
pub async fn run(manager: &LockManager, key: &str, json: bool) -> Result<(), Failure> {
    let info = manager.inspect(key).await?;
    let now = SystemTime::now();
    if json {
        return locks::print_json(&LockJson::new(&info, now));
    }
    print!("{}", describe(&info, now));
    Ok(())
}

/// `info` as text, seen at `now`.
fn describe(info: &LockInfo, now: SystemTime) -> String {
    let mut text = format!("key:             {}\n", info.key);
    if !info.held {
        text.push_str("held:            no\n");
    } else if let Some(holder) = &info.holder {
        let held_for = format::since(holder.acquired_at, now);
        let _ = writeln!(text, "held by:         {}", holder.manager);
        let _ = writeln!(text, "host:            {}", holder.host);
        let _ = writeln!(text, "pid:             {}", holder.pid);
        let _ = writeln!(
            text,
            "label:           {}",
            holder.label.as_deref().unwrap_or("-")
        );
        let _ = writeln!(
            text,
            "held for:        {} (since {} UTC, by its clock)",
            format::duration(held_for),
            format::clock(holder.acquired_at)
        );
        let _ = writeln!(text, "ttl:             {}", format::duration(holder.ttl));
    } else {
        text.push_str("held by:         an unnamed holder (its token records no identity)\n");
    }
    if let Some(remaining) = info.remaining {
        let _ = writeln!(text, "remaining:       {}", format::duration(remaining));
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
