//! A placeholder on a name bound by a destructuring parameter.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "pair:{a}")]
async fn pair((a, b): (u32, u32)) -> Result<u32, LockError> {
    Ok(a + b)
}

fn main() {}
