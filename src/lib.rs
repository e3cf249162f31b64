//! # leasehold
//!
//! Redis locks for distributed services, correct by construction. Annotate an async
//! function and its whole body runs under a lock that is taken atomically,
//! always has a TTL, is renewed while the body runs, is released on every exit
//! path, and can only be released by its own holder.
//!
//! ```no_run
//! use leasehold::{distributed_lock, LockError, LockManager};
//!
//! #[distributed_lock(key = "stock:{sku}", ttl = "30s", wait = "2s")]
//! async fn buy(sku: &str, qty: u32) -> Result<u32, LockError> {
//!     Ok(qty)
//! }
//!
//! # async fn run() -> Result<(), LockError> {
//! leasehold::install(LockManager::connect("redis://127.0.0.1:6379").await?);
//! buy("sku-42", 1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Transactions inside the lock
//!
//! With the `sqlite` or `postgres` feature (`sqlx` enables both),
//! `#[transactional(pool = ...)]` runs the body with a database transaction
//! that commits on `Ok` and rolls back on `Err`, panic or cancellation. Stacked
//! with `#[distributed_lock]` in either order, the lock is taken before the
//! transaction begins and released only after it commits, so the next holder
//! always reads the committed data.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Runs an `async fn` while holding a lock in Redis.
///
/// ```no_run
/// use leasehold::{distributed_lock, LockError, LockManager};
///
/// struct Order {
///     id: u64,
/// }
///
/// struct Payments {
///     locks: LockManager,
/// }
///
/// impl Payments {
///     #[distributed_lock(key = "order:{order.id}:{user_id}", ttl = "30s", wait = "2s", manager = self.locks)]
///     async fn pay(&self, order: &Order, user_id: u64) -> Result<u64, LockError> {
///         // Runs only while this process holds `order:<id>:<user_id>`.
///         Ok(order.id + user_id)
///     }
/// }
/// ```
///
/// The function must be `async` and return `Result<T, E>` (or an alias such
/// as `io::Result<T>`) with `E: From<LockError>`: failing to acquire the lock,
/// or losing it, is reported through `E`. `return` and `?` in the body leave
/// only the body: the lock is released afterwards in every case.
///
/// Options, all `name = value`. An option that is not written keeps the
/// default of `leasehold::LockOptions::new()`, shown in brackets.
///
/// Durations (`ttl`, `wait`, `hold_at_least`, `replica_timeout`) and counts
/// (`permits`, `min_replicas`) take a literal, checked at compile time, or
/// any expression of type `std::time::Duration` or `u32`: a `const`, a field
/// of your configuration (`ttl = self.config.lock_ttl`), a function call.
/// Each call evaluates such an expression once, before the lock is taken,
/// and checks its value as a literal is checked: a value a literal could not
/// have (a zero ttl, hold, permit or replica count, a ttl or hold past 365
/// days) fails that call with `LockError::InvalidOptions`, and the body does
/// not run.
///
/// - `key = "..."` (required): text with `{param}`, `{param.field.subfield}`
///   or `{self.field}` placeholders, each formatted with `Display`; `{{` and
///   `}}` are literal braces. Built once, before acquiring.
/// - `keys = ["account:{from.id}", "account:{to.id}"]` (instead of `key`):
///   lock every key listed, all or nothing, in one canonical order (sorted,
///   duplicates taken once), so calls naming the same keys in any order
///   never deadlock; the body is cancelled when any lease is lost. Each key
///   is a template as for `key`.
/// - `permits = 8` (with `key`): run the body under one of this many permits
///   of the key's counting semaphore instead of its lock, so that at most 8
///   calls, in every process, run at once (see `leasehold::Semaphore`:
///   each permit has its own lease, renewed like a lock's; a smaller number
///   than the current holders makes new calls wait, it revokes nobody). A
///   whole number, at least 1. Not re-entrant: a nested call of the same
///   semaphore fails at once with `LockError::AlreadyHeld`. `keys`,
///   `on_busy`, `hold_at_least`, `fenced`, `reentrant` and `min_replicas` do
///   not go with it.
/// - `mode = "read"` or `mode = "write"` (with `key`): run the body under a
///   read lease or the write lease of the key's read/write lock instead of
///   its lock: many readers at once or one writer, and a waiting writer
///   holds new readers back (see `LockManager::acquire_read`). A read inside
///   a write of the same key re-enters; a write inside a read fails at once
///   with `LockError::UpgradeRefused`. `fenced = true` goes with `"write"`
///   only; `permits`, `keys`, `on_busy`, `hold_at_least` and `min_replicas`
///   do not go with it.
/// - `ttl = "30s"`: the lease (30 s); must not be zero. Durations are numbers
///   with units `ms`, `s`, `m`, `h`, largest first: `"250ms"`, `"5m"`,
///   `"1m30s"`.
/// - `wait = "2s"`: how long to wait for a busy lock before
///   `LockError::Timeout` (none: one attempt, `LockError::Busy` when held
///   elsewhere).
/// - `renew = true|false`: renew the lease while the body runs (`true`).
/// - `reentrant = true|false`: a task holding the key may enter again
///   (`true`).
/// - `on_lost = "cancel"|"continue"`: when the lease is lost, stop the body at
///   its next `.await` and return `LockError::LeaseLost` (`"cancel"`), or let
///   it finish.
/// - `fenced = true|false`: issue the fencing token together with the lock,
///   in the same round trip when uncontended, so `fencing_token().await` in
///   the body answers at once (`false`: issued on the first request).
/// - `on_busy = "skip"|"wait"`: when the lock is held elsewhere, return at
///   once without running the body (`"skip"`: `Ok(())` for `Result<(), E>`,
///   `Ok(None)` for `Result<Option<T>, E>`, logged at info; any other return
///   type is a compile error; `wait` is then not allowed), or wait up to
///   `wait` and fail with `LockError::Timeout`, or at once with
///   `LockError::Busy` when `wait` is zero (`"wait"`).
/// - `hold_at_least = "5m"`: keep the lock until at least this long after it
///   was acquired, even when the body ends sooner, so that instances whose
///   schedules fire within that time skip the job (above zero, at most 365
///   days; off).
/// - `period = "1h"`: run at most once per period across every instance,
///   whatever their phases: the period's start goes into the key
///   (`key@START`, Unix seconds), held until a period after the period's
///   end (see `LockManager::try_once_per_period`). Whole seconds, 1 s to
///   half a year; needs `on_busy = "skip"` and one `key` (off).
/// - `manager = expr`: the `LockManager` to use, any `Borrow<LockManager>`
///   such as `self.locks`, `&LockManager` or `Arc<LockManager>` (the one
///   installed with `leasehold::install`). Its former name `client` is
///   refused with the name to write.
/// - `min_replicas = 1`: after acquiring, wait for this many replicas to
///   acknowledge (Redis `WAIT`, same round trip); too few means the lock is
///   released again and the call fails with `LockError::NotReplicated` (off).
/// - `replica_timeout = "200ms"`: how long to wait for them (200 ms, or half
///   the ttl if shorter); at least 1 ms and shorter than the ttl; needs
///   `min_replicas`.
/// - `allow_open_transaction = true|false`: accept parameters that look like
///   a transaction the caller opened (`false`, see below).
/// - `crate = path`: where `leasehold` is, if re-exported elsewhere.
///
/// A parameter whose type names `Transaction` with arguments
/// (`Transaction<'_, Postgres>`), or is a `&mut` to a type whose name ends
/// with `Connection` (`&mut PgConnection`) other than a Redis connection, looks
/// like a transaction the caller opened and is a compile error: the caller
/// would commit after this function returned and released the lock.
/// Open the transaction inside the lock with `#[transactional]` instead.
/// That check reads the signature's spelling; with `leasehold`'s `sqlite` or
/// `postgres` feature the expansion also asks the compiler to prove of each
/// parameter bound to a name that its type is not sqlx's `Transaction`
/// (owned or `&mut`) or a `&mut` to an sqlx `Connection`, so a type alias of
/// one fails to compile too, at the parameter. A generic parameter cannot be
/// proven either way and passes.
/// Stacked with `#[transactional]` in either order, the lock is taken before
/// the transaction begins and released after it commits.
///
/// Every mistake in the attribute is a compile error at its span, all
/// reported by one compile; the function is then left as written.
pub use leasehold_macros::distributed_lock;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Runs an `async fn`'s body with a database transaction (sqlx): commits when
/// the body returns `Ok`, rolls back when it returns `Err`, panics or is
/// cancelled. Needs the `sqlite` or `postgres` feature of `leasehold`.
///
/// ```no_run
/// use leasehold::{distributed_lock, transactional, LockError, LockManager};
/// use sqlx::SqlitePool;
///
/// #[derive(Debug)]
/// enum ShopError {
///     Lock(LockError),
///     Db(sqlx::Error),
/// }
///
/// impl From<LockError> for ShopError {
///     fn from(error: LockError) -> Self {
///         ShopError::Lock(error)
///     }
/// }
///
/// impl From<sqlx::Error> for ShopError {
///     fn from(error: sqlx::Error) -> Self {
///         ShopError::Db(error)
///     }
/// }
///
/// struct Shop {
///     db: SqlitePool,
///     locks: LockManager,
/// }
///
/// impl Shop {
///     #[transactional(pool = self.db)]
///     #[distributed_lock(key = "stock:{sku}", manager = self.locks)]
///     async fn buy(&self, sku: &str) -> Result<i64, ShopError> {
///         let units: i64 = sqlx::query_scalar("SELECT units FROM stock WHERE sku = ?")
///             .bind(sku)
///             .fetch_one(&mut **tx)
///             .await?;
///         sqlx::query("UPDATE stock SET units = units - 1 WHERE sku = ?")
///             .bind(sku)
///             .execute(&mut **tx)
///             .await?;
///         Ok(units - 1)
///     }
/// }
/// ```
///
/// The body sees the transaction as `tx: &mut sqlx::Transaction<'static, DB>`
/// and runs its queries on `&mut **tx`; it cannot commit or roll back itself.
/// The function must be `async` and return `Result<T, E>` with
/// `E: From<sqlx::Error>`; failing to begin or to commit is reported through
/// `E`. `return` and `?` leave only the body, so commit or rollback always
/// follows.
///
/// With `#[distributed_lock]` on the same function, in either order, the lock
/// is taken before the transaction begins and released after it commits.
///
/// Options, all `name = value`:
///
/// - `pool = expr` (required): any `Borrow<sqlx::Pool<DB>>`, such as
///   `self.db` or a `&PgPool` parameter.
/// - `tx = name`: the name the body sees the transaction under (`tx`).
/// - `begin = "..."`: the statement that opens the transaction. Without it,
///   SQLite opens with `BEGIN IMMEDIATE` (concurrent transactions queue on the
///   write lock instead of failing with `database is locked`), other
///   databases with their driver's `BEGIN`; `begin = "BEGIN"` gives SQLite's
///   deferred transaction.
/// - `crate = path`: where `leasehold` is, if re-exported elsewhere.
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
pub use leasehold_macros::transactional;
pub use leasehold_runtime::*;

/// A tower layer (axum, tonic, ...) that runs each request under a lock on a
/// key taken from the request; see [`guide::web`].
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use leasehold_tower as tower;

mod open_transaction;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sqlx;

pub mod guide;

/// The README's snippets, compiled as doctests like the guide's.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

/// What the attributes' expansions call. Not a stable API.
#[doc(hidden)]
pub mod __private {
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub use crate::sqlx::{begin_transaction, finish_transaction};
    pub use leasehold_runtime::__private::*;
    /// See `open_transaction.rs`.
    pub mod open_transaction {
        pub use crate::open_transaction::*;
    }
}
