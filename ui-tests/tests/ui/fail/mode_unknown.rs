//! `mode` takes "read" or "write": a misspelt value is reported on it,
//! listing both.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "catalog", mode = "reed")]
async fn show() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
