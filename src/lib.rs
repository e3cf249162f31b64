//! # distributed-lock
//!
//! Redis distributed locks that are correct by construction. Annotate an async
//! function and its whole body runs under a lock that is taken atomically,
//! always has a TTL, is renewed while the body runs, is released on every exit
//! path, and can only be released by its own holder.
//!
//! ```no_run
//! use distributed_lock::{distributed_lock, LockError, LockManager};
//!
//! #[distributed_lock(key = "stock:{sku}", ttl = "30s", wait = "2s")]
//! async fn buy(sku: &str, qty: u32) -> Result<u32, LockError> {
//!     Ok(qty)
//! }
//!
//! # async fn run() -> Result<(), LockError> {
//! distributed_lock::install(LockManager::connect("redis://127.0.0.1:6379").await?);
//! buy("sku-42", 1).await?;
//! # Ok(())
//! # }
//! ```

pub use distributed_lock_macros::distributed_lock;
pub use distributed_lock_runtime::*;
