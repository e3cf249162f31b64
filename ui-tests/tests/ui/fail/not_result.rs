//! No return type, or one that is not a `Result`.
use leasehold::distributed_lock;

#[distributed_lock(key = "job:{id}")]
async fn nothing(id: u64) {
    let _ = id;
}

#[distributed_lock(key = "job:{id}")]
async fn option(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {}
