//! The lock needs an `async fn`.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job:{id}")]
fn blocking(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
