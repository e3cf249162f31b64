//! `#[transactional]` on PostgreSQL, where the pitfall is silent: under READ
//! COMMITTED a holder that commits after releasing the lock lets the next one
//! read the old value and overwrite it, with no error. The lock around the
//! transaction prevents that, in both orders of the attributes; the
//! transaction rolls back on error, panic, cancellation and lost lease; and
//! a fencing token kept in a `BIGINT` column turns a stale holder's write
//! away.
//!
//! The server is a real PostgreSQL of the tests' own (testkit's
//! `PostgresServer`: `initdb` into a temporary directory, `pg_ctl` on a free
//! loopback port), shared by the tests of this module that run at the same
//! time, each in tables of its own. `scripts/ensure-postgres` installs
//! Debian's package when it is missing.
#![cfg(feature = "postgres")]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use leasehold::{
    distributed_lock, fencing_token, transactional, LockError, LockManager, LockOptions,
};
use leasehold_testkit::{PostgresServer, RedisServer};
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use support::{connect, race, within, AppError, Counter, Race, Stacking, ROUNDS, TASKS};
use tokio::sync::oneshot;

/// The server the tests running now share (see [`shared_postgres`]).
static SHARED: Mutex<Weak<PostgresServer>> = Mutex::new(Weak::new());
/// Tables handed out so far.
static TABLES: AtomicUsize = AtomicUsize::new(0);

/// The PostgreSQL server shared with every test of this module that holds
/// one now, started if none does; stopped when the last lets go.
fn shared_postgres() -> Arc<PostgresServer> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = shared.upgrade() {
        return server;
    }
    let server = Arc::new(PostgresServer::start());
    *shared = Arc::downgrade(&server);
    server
}

