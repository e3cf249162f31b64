//! `min_replicas` takes a positive whole number; `replica_timeout` needs it,
//! is at least 1ms and shorter than the ttl written next to it.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", min_replicas = 0)]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", replica_timeout = "100ms")]
async fn timeout_alone() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", min_replicas = 1, replica_timeout = "0ms")]
async fn timeout_zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", ttl = "500ms", min_replicas = 1, replica_timeout = "1s")]
async fn timeout_past_ttl() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
