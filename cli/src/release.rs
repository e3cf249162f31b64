//! `dlock release KEY --force`: frees a lock whoever holds it, after asking.

use std::io::{BufRead, Write};

use distributed_lock::{ForcedRelease, Holder, LockManager};
use serde::Serialize;

use crate::failure::Failure;
use crate::format;
use crate::locks::{self, HolderJson};

/// Why `release` without `--force` does nothing.
pub const WITHOUT_FORCE: &str = "refusing to release without --force: a forced release evicts a \
live holder, whose body is cancelled only at its next renewal; whatever it writes meanwhile is \
rejected only by storage that checks fencing tokens. Check the holder with `dlock show KEY` first.";

/// Releases the lock on `key` by force, after a confirmation on stdin
/// unless `yes`; prints the raised fencing counter (or JSON).
pub async fn run(manager: &LockManager, key: &str, yes: bool, json: bool) -> Result<(), Failure> {
    let confirmed_holder = if yes {
        None
    } else {
        let info = manager.inspect(key).await?;
        if !info.held {
            println!("`{key}` is not held; nothing released");
            return Ok(());
        }
        if !confirm(key, info.holder.as_ref())? {
            return Err(Failure::NotDone(format!("`{key}` not released")));
        }
        Some(info.holder)
    };
    let forced = manager.force_release(key).await?;
    if confirmed_holder.is_some_and(|confirmed| forced.evicted != confirmed) {
        eprintln!(
            "dlock: warning: the holder changed while you confirmed; evicted {}",
            format::holder(forced.evicted.as_ref())
        );
    }
    if json {
        return locks::print_json(&ForcedJson::new(&forced));
    }
    print!("{}", describe(&forced));
    Ok(())
}

/// Asks on stderr whether to evict `holder` of `key`; true for `y` or `yes`
/// on stdin.
fn confirm(key: &str, holder: Option<&Holder>) -> Result<bool, Failure> {
    let mut stderr = std::io::stderr();
    write!(
        stderr,
        "Release {key} held by {}? [y/N] ",
        format::holder(holder)
    )?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    let answer = answer.trim();
    Ok(answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes"))
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
        let now = std::time::SystemTime::now();
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
