//! `keys`: several key templates, from parameters and their fields.
use leasehold::{distributed_lock, LockError};

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

#[distributed_lock(keys = ["job:{name}", "report:{name}"], on_busy = "skip", hold_at_least = "5m")]
pub async fn skipped_when_any_key_is_busy(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], on_busy = "skip")]
pub async fn skipped_returns_none(count: u32) -> Result<Option<u32>, LockError> {
    Ok(Some(count))
}

fn main() {}
