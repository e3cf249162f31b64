//! `#[transactional]` with `#[distributed_lock]` on a real SQLite file and a
//! real redis-server: the transaction commits before the lock is released, in
//! both orders of the attributes; it rolls back on error, panic, cancellation
//! and lost lease; and a flash sale over four lock managers neither oversells
//! nor duplicates orders.
#![cfg(feature = "sqlite")]

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    distributed_lock, fencing_token, transactional, LockError, LockManager, LockOptions,
};
use leasehold_testkit::{RedisServer, TempDir};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};
use support::{connect, race, within, AppError, Counter, Race, Stacking, ROUNDS, TASKS};
use tokio::sync::oneshot;

/// A fresh directory for one test's database.
fn scratch_dir() -> TempDir {
    TempDir::new("tx").expect("create a temp dir for the database")
}

/// A pool on `db.sqlite` in `dir`. WAL lets readers run beside the writer;
/// the busy timeout makes a connection wait for another's write lock instead
/// of failing at once.
async fn open_pool(dir: &TempDir) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("db.sqlite"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5));
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("open SQLite")
}

async fn run_sql(db: &SqlitePool, statements: &[&'static str]) {
    for statement in statements {
        sqlx::query(*statement).execute(db).await.expect(statement);
    }
}

// ---------------------------------------------------------------------------
// Commit happens-before release.

/// The counter row of `counter` in SQLite, incremented under the lock `counter`.
#[derive(Clone)]
struct SqliteCounter {
    locks: LockManager,
    db: SqlitePool,
}

impl Counter for SqliteCounter {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "counter", wait = "30s", manager = self.locks)]
    async fn increment_transaction_above(&self) -> Result<i64, AppError> {
        Ok(read_then_write(tx).await?)
    }

    #[distributed_lock(key = "counter", wait = "30s", manager = self.locks)]
    #[transactional(pool = self.db)]
    async fn increment_transaction_below(&self) -> Result<i64, AppError> {
        Ok(read_then_write(tx).await?)
    }

    /// What a `@Transactional` around a locked method does: the caller's
    /// transaction commits after the lock is released.
    async fn increment_committing_after_release(&self) -> Result<i64, AppError> {
        let mut tx = self.db.begin().await?;
        let options = LockOptions::new().wait(Duration::from_secs(30));
        let read = self
            .locks
            .with_lock("counter", options, read_then_write(&mut tx))
            .await??;
        // The caller goes on briefly after the locked call returned.
        tokio::time::sleep(Duration::from_millis(5)).await;
        tx.commit().await?;
        Ok(read)
    }

    async fn value(&self) -> i64 {
        sqlx::query_scalar("SELECT value FROM counter WHERE id = 1")
            .fetch_one(&self.db)
            .await
            .expect("read counter")
    }
}

/// Reads the counter, yields, writes it back plus one; returns what it read.
async fn read_then_write(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    let value: i64 = sqlx::query_scalar("SELECT value FROM counter WHERE id = 1")
        .fetch_one(&mut *conn)
        .await?;
    tokio::task::yield_now().await;
    sqlx::query("UPDATE counter SET value = ? WHERE id = 1")
        .bind(value + 1)
        .execute(&mut *conn)
        .await?;
    Ok(value)
}

/// Runs the race on a fresh database, each task with its own lock manager.
async fn race_on_sqlite(stacking: Stacking) -> Race {
    let server = RedisServer::start();
    let dir = scratch_dir();
    let db = open_pool(&dir).await;
    run_sql(
        &db,
        &[
            "CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)",
            "INSERT INTO counter (id, value) VALUES (1, 0)",
        ],
    )
    .await;
    let mut counters = Vec::new();
    for _ in 0..TASKS {
        counters.push(SqliteCounter {
            locks: connect(&server.url()).await,
            db: db.clone(),
        });
    }
    race(counters, stacking).await
}

