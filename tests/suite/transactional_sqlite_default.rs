//! The README's `#[transactional]` example on SQLite, as written there (no
//! `begin = "..."`): twenty purchases of twenty different SKUs at once all
//! succeed. Each holds its own Redis lock, so their transactions meet only
//! in SQLite; a deferred `BEGIN` let most of them fail with `database is
//! locked` (code 517), the `BEGIN IMMEDIATE` default makes them queue.
#![cfg(feature = "sqlite")]

use crate::support;

use leasehold::{distributed_lock, fencing_token, transactional, LockError, LockManager};
use leasehold_testkit::{RedisServer, TempDir};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::SqlitePool;
use support::{connect, within};

/// Purchases at once, each of its own SKU.
const PURCHASES: usize = 20;

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("a newer fencing token wrote this row")]
    Stale,
}

struct Shop {
    db: SqlitePool,
    locks: LockManager,
}

// From the README ("Transactions inside the lock"), unchanged.
#[rustfmt::skip]
impl Shop {
    #[transactional(pool = self.db)] // SQLite: opens with BEGIN IMMEDIATE unless `begin = "..."`
    #[distributed_lock(key = "stock:{sku}", ttl = "10s", wait = "5s", fenced = true, manager = self.locks)]
    async fn buy(&self, sku: &str) -> Result<i64, ShopError> {   // ShopError: From<LockError> + From<sqlx::Error>
        let token = fencing_token().await? as i64;
        let units: i64 = sqlx::query_scalar("SELECT units FROM stock WHERE sku = $1")
            .bind(sku).fetch_one(&mut **tx).await?;
        let updated = sqlx::query(
            "UPDATE stock SET units = $1, fence = $2 WHERE sku = $3 AND fence < $2")
            .bind(units - 1).bind(token).bind(sku).execute(&mut **tx).await?;
        if updated.rows_affected() == 0 { return Err(ShopError::Stale); } // rolls back
        Ok(units - 1)
    }
}

/// A shop on a fresh database in `dir` whose pool has sqlx's defaults but
/// for `journal`, with one row of 10 units for each of `skus`.
async fn shop(
    server: &RedisServer,
    dir: &TempDir,
    journal: SqliteJournalMode,
    skus: &[String],
) -> Shop {
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("shop.sqlite"))
        .create_if_missing(true)
        .journal_mode(journal);
    let db = SqlitePool::connect_with(options)
        .await
        .expect("open SQLite");
    sqlx::query(
        "CREATE TABLE stock (sku TEXT PRIMARY KEY, units INTEGER NOT NULL, fence INTEGER NOT NULL)",
    )
    .execute(&db)
    .await
    .expect("create stock");
    for sku in skus {
        sqlx::query("INSERT INTO stock (sku, units, fence) VALUES (?, 10, 0)")
            .bind(sku)
            .execute(&db)
            .await
            .expect("insert stock");
    }
    Shop {
        db,
        locks: connect(&server.url()).await,
    }
}

/// Buys one unit of each of [`PURCHASES`] SKUs at once; every purchase must succeed.
async fn concurrent_purchases_of_different_skus_all_succeed(journal: SqliteJournalMode) {
    let server = RedisServer::start();
    let dir = TempDir::new("tx-default").expect("create a temp dir for the database");
    let skus: Vec<String> = (0..PURCHASES).map(|n| format!("sku-{n}")).collect();
    let shop = std::sync::Arc::new(shop(&server, &dir, journal, &skus).await);
    let purchases: Vec<_> = skus
        .iter()
        .map(|sku| {
            let (shop, sku) = (std::sync::Arc::clone(&shop), sku.clone());
            tokio::spawn(async move { shop.buy(&sku).await.map_err(|error| error.to_string()) })
        })
        .collect();
    let mut outcomes = Vec::new();
    for purchase in purchases {
        outcomes.push(within(purchase).await.expect("purchase task"));
    }
    let failed: Vec<&String> = outcomes
        .iter()
        .filter_map(|outcome| outcome.as_ref().err())
        .collect();
    assert!(
        failed.is_empty(),
        "{journal:?}: {} of {PURCHASES} failed: {failed:?}",
        failed.len()
    );
    assert!(
        outcomes.iter().all(|outcome| outcome == &Ok(9)),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_purchases_of_different_skus_all_succeed_in_wal_mode() {
    concurrent_purchases_of_different_skus_all_succeed(SqliteJournalMode::Wal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_purchases_of_different_skus_all_succeed_with_a_rollback_journal() {
    concurrent_purchases_of_different_skus_all_succeed(SqliteJournalMode::Delete).await;
}
