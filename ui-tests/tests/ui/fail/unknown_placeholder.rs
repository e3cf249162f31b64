//! A placeholder naming no parameter; the message lists the parameters.
use leasehold::{distributed_lock, LockError};

pub struct Order {
    pub id: u64,
}

pub struct Shop;

impl Shop {
    #[distributed_lock(key = "order:{order.id}:{usr}")]
    pub async fn pay(&self, order: &Order, user_id: u64) -> Result<u64, LockError> {
        Ok(order.id + user_id)
    }
}

fn main() {}
