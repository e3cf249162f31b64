//! `mode = "read"` and `mode = "write"` run the body under a read/write lock.
use leasehold::{distributed_lock, LockError, LockManager};

struct Catalog {
    locks: LockManager,
}

impl Catalog {
    #[distributed_lock(key = "catalog:{id}", mode = "read", wait = "5s", manager = self.locks)]
    async fn show(&self, id: u64) -> Result<String, LockError> {
        Ok(id.to_string())
    }

    #[distributed_lock(key = "catalog:{id}", mode = "write", fenced = true, manager = self.locks)]
    async fn update(&self, id: u64) -> Result<u64, LockError> {
        let _ = id;
        leasehold::fencing_token().await
    }
}

fn main() {
    let _ = Catalog::show;
    let _ = Catalog::update;
}
