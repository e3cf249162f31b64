//! Options of locks that do not go with `permits`, each reported on its name.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(keys = ["a", "b"], permits = 2)]
async fn permits_with_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api", permits = 2, on_busy = "skip")]
async fn permits_with_on_busy() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api", permits = 2, hold_at_least = "5m")]
async fn permits_with_hold_at_least() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api", permits = 2, fenced = true, reentrant = false)]
async fn permits_with_fenced_and_reentrant() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api", min_replicas = 1, permits = 2)]
async fn permits_with_min_replicas() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
