//! Parameters that only look like an open transaction, and the explicit
//! opt-out for a caller's transaction. Stand-in types shaped like sqlx's.
use leasehold::{distributed_lock, LockError};

mod db {
    pub struct Transaction<'c, DB>(pub &'c mut DB);
    pub struct PgConnection;
    pub struct Postgres;
    pub struct MultiplexedConnection;
}

/// A payment, which a shop may well call a transaction.
pub struct Transaction {
    pub id: u64,
}

use db::{MultiplexedConnection, PgConnection, Postgres};

/// The caller commits right after this returns, and nobody else acts on the
/// row meanwhile: the author takes that on.
#[distributed_lock(key = "account:{id}", allow_open_transaction = true)]
pub async fn debit(tx: &mut db::Transaction<'_, Postgres>, id: u64) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
}

/// A domain type named `Transaction`, and a Redis connection, even `&mut`,
/// are not a database transaction.
#[distributed_lock(key = "payment:{payment.id}")]
pub async fn settle(
    payment: &Transaction,
    redis: &mut MultiplexedConnection,
) -> Result<u64, LockError> {
    let _ = redis;
    Ok(payment.id)
}

/// Shared references and connections by value are not a caller's transaction.
#[distributed_lock(key = "account:{id}")]
pub async fn audit(
    conn: &PgConnection,
    redis: MultiplexedConnection,
    id: u64,
) -> Result<u64, LockError> {
    let _ = (conn, redis);
    Ok(id)
}

fn main() {}
