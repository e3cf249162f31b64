//! `manager` must be a `LockManager`, a reference to one, or an `Arc` of one;
//! the error points at the expression.
use leasehold::{distributed_lock, LockError};

pub struct Service {
    name: String,
}

impl Service {
    #[distributed_lock(key = "job:{id}", manager = self.name)]
    pub async fn run(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

fn main() {}
