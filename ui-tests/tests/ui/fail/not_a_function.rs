//! The attribute on something other than a function.
use leasehold::distributed_lock;

#[distributed_lock(key = "job")]
pub struct Job;

fn main() {}
