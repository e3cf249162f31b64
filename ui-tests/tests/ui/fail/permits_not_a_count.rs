//! `permits` that is not a whole number of at least 1, reported on its value.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "api:payments", permits = 0)]
async fn zero_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api:payments", permits = "8")]
async fn permits_as_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api:payments", permits = 2.5)]
async fn fractional_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "api:payments", permits = -1)]
async fn negative_permits() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
