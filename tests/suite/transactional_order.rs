//! The order of lock and transaction, without Redis or a database: whichever
//! way `#[distributed_lock]` and `#[transactional]` are stacked, the lock is
//! taken before the transaction begins and released after it commits or rolls
//! back. Every function uses `crate = shim`, a stand-in for `leasehold`
//! whose `locked`, `begin_transaction` and `finish_transaction` log events.
//! `expansion_contract!` checks at compile time that the shim and the real
//! crate provide these with the same signatures.
#![cfg(feature = "sqlite")]

use leasehold::{distributed_lock, transactional};
use shim::{take_events, DbError, LockError, Pool};

/// Compiles only while `$krate` provides the items both expansions name here,
/// as they use them, with `$pool`, `$transaction` and `$error` standing for
/// the database's types: applied to the real crate (with SQLite) and to the
/// shim, it keeps the shim's signatures those of the runtime.
macro_rules! expansion_contract {
    ($krate:ident, pool: $pool:ty, transaction: $transaction:ty, error: $error:ty) => {
        #[allow(dead_code)]
        const _: () = {
            use std::future::Future;

            use $krate::{LockError, LockManager, LockOptions};

            let _: fn() -> LockOptions = LockOptions::new;

            fn locked<F, T, E>(
                manager: Option<LockManager>,
                key: String,
                options: LockOptions,
                body: F,
            ) -> impl Future<Output = Result<T, E>>
            where
                F: Future<Output = Result<T, E>>,
                E: From<LockError>,
            {
                $krate::__private::locked::<$krate::__private::Wait, _, _, _>(
                    manager,
                    $krate::__private::Target::Lock(key),
                    options,
                    body,
                )
            }

            fn begin_transaction<'p>(
                pool: &'p $pool,
                statement: Option<&'static str>,
            ) -> impl Future<Output = Result<$transaction, $error>> + 'p {
                $krate::__private::begin_transaction(pool, statement)
            }

            fn finish_transaction<T, E: From<$error>>(
                outcome: Result<($transaction, Result<T, E>), $error>,
            ) -> impl Future<Output = Result<T, E>> {
                $krate::__private::finish_transaction(outcome)
            }
        };
    };
}

expansion_contract!(
    leasehold,
    pool: sqlx::SqlitePool,
    transaction: sqlx::Transaction<'static, sqlx::Sqlite>,
    error: sqlx::Error
);
expansion_contract!(shim, pool: Pool, transaction: shim::Transaction, error: DbError);

/// Stands in for the `leasehold` crate, with the items both
/// expansions name.
mod shim {
    use std::cell::RefCell;
    use std::future::Future;

    /// `#[distributed_lock]` above `#[transactional]` re-emits itself as
    /// `#[shim::distributed_lock(..)]`.
    pub use leasehold::distributed_lock;

    /// Accepted and ignored.
    #[derive(Clone)]
    pub struct LockManager;

    /// No option is written here, so the expansion calls no setter but
    /// the label (the function's path) and the key template, both ignored.
    pub struct LockOptions;

    impl LockOptions {
        pub fn new() -> Self {
            LockOptions
        }
        pub fn label(self, _label: impl Into<String>) -> Self {
            self
        }
        pub fn key_template(self, _template: &str) -> Self {
            self
        }
    }

    /// What the shim's `locked` returns when the lock is busy.
    #[derive(Debug, PartialEq)]
    pub struct LockError;

    /// What the shim's database returns when told to fail.
    #[derive(Debug, PartialEq)]
    pub struct DbError(pub &'static str);

    /// A database that fails `begin` or `commit` when told to.
    #[derive(Default)]
    pub struct Pool {
        pub fail_begin: bool,
        pub fail_commit: bool,
        pub busy_lock: bool,
    }

    /// An open transaction of the shim's database.
    pub struct Transaction {
        fail_commit: bool,
    }

    impl Transaction {
        /// Logs a statement run inside the transaction.
        pub fn execute(&mut self, statement: &str) {
            event(statement);
        }
    }

    thread_local! {
        static EVENTS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
        static BUSY: RefCell<bool> = const { RefCell::new(false) };
    }

    pub fn event(what: impl Into<String>) {
        EVENTS.with(|events| events.borrow_mut().push(what.into()));
    }

    /// The events so far on this thread, emptied.
    pub fn take_events() -> Vec<String> {
        EVENTS.with(|events| events.take())
    }

    /// Makes the next acquisitions on this thread fail as if the lock were held.
    pub fn set_busy(busy: bool) {
        BUSY.with(|flag| *flag.borrow_mut() = busy);
    }

    pub mod __private {
        use super::*;

        crate::support::shim_private_items!();

        pub async fn locked<B, F, T, E>(
            _manager: Option<LockManager>,
            target: Target,
            _options: LockOptions,
            body: F,
        ) -> Result<T, E>
        where
            B: OnBusy<T>,
            F: Future<Output = Result<T, E>>,
            E: From<LockError>,
        {
            let Target::Lock(key) = target;
            if BUSY.with(|busy| *busy.borrow()) {
                event(format!("busy {key}"));
                return Err(LockError.into());
            }
            event(format!("acquire {key}"));
            let result = body.await;
            event(format!("release {key}"));
            result
        }

        pub async fn begin_transaction(
            pool: &Pool,
            statement: Option<&'static str>,
        ) -> Result<Transaction, DbError> {
            event(statement.unwrap_or("BEGIN"));
            if pool.fail_begin {
                return Err(DbError("begin failed"));
            }
            Ok(Transaction {
                fail_commit: pool.fail_commit,
            })
        }

        pub async fn finish_transaction<T, E: From<DbError>>(
            outcome: Result<(Transaction, Result<T, E>), DbError>,
        ) -> Result<T, E> {
            match outcome? {
                (transaction, Ok(_)) if transaction.fail_commit => {
                    event("COMMIT failed");
                    Err(DbError("commit failed").into())
                }
                (_, Ok(value)) => {
                    event("COMMIT");
                    Ok(value)
                }
                (_, Err(error)) => {
                    event("ROLLBACK");
                    Err(error)
                }
            }
        }
    }
}

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(LockError),
    Db(DbError),
    Refused,
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

impl From<DbError> for AppError {
    fn from(error: DbError) -> Self {
        AppError::Db(error)
    }
}

/// A service with the same body under both orders of the attributes.
struct Shop {
    db: Pool,
}

impl Shop {
    #[transactional(crate = shim, pool = self.db)]
    #[distributed_lock(crate = shim, key = "stock:{sku}")]
    async fn transaction_written_above(&self, sku: &str, refuse: bool) -> Result<u32, AppError> {
        tx.execute("UPDATE stock");
        if refuse {
            return Err(AppError::Refused);
        }
        Ok(1)
    }

