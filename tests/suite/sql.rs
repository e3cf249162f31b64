//! For the `#[transactional]` tests on SQLite and PostgreSQL (re-exported
//! as `support::*`, beside the test-support crate): their error
//! type, and the race of locked read-then-write increments that shows whether
//! the next lock holder reads the previous holder's committed value.

use std::future::Future;

use leasehold::LockError;

use crate::support::within;

/// Tasks of one [`race`], each with its own lock manager.
pub const TASKS: usize = 4;
/// Increments of each task in one [`race`].
pub const ROUNDS: usize = 25;

/// The error of every annotated function of these tests.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The lock was not taken or was lost.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// The body decided to fail.
    #[error("refused by the body")]
    Refused,
    /// A write carried a fencing token older than the stored one.
    #[error("fencing token {0} is older than the one stored")]
    StaleFence(u64),
}

/// How an increment combines the lock and the transaction.
#[derive(Clone, Copy, Debug)]
pub enum Stacking {
    /// `#[transactional]` written above `#[distributed_lock]`.
    TransactionAbove,
    /// `#[distributed_lock]` written above `#[transactional]`: the macro
    /// reorders them.
    TransactionBelow,
    /// The pitfall, by hand: begin, lock, write, release, then commit.
    CommitAfterRelease,
}

/// A counter row in a database, incremented under the lock `counter` in the
/// three ways of [`Stacking`]. Each increment reads the counter and writes it
/// back plus one, and returns the value it read.
pub trait Counter: Clone + Send + Sync + 'static {
    /// [`Stacking::TransactionAbove`].
    fn increment_transaction_above(&self) -> impl Future<Output = Result<i64, AppError>> + Send;

    /// [`Stacking::TransactionBelow`].
    fn increment_transaction_below(&self) -> impl Future<Output = Result<i64, AppError>> + Send;

    /// [`Stacking::CommitAfterRelease`].
    fn increment_committing_after_release(
        &self,
    ) -> impl Future<Output = Result<i64, AppError>> + Send;

    /// The counter's committed value.
    fn value(&self) -> impl Future<Output = i64> + Send;
}

/// One increment of `counter`, combining lock and transaction as `stacking` says.
async fn increment<C: Counter>(counter: &C, stacking: Stacking) -> Result<i64, AppError> {
    match stacking {
        Stacking::TransactionAbove => counter.increment_transaction_above().await,
        Stacking::TransactionBelow => counter.increment_transaction_below().await,
        Stacking::CommitAfterRelease => counter.increment_committing_after_release().await,
    }
}

/// What the tasks of one [`race`] observed.
pub struct Race {
    /// The value each successful increment read, sorted.
    pub reads: Vec<i64>,
    /// Increments that failed, as text.
    pub errors: Vec<String>,
    /// The counter at the end.
    pub last: i64,
}

/// Runs [`ROUNDS`] increments as `stacking` says in one task per counter of
/// `counters` (one counter, with its own lock manager, per task), each task
/// bounded by [`within`]. `counters` must not be empty.
pub async fn race<C: Counter>(counters: Vec<C>, stacking: Stacking) -> Race {
    let first = counters.first().expect("a race needs a counter").clone();
    let tasks: Vec<_> = counters
        .into_iter()
        .map(|counter| {
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for _ in 0..ROUNDS {
                    outcomes.push(increment(&counter, stacking).await);
                }
                outcomes
            })
        })
        .collect();
    let (mut reads, mut errors) = (Vec::new(), Vec::new());
    for task in tasks {
        for outcome in within(task).await.expect("increment task") {
            match outcome {
                Ok(read) => reads.push(read),
                Err(error) => errors.push(error.to_string()),
            }
        }
    }
    reads.sort_unstable();
    Race {
        reads,
        errors,
        last: first.value().await,
    }
}
