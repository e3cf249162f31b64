//! No return type, or one that is not a `Result`: refused by the attribute
//! when it plainly is not one (`Option`), else by the compiler at the return
//! type (a struct, which could have been an alias of `Result`).
use leasehold::distributed_lock;

#[distributed_lock(key = "job:{id}")]
async fn nothing(id: u64) {
    let _ = id;
}

#[distributed_lock(key = "job:{id}")]
async fn option(id: u64) -> Option<u64> {
    Some(id)
}

pub struct Outcome(pub u64);

#[distributed_lock(key = "job:{id}")]
async fn outcome(id: u64) -> Outcome {
    Outcome(id)
}

fn main() {}
