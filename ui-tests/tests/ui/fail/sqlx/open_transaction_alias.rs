//! Issue 42: a transaction behind a type alias reads like any other type, so
//! the signature's spelling cannot tell; the expansion asks the compiler to
//! prove each parameter is not one, and it cannot.
use leasehold::{distributed_lock, LockError};
use sqlx::{Sqlite, SqliteConnection};

type Tx = sqlx::Transaction<'static, Sqlite>;
type Conn = SqliteConnection;

#[distributed_lock(key = "account:{id}")]
async fn pay(tx: &mut Tx, id: u64) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
}

#[distributed_lock(key = "account:{id}")]
async fn refund(id: u64, conn: &mut Conn) -> Result<u64, LockError> {
    let _ = conn;
    Ok(id)
}

#[distributed_lock(key = "account:{id}")]
async fn close(tx: Tx, id: u64) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
}

fn main() {}
