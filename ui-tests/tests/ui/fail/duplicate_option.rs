//! An option given twice, under the same name or under `manager` and its
//! older name `client`: reported on the second one.
use leasehold::{distributed_lock, LockError, LockManager};

#[distributed_lock(key = "job", ttl = "30s", wait = "1s", ttl = "1m")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", manager = locks, client = locks)]
async fn two_names(locks: &LockManager) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
