//! Wrongly typed values are each reported on the value.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(
    key = job,
    renew = "yes",
    reentrant = 1,
    on_lost = "stop",
    fenced = "always",
    crate = "leasehold",
)]
async fn everything_wrong() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", renew)]
async fn flag_without_value() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
