//! The attribute on something other than a function.
use distributed_lock::distributed_lock;

#[distributed_lock(key = "job")]
pub struct Job;

fn main() {}
