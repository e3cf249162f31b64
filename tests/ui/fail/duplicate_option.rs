//! An option given twice: reported on the second one.
use distributed_lock::{distributed_lock, LockError};

#[distributed_lock(key = "job", ttl = "30s", wait = "1s", ttl = "1m")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