/// A table name no other test of this process uses.
fn table_name(what: &str) -> String {
    format!(
        "leasehold_{what}_{}",
        TABLES.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pool on `postgres`, after running `statements` on it.
async fn pool_with(postgres: &PostgresServer, statements: &[String]) -> PgPool {
    let db = PgPool::connect(&postgres.url())
        .await
        .expect("connect to PostgreSQL");
    for sql in statements {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(&db)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    db
}

/// A counter row in its own table, incremented under the lock `counter`.
#[derive(Clone)]
struct PgCounter {
    locks: LockManager,
    db: PgPool,
    table: String,
    /// Keeps the server up while the counter is used.
    _postgres: Arc<PostgresServer>,
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

/// A fresh counter table on the shared server, at 0.
async fn counter(server: &RedisServer) -> PgCounter {
    let postgres = shared_postgres();
    let table = table_name("counter");
    let db = pool_with(
        &postgres,
        &[
            format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY, value BIGINT NOT NULL)"),
            format!("INSERT INTO {table} (id, value) VALUES (1, 0)"),
        ],
    )
    .await;
    let locks = connect(&server.url()).await;
    PgCounter {
        locks,
        db,
        table,
        _postgres: postgres,
    }
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
    assert_eq!(race.errors, Vec::<String>::new(), "{stacking:?}");
    race
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_holder_reads_committed_value_in_both_orders() {
    let total = (TASKS * ROUNDS) as i64;
    for stacking in [Stacking::TransactionAbove, Stacking::TransactionBelow] {
        let race = race_on_postgres(stacking).await;
        assert_eq!(race.reads, (0..total).collect::<Vec<_>>(), "{stacking:?}");
        assert_eq!(race.last, total, "{stacking:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
async fn error_rolls_back() {
    let server = RedisServer::start();
    let counter = counter(&server).await;
    let result = counter.increment_then_refuse().await;
    assert!(matches!(result, Err(AppError::Refused)), "{result:?}");
    assert_eq!(counter.value().await, 0);
    counter.increment_transaction_below().await.unwrap();
    assert_eq!(counter.value().await, 1);
}

// ---------------------------------------------------------------------------
// Rollback on every path that does not return `Ok`.

/// How `Journal::write_then` ends after inserting its row.
enum Then {
    Commit,
    Fail,
    Panic,
    /// Tells the test it is inside, then never finishes.
    Hang(oneshot::Sender<()>),
}

/// Rows of a table of its own, written under the lock `journal`.
struct Journal {
    locks: LockManager,
    db: PgPool,
    table: String,
    _postgres: Arc<PostgresServer>,
}

impl Journal {
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "journal", wait = "5s", manager = self.locks)]
    async fn write_then(&self, id: i64, then: Then) -> Result<(), AppError> {
        insert_entry(tx, &self.table, id).await?;
        match then {
            Then::Commit => Ok(()),
            Then::Fail => Err(AppError::Refused),
            Then::Panic => panic!("body panicked after inserting {id}"),
            Then::Hang(inside) => {
                let _ = inside.send(());
                std::future::pending().await
            }
        }
    }

    /// Writes, then never finishes, on a 300 ms lease that is not renewed:
    /// only the lost lease ends the call.
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "journal", ttl = "300ms", renew = false, manager = self.locks)]
    async fn write_then_outlive_lease(&self, id: i64) -> Result<(), AppError> {
        insert_entry(tx, &self.table, id).await?;
        std::future::pending().await
    }

    /// The ids committed so far, in order.
    async fn ids(&self) -> Vec<i64> {
        let sql = format!("SELECT id FROM {} ORDER BY id", self.table);
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_all(&self.db)
            .await
            .expect("read entries")
    }
}

async fn insert_entry(conn: &mut PgConnection, table: &str, id: i64) -> Result<(), sqlx::Error> {
    let sql = format!("INSERT INTO {table} (id) VALUES ($1)");
    sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// A journal in a fresh table; keep the Redis server alive.
async fn journal() -> (Arc<Journal>, RedisServer) {
    let server = RedisServer::start();
    let postgres = shared_postgres();
    let table = table_name("journal");
    let db = pool_with(
        &postgres,
        &[format!("CREATE TABLE {table} (id BIGINT PRIMARY KEY)")],
    )
    .await;
    let locks = connect(&server.url()).await;
    let journal = Journal {
        locks,
        db,
        table,
        _postgres: postgres,
    };
    (Arc::new(journal), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_commits_and_err_rolls_back() {
    let (journal, _server) = journal().await;
    within(journal.write_then(1, Then::Commit)).await.unwrap();
    let failed = within(journal.write_then(2, Then::Fail)).await;
    assert!(matches!(failed, Err(AppError::Refused)), "{failed:?}");
    within(journal.write_then(3, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_rolls_back_and_releases() {
    let (journal, _server) = journal().await;
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
    let (journal, _server) = journal().await;
    let (inside, entered) = oneshot::channel();
    let call = tokio::spawn({
        let journal = Arc::clone(&journal);
        async move { journal.write_then(1, Then::Hang(inside)).await }
    });
    within(entered).await.unwrap();
    call.abort();
    assert!(within(call).await.unwrap_err().is_cancelled());
    assert_eq!(journal.ids().await, Vec::<i64>::new());
    // The lock was released and the row lock of the aborted transaction
    // let go: the next call commits without waiting for a lease to run out.
    within(journal.write_then(1, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![1]);
}

/// The body never finishes on its own: the lost lease ends it, with
/// `LeaseLost`, and its insert is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_cancels_the_body_and_rolls_back() {
    let (journal, _server) = journal().await;
    let result = within(journal.write_then_outlive_lease(1)).await;
    assert!(
        matches!(result, Err(AppError::Lock(LockError::LeaseLost { .. }))),
        "{result:?}"
    );
    assert_eq!(
        journal.ids().await,
        Vec::<i64>::new(),
        "nothing half-written"
    );
    // The rolled-back transaction holds no row lock: the same id commits.
    within(journal.write_then(1, Then::Commit)).await.unwrap();
    assert_eq!(journal.ids().await, vec![1]);
}

// ---------------------------------------------------------------------------
// Fencing tokens in a BIGINT column.

/// A document whose every write carries the writer's fencing token, kept in
/// `fence BIGINT`: a write with a token not above the stored one changes
/// nothing.
struct Document {
    locks: LockManager,
    db: PgPool,
    table: String,
    postgres: Arc<PostgresServer>,
}

impl Document {
    /// The same document, written through `locks` (another process).
    fn with_locks(&self, locks: LockManager) -> Document {
        Document {
            locks,
            db: self.db.clone(),
            table: self.table.clone(),
            postgres: Arc::clone(&self.postgres),
        }
    }

    /// Writes `body` under the lock `doc`, guarded by this holder's token.
    #[transactional(pool = self.db)]
    #[distributed_lock(key = "doc", wait = "30s", manager = self.locks)]
    async fn write(&self, body: &str) -> Result<u64, AppError> {
        let token = fencing_token().await?;
        fenced_write(tx, &self.table, token, body).await?;
        Ok(token)
    }

    /// The stored fence and body.
    async fn stored(&self) -> (i64, String) {
        let sql = format!("SELECT fence, body FROM {} WHERE id = 1", self.table);
        sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.db)
            .await
            .expect("read the document")
    }
}

/// `UPDATE … WHERE fence < token`: `StaleFence` when the stored fence is
/// not below `token` (a later holder wrote).
async fn fenced_write(
    conn: &mut PgConnection,
    table: &str,
    token: u64,
    body: &str,
) -> Result<(), AppError> {
    let fence = i64::try_from(token).expect("fencing tokens fit in a BIGINT");
    let sql = format!("UPDATE {table} SET fence = $1, body = $2 WHERE id = 1 AND fence < $1");
    let updated = sqlx::query(AssertSqlSafe(sql))
        .bind(fence)
        .bind(body)
        .execute(conn)
        .await?;
    if updated.rows_affected() == 1 {
        Ok(())
    } else {
        Err(AppError::StaleFence(token))
    }
}

/// A document in a fresh table (`fence BIGINT`, at 0) on the shared server.
async fn document(server: &RedisServer) -> Document {
    let postgres = shared_postgres();
    let table = table_name("document");
    let db = pool_with(
        &postgres,
        &[
            format!(
                "CREATE TABLE {table} (id INTEGER PRIMARY KEY, fence BIGINT NOT NULL, \
                 body TEXT NOT NULL)"
            ),
            format!("INSERT INTO {table} (id, fence, body) VALUES (1, 0, '')"),
        ],
    )
    .await;
    let locks = connect(&server.url()).await;
    Document {
        locks,
        db,
        table,
        postgres,
    }
}

/// Tokens go into the `BIGINT` column unchanged and rise with every
/// holder; a holder whose lease ran out, still writing with its old token
/// after the next holder wrote, changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_token_in_a_bigint_column_turns_a_stale_holders_write_away() {
    let server = RedisServer::start();
    let doc = document(&server).await;
    let column: String = sqlx::query_scalar(
        "SELECT data_type FROM information_schema.columns \
         WHERE table_name = $1 AND column_name = 'fence'",
    )
    .bind(&doc.table)
    .fetch_one(&doc.db)
    .await
    .unwrap();
    assert_eq!(column, "bigint");

    let first = within(doc.write("first")).await.unwrap();
    assert_eq!(doc.stored().await, (first as i64, "first".to_owned()));

    // A holder that pauses past its lease: it still has its token.
    let stale = doc
        .locks
        .acquire(
            "doc",
            LockOptions::new()
                .ttl(Duration::from_millis(300))
                .renew(false),
        )
        .await
        .unwrap();
    let stale_token = stale.fencing_token().await.unwrap();
    assert!(stale_token > first, "{stale_token} after {first}");
    let newer = doc.with_locks(connect(&server.url()).await);
    let second = within(newer.write("second")).await.unwrap();
    assert!(second > stale_token, "{second} after {stale_token}");

    let mut tx = doc.db.begin().await.unwrap();
    let late = fenced_write(&mut tx, &doc.table, stale_token, "stale").await;
    tx.commit().await.unwrap();
    assert!(
        matches!(late, Err(AppError::StaleFence(token)) if token == stale_token),
        "{late:?}"
    );
    assert_eq!(doc.stored().await, (second as i64, "second".to_owned()));
    drop(stale);
}
