//! Options that do not go with `mode`, each reported on its name.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "catalog", mode = "read", permits = 2)]
async fn mode_with_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], mode = "write")]
async fn mode_with_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", mode = "write", on_busy = "skip", hold_at_least = "5m")]
async fn mode_with_on_busy_and_hold_at_least() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "catalog", mode = "read", fenced = true)]
async fn read_with_fenced() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
