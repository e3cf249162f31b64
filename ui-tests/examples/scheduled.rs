//! Scheduled jobs: skipped when busy, with `()` or `Option` results, held
//! for at least a while after they start.
use std::io;

use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job:nightly", on_busy = "skip", hold_at_least = "5m")]
pub async fn nightly() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:count:{day}", on_busy = "skip")]
pub async fn count(day: u32) -> io::Result<Option<u32>> {
    Ok(Some(day))
}

#[distributed_lock(key = "job:wait", on_busy = "wait", wait = "1s", hold_at_least = "1s")]
pub async fn waits() -> Result<u32, LockError> {
    Ok(1)
}

fn main() {}
