//! Unknown options; the message lists the valid ones.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", tll = "30s")]
async fn typo() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
