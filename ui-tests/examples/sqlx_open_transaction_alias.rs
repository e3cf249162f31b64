//! Issue 42: the proof that no parameter is an open transaction sees
//! through aliases without refusing what is not one: an alias of a pool or
//! of a plain type, a shared borrow of a connection, a generic parameter,
//! and an aliased transaction under the explicit opt-out.
use leasehold::{distributed_lock, LockError};
use sqlx::{Sqlite, SqliteConnection, SqlitePool};

type Tx = sqlx::Transaction<'static, Sqlite>;
type Pool = SqlitePool;
type Id = u64;

#[distributed_lock(key = "account:{id}")]
pub async fn read(pool: &Pool, conn: &SqliteConnection, id: Id) -> Result<u64, LockError> {
    let _ = (pool, conn);
    Ok(id)
}

#[distributed_lock(key = "account:{id}")]
pub async fn generic<T: Send + Sync>(value: &mut T, id: Id) -> Result<u64, LockError> {
    let _ = value;
    Ok(id)
}

#[distributed_lock(key = "account:{id}", allow_open_transaction = true)]
pub async fn debit(tx: &mut Tx, id: Id) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
}

fn main() {}
