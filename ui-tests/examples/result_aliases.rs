//! `io::Result`, local aliases (`PayResult`, and `Fallible`, whose name does
//! not end in `Result`: the macro cannot see through an alias, the compiler
//! checks it), a custom error type with `From<LockError>`,
//! and `?` converting errors inside the body.
use std::io;

use leasehold::{distributed_lock, LockError};

#[distributed_lock(key = "file:{name}")]
async fn read(name: &str) -> io::Result<Vec<u8>> {
    let parsed: u8 = name.parse().map_err(|_| io::Error::other("bad name"))?;
    Ok(vec![parsed])
}

#[derive(Debug)]
enum PayError {
    Lock(LockError),
    Declined,
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayError::Lock(error) => write!(f, "payment not locked: {error}"),
            PayError::Declined => f.write_str("declined"),
        }
    }
}

impl From<LockError> for PayError {
    fn from(error: LockError) -> Self {
        PayError::Lock(error)
    }
}

type PayResult<T> = Result<T, PayError>;

#[distributed_lock(key = "card:{card}")]
async fn charge(card: u64) -> PayResult<u64> {
    if card == 0 {
        return Err(PayError::Declined);
    }
    Ok(card)
}

/// The alias's name says nothing of a `Result`.
type Fallible<T> = Result<T, PayError>;

#[distributed_lock(key = "void:{card}")]
async fn void(card: u64) -> Fallible<()> {
    charge(card).await.map(drop)
}

#[distributed_lock(key = "refund:{card}")]
async fn refund(card: u64) -> Result<u64, PayError> {
    let charged = charge(card).await?;
    Ok(charged)
}

fn main() {
    spawnable(read("1"));
    spawnable(refund(1));
    spawnable(void(1));
}

/// The futures must stay `Send`, so that they can be spawned.
fn spawnable<F: std::future::Future + Send>(_: F) {}
