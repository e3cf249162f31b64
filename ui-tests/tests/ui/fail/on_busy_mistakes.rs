//! `on_busy` and `hold_at_least` mistakes, each reported on its value.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job", on_busy = "later")]
async fn unknown_on_busy() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", on_busy = "skip", wait = "1s")]
async fn skip_with_wait() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", hold_at_least = "0s")]
async fn zero_hold() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "job", hold_at_least = "8761h")]
async fn hold_longer_than_a_year() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
