//! `min_replicas` takes a positive whole number; `replica_timeout` needs it.
use distributed_lock::{distributed_lock, LockError};

#[distributed_lock(key = "job", min_replicas = 0)]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", replica_timeout = "100ms")]
async fn timeout_alone() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
