//! An option given twice: reported on the second one. And `client`, the
//! former name of `manager`: refused with the name to write.
use leasehold::{distributed_lock, LockError, LockManager};

#[distributed_lock(key = "job", ttl = "30s", wait = "1s", ttl = "1m")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", manager = locks, client = locks)]
async fn former_name(locks: &LockManager) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
