//! `#[transactional]` on PostgreSQL, where the pitfall is silent: under READ
//! COMMITTED a holder that commits after releasing the lock lets the next one
//! read the old value and overwrite it, with no error. The lock around the
//! transaction prevents that, in both orders of the attributes.
//!
//! CI tests SQLite only (`tests/suite/transactional.rs`); these need a server and
//! are ignored by default:
//!
//! ```text
//! POSTGRES_URL=postgres://user@127.0.0.1:5432/db \
//!     cargo test --features postgres --test transactional_postgres -- --ignored
//! ```
#![cfg(feature = "postgres")]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{distributed_lock, transactional, LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use support::{connect, race, AppError, Counter, Race, Stacking, ROUNDS, TASKS};

/// A counter row in its own table, incremented under the lock `counter`.
#[derive(Clone)]
struct PgCounter {
    locks: LockManager,
    db: PgPool,
    table: String,
}

impl PgCounter {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "counter", manager = self.locks)]
    async fn increment_then_refuse(&self) -> Result<i64, AppError> {
        read_then_write(tx, &self.table).await?;
        Err(AppError::Refused)
    }
}

impl Counter for PgCounter {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "counter", wait = "30s", manager = self.locks)]
    async fn increment_transaction_above(&self) -> Result<i64, AppError> {
        Ok(read_then_write(tx, &self.table).await?)
    }

    #[distributed_lock(key = "counter", wait = "30s", manager = self.locks)]
    #[transactional(pool = self.db)]
    async fn increment_transaction_below(&self) -> Result<i64, AppError> {
        Ok(read_then_write(tx, &self.table).await?)
    }

    /// The pitfall by hand: the caller's transaction commits after the release.
    async fn increment_committing_after_release(&self) -> Result<i64, AppError> {
        let mut tx = self.db.begin().await?;
        let options = LockOptions::new().wait(Duration::from_secs(30));
        let read = self
            .locks
            .with_lock("counter", options, read_then_write(&mut tx, &self.table))
            .await??;
        tokio::time::sleep(Duration::from_millis(5)).await;
        tx.commit().await?;
        Ok(read)
    }

    async fn value(&self) -> i64 {
        let sql = format!("SELECT value FROM {} WHERE id = 1", self.table);
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&self.db)
            .await
            .expect("read counter")
    }
}

async fn read_then_write(conn: &mut PgConnection, table: &str) -> Result<i64, sqlx::Error> {
    let select = format!("SELECT value FROM {table} WHERE id = 1");
    let value: i64 = sqlx::query_scalar(AssertSqlSafe(select))
        .fetch_one(&mut *conn)
        .await?;
    tokio::task::yield_now().await;
    let update = format!("UPDATE {table} SET value = $1 WHERE id = 1");
    sqlx::query(AssertSqlSafe(update))
        .bind(value + 1)
        .execute(&mut *conn)
        .await?;
    Ok(value)
}

/// A fresh counter table on `POSTGRES_URL`, dropped by [`drop_table`].
async fn counter(server: &RedisServer) -> PgCounter {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let url = std::env::var("POSTGRES_URL").expect("set POSTGRES_URL to run these tests");
    let db = PgPool::connect(&url).await.expect("connect to PostgreSQL");
    let table = format!(
        "leasehold_counter_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    for sql in [
        format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY, value BIGINT NOT NULL)"),
        format!("INSERT INTO {table} (id, value) VALUES (1, 0)"),
    ] {
        sqlx::query(AssertSqlSafe(sql)).execute(&db).await.unwrap();
    }
    let locks = connect(&server.url()).await;
    PgCounter { locks, db, table }
}

async fn drop_table(counter: &PgCounter) {
    let sql = format!("DROP TABLE {}", counter.table);
    sqlx::query(AssertSqlSafe(sql))
        .execute(&counter.db)
        .await
        .unwrap();
}

/// The race on a fresh table, each task with its own lock manager; every
/// increment must succeed (PostgreSQL reports no conflict, even for the
/// pitfall).
async fn race_on_postgres(stacking: Stacking) -> Race {
    let server = RedisServer::start();
    let first = counter(&server).await;
    let mut counters = Vec::new();
    for _ in 0..TASKS {
        counters.push(PgCounter {
            locks: connect(&server.url()).await,
            ..first.clone()
        });
    }
    let race = race(counters, stacking).await;
    drop_table(&first).await;
    assert_eq!(race.errors, Vec::<String>::new(), "{stacking:?}");
    race
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a PostgreSQL server in POSTGRES_URL"]
async fn next_holder_reads_committed_value_in_both_orders() {
    let total = (TASKS * ROUNDS) as i64;
    for stacking in [Stacking::TransactionAbove, Stacking::TransactionBelow] {
        let race = race_on_postgres(stacking).await;
        assert_eq!(race.reads, (0..total).collect::<Vec<_>>(), "{stacking:?}");
        assert_eq!(race.last, total, "{stacking:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a PostgreSQL server in POSTGRES_URL"]
async fn control_commit_after_release_loses_updates_silently() {
    let Race { reads, last, .. } = race_on_postgres(Stacking::CommitAfterRelease).await;
    let mut distinct = reads.clone();
    distinct.dedup();
    eprintln!(
        "commit after release: {} stale reads, counter {last} of {}",
        reads.len() - distinct.len(),
        reads.len()
    );
    assert!(distinct.len() < reads.len(), "expected stale reads");
    assert!(last < reads.len() as i64, "expected lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a PostgreSQL server in POSTGRES_URL"]
async fn error_rolls_back() {
    let server = RedisServer::start();
    let counter = counter(&server).await;
    let result = counter.increment_then_refuse().await;
    assert!(matches!(result, Err(AppError::Refused)), "{result:?}");
    assert_eq!(counter.value().await, 0);
    counter.increment_transaction_below().await.unwrap();
    assert_eq!(counter.value().await, 1);
    drop_table(&counter).await;
}
