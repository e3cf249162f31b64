//! `permits`: the body runs under one of N permits of the key's semaphore.
use leasehold::{distributed_lock, LockError, LockManager};

#[distributed_lock(key = "api:payments", permits = 8, ttl = "10s", wait = "5s")]
pub async fn pay(amount: u64) -> Result<u64, LockError> {
    Ok(amount)
}

pub struct Client {
    pub locks: LockManager,
}

impl Client {
    #[distributed_lock(key = "api:{self_id}", permits = 1, on_lost = "continue", manager = self.locks)]
    pub async fn call(&self, self_id: u32) -> Result<(), LockError> {
        let _ = self_id;
        Ok(())
    }
}

fn main() {}
