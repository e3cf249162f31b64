//! `#[tokio::test]` written above `#[distributed_lock]` expands first and
//! leaves a plain `fn`: the error says to write the lock above it.
use leasehold::distributed_lock;

#[tokio::test]
#[distributed_lock(key = "job")]
async fn locked_test() -> Result<(), leasehold::LockError> {
    Ok(())
}

fn main() {}