    #[distributed_lock(crate = shim, key = "stock:{sku}")]
    #[transactional(crate = shim, pool = self.db)]
    async fn transaction_written_below(&self, sku: &str, refuse: bool) -> Result<u32, AppError> {
        tx.execute("UPDATE stock");
        if refuse {
            return Err(AppError::Refused);
        }
        Ok(1)
    }

    /// Other attributes between the two stay on the function.
    #[distributed_lock(crate = shim, key = "stock:{sku}")]
    #[allow(clippy::needless_return)]
    #[transactional(crate = shim, pool = self.db, tx = conn, begin = "BEGIN IMMEDIATE")]
    async fn with_options(&self, sku: &str) -> Result<u32, AppError> {
        conn.execute("UPDATE stock");
        let parsed: Result<u32, DbError> = Err(DbError("bad row"));
        let units = parsed?;
        return Ok(units);
    }
}

/// Runs both orders with the same settings and returns their events.
fn both_orders(db: Pool, refuse: bool) -> [(Result<u32, AppError>, Vec<String>); 2] {
    let shop = Shop { db };
    shim::set_busy(shop.db.busy_lock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let above = runtime.block_on(shop.transaction_written_above("sku-1", refuse));
    let above = (above, take_events());
    let below = runtime.block_on(shop.transaction_written_below("sku-1", refuse));
    let below = (below, take_events());
    shim::set_busy(false);
    [above, below]
}

fn events(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|event| event.to_string()).collect()
}

#[test]
fn lock_is_taken_before_begin_and_released_after_commit_in_both_orders() {
    for (result, log) in both_orders(Pool::default(), false) {
        assert_eq!(result, Ok(1));
        assert_eq!(
            log,
            events(&[
                "acquire stock:sku-1",
                "BEGIN",
                "UPDATE stock",
                "COMMIT",
                "release stock:sku-1"
            ])
        );
    }
}

#[test]
fn error_rolls_back_before_release_in_both_orders() {
    for (result, log) in both_orders(Pool::default(), true) {
        assert_eq!(result, Err(AppError::Refused));
        assert_eq!(
            log,
            events(&[
                "acquire stock:sku-1",
                "BEGIN",
                "UPDATE stock",
                "ROLLBACK",
                "release stock:sku-1"
            ])
        );
    }
}

#[test]
fn busy_lock_begins_no_transaction_in_both_orders() {
    let db = Pool {
        busy_lock: true,
        ..Pool::default()
    };
    for (result, log) in both_orders(db, false) {
        assert_eq!(result, Err(AppError::Lock(LockError)));
        assert_eq!(log, events(&["busy stock:sku-1"]));
    }
}

#[test]
fn failed_begin_skips_the_body_and_releases_in_both_orders() {
    let db = Pool {
        fail_begin: true,
        ..Pool::default()
    };
    for (result, log) in both_orders(db, false) {
        assert_eq!(result, Err(AppError::Db(DbError("begin failed"))));
        assert_eq!(
            log,
            events(&["acquire stock:sku-1", "BEGIN", "release stock:sku-1"])
        );
    }
}

#[test]
fn failed_commit_is_the_result_in_both_orders() {
    let db = Pool {
        fail_commit: true,
        ..Pool::default()
    };
    for (result, log) in both_orders(db, false) {
        assert_eq!(result, Err(AppError::Db(DbError("commit failed"))));
        assert_eq!(
            log,
            events(&[
                "acquire stock:sku-1",
                "BEGIN",
                "UPDATE stock",
                "COMMIT failed",
                "release stock:sku-1"
            ])
        );
    }
}

#[test]
fn options_rename_the_transaction_and_question_mark_rolls_back() {
    let shop = Shop {
        db: Pool::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runtime.block_on(shop.with_options("sku-2"));
    assert_eq!(result, Err(AppError::Db(DbError("bad row"))));
    assert_eq!(
        take_events(),
        events(&[
            "acquire stock:sku-2",
            "BEGIN IMMEDIATE",
            "UPDATE stock",
            "ROLLBACK",
            "release stock:sku-2"
        ])
    );
}
