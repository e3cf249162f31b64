//! `keys` mistakes, each reported where it is.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(keys = [])]
async fn no_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", keys = ["b"])]
async fn key_and_keys() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = "a")]
async fn not_a_list() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", b])]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a:{x}", "b:{y}"])]
async fn unknown_placeholder(x: u32) -> Result<(), LockError> {
    let _ = x;
    Ok(())
}

fn main() {}
