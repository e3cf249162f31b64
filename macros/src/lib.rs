//! The `#[distributed_lock]` attribute of the `distributed-lock` crate.
//!
//! This crate only reads and rewrites syntax; it knows nothing of Redis. Use
//! the attribute through `distributed_lock::distributed_lock`, which also
//! provides the runtime that the generated code calls.

#![warn(missing_docs)]

mod args;
mod duration;
mod errors;
mod expand;
mod key;
mod open_transaction;
mod return_edge;
mod signature;
mod template;
mod transactional;

use proc_macro::TokenStream;

/// Runs an `async fn` while holding a distributed lock.
///
/// ```ignore
/// use distributed_lock::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "order:{order.id}:{user_id}", ttl = "30s", wait = "2s")]
/// async fn pay(&self, order: &Order, user_id: u64) -> Result<Receipt, PayError> {
///     // runs only while this process holds `order:<id>:<user_id>`
/// }
/// ```
///
/// The function must be `async` and return `Result<T, E>` (or an alias such
/// as `io::Result<T>`) with `E: From<LockError>`: failing to acquire the lock,
/// or losing it, is reported through `E`. `return` and `?` in the body leave
/// only the body: the lock is released afterwards in every case.
///
/// Options, all `name = value`:
///
/// - `key = "..."` (required): text with `{param}`, `{param.field.subfield}`
///   or `{self.field}` placeholders, each formatted with `Display`; `{{` and
///   `}}` are literal braces. Built once, before acquiring.
/// - `ttl = "30s"`: the lease (default 30 s, must not be zero). Durations are
///   numbers with units `ms`, `s`, `m`, `h`, largest first: `"250ms"`,
///   `"5m"`, `"1m30s"`.
/// - `wait = "2s"`: how long to wait for a busy lock (default `"0s"`: one
///   attempt).
/// - `renew = true|false`: renew the lease while the body runs (default
///   `true`).
/// - `reentrant = true|false`: a task holding the key may enter again
///   (default `true`).
/// - `on_lost = "cancel"|"continue"`: when the lease is lost, stop the body at
///   its next `.await` and return `LockError::LeaseLost` (default), or let it
///   finish.
/// - `client = expr`: the manager to use, any `Borrow<LockManager>` such as
///   `self.locks`; by default the one installed with
///   `distributed_lock::install`.
/// - `allow_open_transaction = true|false`: accept parameters that look like
///   a transaction the caller opened (default `false`, see below).
/// - `min_replicas = 1`: after acquiring, wait for this many replicas to
///   acknowledge (Redis `WAIT`, same round trip); too few means the lock is
///   released again and the call fails with `LockError::NotReplicated`.
/// - `replica_timeout = "200ms"`: how long to wait for them (default 200 ms,
///   or half the ttl if shorter); needs `min_replicas`.
/// - `crate = path`: where `distributed_lock` is, if re-exported elsewhere.
///
/// A parameter whose type names `Transaction`, or is a `&mut` to a type whose
/// name ends with `Connection` (`&mut PgConnection`), is a compile error: the
/// caller would commit after this function returned and released the lock.
/// Open the transaction inside the lock with `#[transactional]` instead.
/// Stacked with `#[transactional]` in either order, the lock is taken before
/// the transaction begins and released after it commits.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}

/// Runs an `async fn`'s body with a database transaction (sqlx): commits when
/// the body returns `Ok`, rolls back when it returns `Err`, panics or is
/// cancelled.
///
/// ```ignore
/// use distributed_lock::{distributed_lock, transactional};
///
/// #[transactional(pool = self.db)]
/// #[distributed_lock(key = "stock:{sku}", client = self.locks)]
/// async fn buy(&self, sku: &str) -> Result<i64, ShopError> {
///     let stock: i64 = sqlx::query_scalar("SELECT units FROM stock WHERE sku = ?")
///         .bind(sku)
///         .fetch_one(&mut **tx)
///         .await?;
///     // ...
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
/// - `tx = name`: the name the body sees the transaction under (default `tx`).
/// - `begin = "..."`: the statement that opens the transaction instead of the
///   driver's default, e.g. `"BEGIN IMMEDIATE"` for SQLite transactions that
///   read then write.
/// - `min_replicas = 1`: after acquiring, wait for this many replicas to
///   acknowledge (Redis `WAIT`, same round trip); too few means the lock is
///   released again and the call fails with `LockError::NotReplicated`.
/// - `replica_timeout = "200ms"`: how long to wait for them (default 200 ms,
///   or half the ttl if shorter); needs `min_replicas`.
/// - `crate = path`: where `distributed_lock` is, if re-exported elsewhere.
#[proc_macro_attribute]
pub fn transactional(args: TokenStream, item: TokenStream) -> TokenStream {
    transactional::expand(args.into(), item.into()).into()
}
