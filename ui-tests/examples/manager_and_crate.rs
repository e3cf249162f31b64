//! `manager = ...` with each accepted manager type, and `crate = path`.
use std::sync::Arc;

use leasehold::{distributed_lock, LockError, LockManager};

mod reexported {
    pub use leasehold as locks;
}

pub struct Service {
    locks: LockManager,
    shared: Arc<LockManager>,
}

impl Service {
    #[distributed_lock(key = "job:{id}", manager = self.locks)]
    pub async fn owned(&self, id: u32) -> Result<u32, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "job:{id}", manager = self.shared)]
    pub async fn arc(&self, id: u32) -> Result<u32, LockError> {
        Ok(id)
    }
}

#[distributed_lock(key = "job:{id}", manager = manager)]
pub async fn borrowed(manager: &LockManager, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[distributed_lock(key = "job:{id}", crate = reexported::locks)]
pub async fn via_reexport(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    let service = Service {
        locks: LockManager::in_memory(),
        shared: Arc::new(LockManager::in_memory()),
    };
    spawnable(service.owned(1));
    spawnable(service.arc(2));
    spawnable(borrowed(&service.locks, 3));
    spawnable(via_reexport(5));
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
