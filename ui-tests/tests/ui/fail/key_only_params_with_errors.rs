//! When the attribute reports a mistake, parameters used only in the key get
//! no "unused variable" warning on top of the error.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "stock:{sku}:{qty}", ttl = "ten")]
async fn bad_option(sku: &str, qty: u32) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "stock:{sku}:{missing}")]
async fn bad_placeholder(sku: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "stock:{sku")]
async fn unclosed(sku: &str) -> Result<(), LockError> {
    Ok(())
}

pub struct Shop {
    id: u64,
}

impl Shop {
    #[distributed_lock(key = "shop:{self.id}:{sku}", retries = 3)]
    async fn method(&self, sku: &str) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
