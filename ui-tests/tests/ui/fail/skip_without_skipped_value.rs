//! `on_busy = "skip"` on a function whose return type cannot say "skipped".
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", on_busy = "skip")]
async fn count() -> Result<u32, LockError> {
    Ok(1)
}

#[distributed_lock(keys = ["a", "b"], on_busy = "skip")]
async fn total() -> Result<u32, LockError> {
    Ok(2)
}

fn main() {}
