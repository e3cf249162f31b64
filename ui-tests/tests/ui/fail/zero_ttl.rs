//! A zero lease.
use distributed_lock::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
