//! An unclosed `{` and a stray `}` in the key.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id")]
async fn unclosed(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "order}:{id}")]
async fn stray(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
