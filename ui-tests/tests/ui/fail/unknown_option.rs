//! Unknown options; the message lists the valid ones.
use distributed_lock::{distributed_lock, LockError};

#[distributed_lock(key = "job", tll = "30s")]
async fn typo() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
