//! A locked function must not receive a transaction the caller opened: the
//! lock would be released before the caller commits. Stand-in types shaped
//! like sqlx's; `tests/ui/fail/sqlx/` has the same with the real ones.
use leasehold::{distributed_lock, LockError};

mod db {
    pub struct Transaction<'c, DB>(pub &'c mut DB);
    pub struct PgConnection;
    pub struct Postgres;
}

use db::{PgConnection, Postgres, Transaction};

#[distributed_lock(key = "account:{id}")]
async fn debit(tx: &mut Transaction<'_, Postgres>, id: u64) -> Result<u64, LockError> {
    let _ = tx;
    Ok(id)
}

pub struct Ledger;

impl Ledger {
    #[distributed_lock(key = "account:{id}", allow_open_transaction = false)]
    async fn credit(&self, id: u64, conn: &mut PgConnection) -> Result<u64, LockError> {
        let _ = conn;
        Ok(id)
    }
}

#[distributed_lock(key = "account:{id}", allow_open_transaction = "yes")]
async fn bad_flag(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
