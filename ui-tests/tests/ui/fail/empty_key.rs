//! An empty key, and an empty `{}` placeholder.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "")]
async fn empty(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "order:{}")]
async fn empty_placeholder(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
