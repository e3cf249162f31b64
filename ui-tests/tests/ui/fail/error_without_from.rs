//! The error type must be able to carry a `LockError`.
use leasehold::distributed_lock;

#[derive(Debug)]
pub struct PayError;

#[distributed_lock(key = "job:{id}")]
async fn pay(id: u64) -> Result<u64, PayError> {
    Ok(id)
}

fn main() {}