async fn assert_no_stale_read(stacking: Stacking) {
    let total = (TASKS * ROUNDS) as i64;
    let race = race_on_sqlite(stacking).await;
    assert_eq!(race.errors, Vec::<String>::new(), "{stacking:?}");
    assert_eq!(
        race.reads,
        (0..total).collect::<Vec<_>>(),
        "{stacking:?}: every increment read the previous one's committed value"
    );
    assert_eq!(race.last, total, "{stacking:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_holder_reads_committed_value_with_transaction_written_above() {
    assert_no_stale_read(Stacking::TransactionAbove).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_holder_reads_committed_value_with_transaction_written_below() {
    assert_no_stale_read(Stacking::TransactionBelow).await;
}

/// The same race detects the pitfall: committing after the release lets the
/// next holder read the value from before the previous write. SQLite's
/// snapshot isolation then refuses its write ("database is locked"), so
/// increments fail and the counter ends short; under PostgreSQL's default
/// READ COMMITTED the stale read would go through and lose updates silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_commit_after_release_reads_stale_data() {
    let total = TASKS * ROUNDS;
    let race = race_on_sqlite(Stacking::CommitAfterRelease).await;
    let distinct: HashSet<i64> = race.reads.iter().copied().collect();
    let stale = race.reads.len() - distinct.len();
    eprintln!(
        "commit after release: {stale} stale reads, {} failed increments ({:?}), counter {} of {total}",
        race.errors.len(),
        race.errors.first(),
        race.last
    );
    assert!(
        stale + race.errors.len() > 0,
        "expected stale reads or conflicts among {total} increments"
    );
    assert!(race.last < total as i64, "some increments were lost");
}

// ---------------------------------------------------------------------------
// Rollback on every path that does not return `Ok`.

/// How `Journal::write_then` ends after inserting its row.
enum Then {
    Commit,
    Fail,
    FailWithQuestionMark,
    Panic,
    Hang(oneshot::Sender<()>),
}

/// Rows of `entries`, written under the lock `journal`.
struct Journal {
    locks: LockManager,
    db: SqlitePool,
}

impl Journal {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "journal", wait = "5s", manager = self.locks)]
    async fn write_then(&self, id: i64, then: Then) -> Result<(), AppError> {
        insert_entry(tx, id).await?;
        match then {
            Then::Commit => Ok(()),
            Then::Fail => Err(AppError::Refused),
            Then::FailWithQuestionMark => {
                let refused: Result<(), AppError> = Err(AppError::Refused);
                refused?;
                Ok(())
            }
            Then::Panic => panic!("body panicked after inserting {id}"),
            Then::Hang(inside) => {
                let _ = inside.send(());
                std::future::pending().await
            }
        }
    }

    /// Writes, then outlives its lease: no renewal, a 300 ms TTL, 2 s of work.
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "journal", ttl = "300ms", renew = false, manager = self.locks)]
    async fn write_then_outlive_lease(&self, id: i64) -> Result<(), AppError> {
        insert_entry(tx, id).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(())
    }

    async fn ids(&self) -> Vec<i64> {
        sqlx::query_scalar("SELECT id FROM entries ORDER BY id")
            .fetch_all(&self.db)
            .await
            .expect("read entries")
    }
}

