//! The lint with sqlx's own types, also when stacked with `#[transactional]`.
use leasehold::{distributed_lock, transactional, LockError};
use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};

#[derive(Debug)]
pub enum ShopError {
    Lock(LockError),
    Db(sqlx::Error),
}

impl From<LockError> for ShopError {
    fn from(error: LockError) -> Self {
        ShopError::Lock(error)
    }
}

impl From<sqlx::Error> for ShopError {
    fn from(error: sqlx::Error) -> Self {
        ShopError::Db(error)
    }
}

#[distributed_lock(key = "stock:{sku}")]
async fn reserve(sku: &str, tx: &mut Transaction<'_, Sqlite>) -> Result<(), ShopError> {
    sqlx::query("UPDATE stock SET units = units - 1 WHERE sku = ?")
        .bind(sku)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[distributed_lock(key = "stock:{sku}")]
async fn release(sku: &str, conn: &mut SqliteConnection) -> Result<(), ShopError> {
    sqlx::query("UPDATE stock SET units = units + 1 WHERE sku = ?")
        .bind(sku)
        .execute(conn)
        .await?;
    Ok(())
}

#[distributed_lock(key = "stock:{sku}")]
#[transactional(pool = db)]
async fn nested(
    db: &SqlitePool,
    sku: &str,
    outer: &mut sqlx::Transaction<'static, Sqlite>,
) -> Result<(), ShopError> {
    let _ = (sku, outer, tx);
    Ok(())
}

fn main() {}
