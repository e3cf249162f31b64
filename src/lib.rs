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

pub use leasehold_macros::distributed_lock;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
pub use leasehold_macros::transactional;
pub use leasehold_runtime::*;

/// A tower layer (axum, tonic, ...) that runs each request under a lock on a
/// key taken from the request; see [`guide::web`].
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use leasehold_tower as tower;

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
}
