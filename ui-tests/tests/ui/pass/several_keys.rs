//! `keys`: several key templates, from parameters and their fields.
use distributed_lock::{distributed_lock, LockError};

pub struct Account {
    pub id: u64,
}

#[distributed_lock(keys = ["account:{from.id}", "account:{to.id}"], ttl = "10s", wait = "5s")]
pub async fn transfer(from: &Account, to: &Account, amount: u64) -> Result<u64, LockError> {
    Ok(amount)
}

#[distributed_lock(keys = ["job:{name}"])]
pub async fn one_key_as_a_list(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

fn main() {}
