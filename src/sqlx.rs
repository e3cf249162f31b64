//! The sqlx side of `#[transactional]`: beginning the transaction, and
//! committing or rolling it back according to the body's result.
//!
//! Generic over `sqlx::Database`: SQLite is built in with the `sqlx` feature,
//! PostgreSQL with the `postgres` feature.

use ::sqlx::{Database, Pool, Transaction};

/// Begins a transaction on a connection from `pool`, with `statement` (such
/// as `"BEGIN IMMEDIATE"`) or else the driver's default `BEGIN`. Called by the
/// `#[transactional]` expansion; not a stable API.
#[doc(hidden)]
pub async fn begin_transaction<DB: Database>(
    pool: &Pool<DB>,
    statement: Option<&'static str>,
) -> Result<Transaction<'static, DB>, ::sqlx::Error> {
    match statement {
        Some(statement) => pool.begin_with(statement).await,
        None => pool.begin().await,
    }
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
