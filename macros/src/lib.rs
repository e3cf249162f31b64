//! The `#[distributed_lock]` attribute of the `distributed-lock` crate.
//!
//! This crate only reads and rewrites syntax; it knows nothing of Redis. Use
//! the attribute through `distributed_lock::distributed_lock`, which also
//! provides the runtime that the generated code calls.

mod args;
mod duration;
mod errors;
mod expand;
mod key;
mod signature;
mod template;

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
/// - `crate = path`: where `distributed_lock` is, if re-exported elsewhere.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}
