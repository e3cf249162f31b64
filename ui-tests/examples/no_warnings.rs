//! Correct uses compile without a single warning: one-line bodies, parameters
//! used only in the key, and every option written out.
#![deny(warnings)]
// The one-line bodies are the case: rustfmt would spread them over lines.
#![cfg_attr(rustfmt, rustfmt::skip)]

use leasehold::{distributed_lock, LockError, LockManager};

#[distributed_lock(key = "stock:{sku}")]
async fn one_line(sku: &str, qty: u32) -> Result<u32, LockError> { Ok(qty) }

#[distributed_lock(key = "stock:{sku}")]
async fn unit(sku: &str) -> Result<(), LockError> { Ok(()) }

#[distributed_lock(key = "stock:{sku}:{qty}")]
async fn key_only(sku: &str, qty: u32) -> Result<(), LockError> {
    Ok(())
}

pub struct Shop {
    locks: LockManager,
    id: u64,
}

impl Shop {
    #[distributed_lock(
        key = "shop:{self.id}:{sku}",
        ttl = "1m",
        wait = "1s",
        renew = true,
        reentrant = false,
        on_lost = "continue",
        manager = self.locks,
        min_replicas = 1,
        replica_timeout = "100ms",
        allow_open_transaction = false,
    )]
    async fn every_option(&self, sku: &str) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "shop:{self.id}", manager = self.locks)]
    async fn method_one_line(&self) -> Result<u64, LockError> { Ok(self.id) }
}

fn main() {
    let shop = Shop {
        locks: LockManager::in_memory(),
        id: 1,
    };
    spawnable(one_line("sku", 1));
    spawnable(unit("sku"));
    spawnable(key_only("sku", 1));
    spawnable(shop.every_option("sku"));
    spawnable(shop.method_one_line());
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
