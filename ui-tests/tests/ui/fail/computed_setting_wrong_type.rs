//! A setting written as an expression must have the option's type:
//! `Duration` for durations, `u32` for counts; the error points at the
//! expression.
use std::time::Duration;

use leasehold::{distributed_lock, LockError};

const TTL_SECS: u64 = 30;

struct Limits {
    permits: usize,
    hold: Option<Duration>,
}

#[distributed_lock(key = "job", ttl = TTL_SECS)]
async fn seconds_not_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api", permits = limits.permits)]
async fn usize_permits(limits: &Limits) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", hold_at_least = limits.hold)]
async fn optional_hold(limits: &Limits) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", wait = 5)]
async fn bare_number() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
