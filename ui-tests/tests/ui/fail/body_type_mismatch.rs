//! Type errors in the body point at the body and the declared return type,
//! not at the attribute.
use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "job:{id}")]
async fn wrong_value(id: u64) -> Result<u64, LockError> {
    if id == 0 {
        return Ok("none");
    }
    Ok(id)
}

#[derive(Debug)]
pub struct JobError;

impl From<LockError> for JobError {
    fn from(_: LockError) -> Self {
        JobError
    }
}

#[distributed_lock(key = "job:{text}")]
async fn wrong_error(text: &str) -> Result<u64, JobError> {
    let id: u64 = text.parse()?;
    Ok(id)
}

fn main() {}
