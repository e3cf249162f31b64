//! `period` needs `on_busy = "skip"`, one plain key, and whole seconds.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job:a", period = "1h")]
async fn waits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["job:a", "job:b"], period = "1h", on_busy = "skip")]
async fn several() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job:a", period = "1500ms", on_busy = "skip")]
async fn fractional() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
