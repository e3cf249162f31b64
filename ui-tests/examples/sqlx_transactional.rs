//! `#[transactional]` alone and stacked with `#[distributed_lock]` in both
//! orders, with each accepted pool expression and option, without a single
//! warning; the futures stay `Send`, so they can be spawned and served by
//! axum.
#![deny(warnings)]
// The one-line bodies are the case: rustfmt would spread them over lines.
#![cfg_attr(rustfmt, rustfmt::skip)]

use std::future::Future;
use std::sync::Arc;

use leasehold::{distributed_lock, transactional, LockError, LockManager};
use sqlx::{Database, Pool, SqlitePool};

mod reexported {
    pub use leasehold as locks;
}

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

pub struct Shop {
    locks: LockManager,
    db: SqlitePool,
    shared: Arc<SqlitePool>,
}

impl Shop {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    pub async fn transaction_above(&self, sku: &str) -> Result<i64, ShopError> {
        let units: i64 = sqlx::query_scalar("SELECT units FROM stock WHERE sku = ?")
            .bind(sku)
            .fetch_one(&mut **tx)
            .await?;
        Ok(units)
    }

    #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
    #[transactional(pool = self.shared, tx = conn, begin = "BEGIN IMMEDIATE")]
    pub async fn transaction_below(&self, sku: &str) -> Result<i64, ShopError> {
        let units: i64 = sqlx::query_scalar("SELECT units FROM stock WHERE sku = ?")
            .bind(sku)
            .fetch_one(&mut **conn)
            .await?;
        if units == 0 {
            return Ok(0);
        }
        Ok(units - 1)
    }
}

/// Without a lock, and with the error type of sqlx itself.
#[transactional(pool = db)]
pub async fn count(db: &SqlitePool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM stock")
        .fetch_one(&mut **tx)
        .await
}

/// Generic over the database.
#[transactional(pool = pool, crate = reexported::locks)]
pub async fn touch<DB: Database>(pool: &Pool<DB>) -> Result<(), sqlx::Error> {
    let _ = tx;
    Ok(())
}

/// A one-line body, with a parameter used only in the key.
#[distributed_lock(key = "stock:{sku}")]
#[transactional(pool = db)]
pub async fn one_line(db: &SqlitePool, sku: &str) -> Result<i64, ShopError> { Ok(units(tx).await?) }

async fn units(tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT SUM(units) FROM stock").fetch_one(&mut **tx).await
}

fn require_send<F: Future + Send>(_: F) {}

/// Type-checked, not run.
fn futures_are_send(shop: &Shop) {
    require_send(shop.transaction_above("sku-1"));
    require_send(shop.transaction_below("sku-1"));
    require_send(count(&shop.db));
    require_send(touch(&shop.db));
    require_send(one_line(&shop.db, "sku-1"));
}

fn main() {
    let _ = futures_are_send;
}
