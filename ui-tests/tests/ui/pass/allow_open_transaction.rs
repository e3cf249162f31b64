//! Parameters that only look like an open transaction, and the explicit
//! opt-out for a caller's transaction. Stand-in types shaped like sqlx's.
use leasehold::{distributed_lock, LockError};

mod db {
    pub struct Transaction<'c, DB>(pub &'c mut DB);
    pub struct PgConnection;
    pub struct Postgres;
    pub struct MultiplexedConnection;
}

use db::{MultiplexedConnection, PgConnection, Postgres, Transaction};

/// The caller commits right after this returns, and nobody else acts on the
/// row meanwhile: the author takes that on.
#[distributed_lock(key = "account:{id}", allow_open_transaction = true)]
pub async fn debit(tx: &mut Transaction<'_, Postgres>, id: u64) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
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
