//! Three mistakes in one attribute, all reported by one compile.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "user:{usr}", ttl = "ten seconds", retry = 3)]
async fn three(user: u64) -> Result<u64, LockError> {
    Ok(user)
}

fn main() {}
