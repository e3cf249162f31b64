//! The sqlx side of `#[transactional]`: beginning the transaction, and
//! committing or rolling it back according to the body's result.
//!
//! Generic over `sqlx::Database`: SQLite's driver comes with the `sqlite`
//! feature, PostgreSQL's with `postgres` (`sqlx` enables both).

use ::sqlx::{Database, Pool, Transaction};

/// The statement that opens a transaction on SQLite unless `begin = "..."`
/// says otherwise: it takes the database's write lock at once, so that
/// concurrent transactions queue on it (within the busy timeout) instead of
/// failing with `database is locked` (code 517) when a read transaction
/// later tries to write after another one committed.
const SQLITE_DEFAULT_BEGIN: &str = "BEGIN IMMEDIATE";

/// Begins a transaction on a connection from `pool`, with `statement` if
/// given, else `BEGIN IMMEDIATE` on SQLite and the driver's `BEGIN` on other
/// databases. Called by the `#[transactional]` expansion; not a stable API.
#[doc(hidden)]
pub async fn begin_transaction<DB: Database>(
    pool: &Pool<DB>,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, DB>, ::sqlx::Error> {
    match statement.or_else(default_begin::<DB>) {
        Some(statement) => pool.begin_with(statement).await,
        None => pool.begin().await,
    }
}

/// The statement `#[transactional]` opens a transaction with on `DB` when
/// the attribute names none; `None` for the driver's own `BEGIN`.
fn default_begin<DB: Database>() -> Option<&'static str> {
    // By name, so that this compiles without the SQLite driver.
    (DB::NAME == "SQLite").then_some(SQLITE_DEFAULT_BEGIN)
}

/// Decides the transaction's fate from the body's `result`: commits when it
/// is `Ok` and returns its value, or the commit's error converted into `E`;
/// rolls back when it is `Err` and returns that error. A failed rollback is
/// not reported: the body's error is the one that matters, and the dropped
/// transaction makes sqlx roll back again or close the connection. `Err` in
/// `outcome` means the transaction could not begin (and the body did not run).
/// Called by the `#[transactional]` expansion; not a stable API.
#[doc(hidden)]
pub async fn finish_transaction<DB, T, E>(
    outcome: Result<(Transaction<'static, DB>, Result<T, E>), ::sqlx::Error>,
) -> Result<T, E>
where
    DB: Database,
    E: From<::sqlx::Error>,
{
    match outcome? {
        (transaction, Ok(value)) => {
            transaction.commit().await?;
            Ok(value)
        }
        (transaction, Err(error)) => {
            let _ = transaction.rollback().await;
            Err(error)
        }
    }
}
