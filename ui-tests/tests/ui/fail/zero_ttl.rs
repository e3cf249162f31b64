//! A zero lease.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
