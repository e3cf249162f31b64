//! A free function with every option spelled out.
use leasehold::{distributed_lock, LockError};

pub struct Order {
    pub id: u64,
}

#[distributed_lock(
    key = "order:{order.id}:{user_id}",
    ttl = "1m30s",
    wait = "250ms",
    renew = false,
    reentrant = false,
    on_lost = "continue",
    fenced = true,
    min_replicas = 1,
    replica_timeout = "100ms"
)]
pub async fn pay(order: &Order, user_id: u64) -> Result<String, LockError> {
    if user_id == 0 {
        return Ok("nobody".to_owned());
    }
    Ok(format!("{}-{user_id}", order.id))
}

/// Only defaults, a literal key and escaped braces.
#[distributed_lock(key = "{{jobs}}:nightly")]
async fn nightly() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    spawnable(pay(&Order { id: 1 }, 2));
    spawnable(nightly());
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
