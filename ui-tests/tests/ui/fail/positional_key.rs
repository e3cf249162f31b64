//! The key written without its name: the error shows it with `key = `.
use leasehold::{distributed_lock, LockError};

#[distributed_lock("order:{id}")]
async fn pay(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("order:{id}", ttl = "10s")]
async fn refund(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
