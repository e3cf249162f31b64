//! Durations that do not parse, each reported on its literal.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "30 seconds")]
async fn spaced() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", wait = "30s1m")]
async fn unordered() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = 30)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