async fn insert_entry(conn: &mut SqliteConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO entries (id) VALUES (?)")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// A journal on a fresh database; keep the server and directory alive.
async fn journal() -> (Arc<Journal>, RedisServer, TempDir) {
    let server = RedisServer::start();
    let dir = scratch_dir();
    let db = open_pool(&dir).await;
    run_sql(&db, &["CREATE TABLE entries (id INTEGER PRIMARY KEY)"]).await;
    let locks = connect(&server.url()).await;
    (Arc::new(Journal { locks, db }), server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_cancels_the_body_and_rolls_back() {
    let (journal, _server, _dir) = journal().await;
    let started = Instant::now();
    let result = within(journal.write_then_outlive_lease(1)).await;
    assert!(
        matches!(result, Err(AppError::Lock(LockError::LeaseLost { .. }))),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "cancelled when the lease ran out, not after the body: {:?}",
        started.elapsed()
    );
    assert_eq!(
        journal.ids().await,
        Vec::<i64>::new(),
        "nothing half-written"
    );
    // The rolled-back transaction holds no write lock: the next one commits.
    within(journal.write_then(2, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_commits_and_err_rolls_back() {
    let (journal, _server, _dir) = journal().await;
    within(journal.write_then(1, Then::Commit)).await.unwrap();
    let failed = within(journal.write_then(2, Then::Fail)).await;
    assert!(matches!(failed, Err(AppError::Refused)), "{failed:?}");
    let failed = within(journal.write_then(3, Then::FailWithQuestionMark)).await;
    assert!(matches!(failed, Err(AppError::Refused)), "{failed:?}");
    within(journal.write_then(4, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![1, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_rolls_back_and_releases() {
    let (journal, _server, _dir) = journal().await;
    let call = tokio::spawn({
        let journal = Arc::clone(&journal);
        async move { journal.write_then(1, Then::Panic).await }
    });
    assert!(within(call).await.unwrap_err().is_panic());
    assert_eq!(journal.ids().await, Vec::<i64>::new());
    within(journal.write_then(2, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_call_rolls_back_and_releases() {
    let (journal, _server, _dir) = journal().await;
    let (inside, entered) = oneshot::channel();
    let call = tokio::spawn({
        let journal = Arc::clone(&journal);
        async move { journal.write_then(1, Then::Hang(inside)).await }
    });
    within(entered).await.unwrap();
    call.abort();
    assert!(within(call).await.unwrap_err().is_cancelled());
    assert_eq!(journal.ids().await, Vec::<i64>::new());
    within(journal.write_then(2, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![2]);
}

// ---------------------------------------------------------------------------
// Flash sale on the database.

const BUYERS: usize = 500;
const INSTANCES: usize = 4;
const INITIAL_STOCK: i64 = 100;

/// One service instance: its own lock manager and its own pool, as if each
/// were a separate process.
struct Shop {
    locks: LockManager,
    db: SqlitePool,
}

impl Shop {
    /// Buys one unit: read the stock, check it, write it back guarded by the
    /// fencing token, record the order. Returns the order number, or `None`
    /// when sold out.
    #[distributed_lock(key = "stock:{sku}", ttl = "10s", wait = "60s", manager = self.locks)]
    #[transactional(pool = self.db)]
    async fn buy(&self, sku: &str, buyer: i64) -> Result<Option<i64>, AppError> {
        let token = fencing_token().await?;
        let fence = i64::try_from(token).expect("token fits in i64");
        let (units, sold): (i64, i64) =
            sqlx::query_as("SELECT units, sold FROM stock WHERE sku = ?")
                .bind(sku)
                .fetch_one(&mut **tx)
                .await?;
        if units <= 0 {
            return Ok(None);
        }
        let order_no = sold + 1;
        let updated = sqlx::query(
            "UPDATE stock SET units = ?, sold = ?, fence = ? WHERE sku = ? AND fence < ?",
        )
        .bind(units - 1)
        .bind(order_no)
        .bind(fence)
        .bind(sku)
        .bind(fence)
        .execute(&mut **tx)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(AppError::StaleFence(token));
        }
        sqlx::query("INSERT INTO orders (order_no, sku, buyer, fencing_token) VALUES (?, ?, ?, ?)")
            .bind(order_no)
            .bind(sku)
            .bind(buyer)
            .bind(fence)
            .execute(&mut **tx)
            .await?;
        Ok(Some(order_no))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flash_sale_on_sqlite_neither_oversells_nor_duplicates() {
    let server = RedisServer::start();
    let dir = scratch_dir();
    let setup = open_pool(&dir).await;
    run_sql(
        &setup,
        &[
            "CREATE TABLE stock (sku TEXT PRIMARY KEY, units INTEGER NOT NULL, \
             sold INTEGER NOT NULL, fence INTEGER NOT NULL)",
            // No unique constraints: a race would show as duplicates here.
            "CREATE TABLE orders (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
             order_no INTEGER NOT NULL, sku TEXT NOT NULL, buyer INTEGER NOT NULL, \
             fencing_token INTEGER NOT NULL)",
            "INSERT INTO stock (sku, units, sold, fence) VALUES ('sku-1', 100, 0, 0)",
        ],
    )
    .await;
    let mut shops = Vec::new();
    for _ in 0..INSTANCES {
        shops.push(Arc::new(Shop {
            locks: connect(&server.url()).await,
            db: open_pool(&dir).await,
        }));
    }
    let started = Instant::now();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|buyer| {
            let shop = Arc::clone(&shops[buyer % INSTANCES]);
            tokio::spawn(async move { shop.buy("sku-1", buyer as i64).await })
        })
        .collect();
    let mut sold = 0;
    for buyer in buyers {
        match within(buyer).await.expect("buyer task") {
            Ok(Some(_)) => sold += 1,
            Ok(None) => {}
            Err(error) => panic!("a purchase failed: {error}"),
        }
    }
    let elapsed = started.elapsed();

    let (units, sold_column): (i64, i64) =
        sqlx::query_as("SELECT units, sold FROM stock WHERE sku = 'sku-1'")
            .fetch_one(&setup)
            .await
            .unwrap();
    let orders: Vec<(i64, i64, i64)> =
        sqlx::query_as("SELECT order_no, buyer, fencing_token FROM orders ORDER BY seq")
            .fetch_all(&setup)
            .await
            .unwrap();
    assert_eq!(sold, INITIAL_STOCK, "every unit sold, none oversold");
    assert_eq!(units, 0);
    assert_eq!(
        units + orders.len() as i64,
        INITIAL_STOCK,
        "stock + sold = initial"
    );
    assert_eq!(sold_column, INITIAL_STOCK);
    let order_nos: Vec<i64> = orders.iter().map(|order| order.0).collect();
    assert_eq!(
        order_nos,
        (1..=INITIAL_STOCK).collect::<Vec<_>>(),
        "order numbers are unique and in commit order"
    );
    let buyers: HashSet<i64> = orders.iter().map(|order| order.1).collect();
    assert_eq!(buyers.len(), orders.len(), "no buyer got two orders");
    assert!(
        orders.windows(2).all(|pair| pair[0].2 < pair[1].2),
        "fencing tokens strictly increase in commit order"
    );
    eprintln!("{BUYERS} buyers over {INSTANCES} managers: {elapsed:?}");
}
