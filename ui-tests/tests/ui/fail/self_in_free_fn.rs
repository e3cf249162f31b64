//! `{self...}` in a function without `self`.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "account:{self.id}")]
async fn close(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
