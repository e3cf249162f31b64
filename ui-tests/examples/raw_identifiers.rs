//! Parameters named with raw identifiers (`r#type`) are placeholders too,
//! written either way.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "item:{r#type}:{match}")]
async fn raw(r#type: &str, r#match: u32) -> Result<(), LockError> {
    Ok(())
}

struct Item {
    r#type: String,
}

#[distributed_lock(key = "item:{item.r#type}:{item.type}")]
async fn raw_field(item: &Item) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
