//! No `key`: reported on the attribute.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(ttl = "30s")]
async fn no_key() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
async fn no_arguments() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
