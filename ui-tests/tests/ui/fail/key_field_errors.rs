//! A missing field or a value without `Display` is reported on the key.
use leasehold::{distributed_lock, LockError};

pub struct Order {
    pub id: u64,
    pub lines: Vec<u64>,
}

#[distributed_lock(key = "order:{order.idd}")]
async fn missing_field(order: &Order) -> Result<u64, LockError> {
    Ok(order.id)
}

#[distributed_lock(key = "order:{order.lines}")]
async fn not_display(order: &Order) -> Result<u64, LockError> {
    Ok(order.id)
}

fn main() {}
