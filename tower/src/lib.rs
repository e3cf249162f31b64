//! A tower layer that runs each request under a leasehold lock on a key taken
//! from the request: one checkout per order at a time, one payment per
//! `Idempotency-Key`, at most N imports per tenant. For axum, tonic and
//! any other server built on tower. Use it through the `leasehold` crate's
//! `tower` feature, as `leasehold::tower`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use axum::{routing::post, Router};
//! use leasehold_runtime::{LockManager, LockOptions};
//! use leasehold_tower::LockLayer;
//!
//! let locks = LockManager::connect("redis://127.0.0.1:6379").await?;
//! let one_booking_per_seat = LockLayer::builder(locks)
//!     .key("seat:{path.show}:{path.seat}")
//!     .route("/shows/{show}/seats/{seat}")
//!     .options(LockOptions::new().ttl(Duration::from_secs(10)).wait(Duration::from_secs(2)))
//!     .build()?;
//! let app: Router = Router::new().route(
//!     "/shows/{show}/seats/{seat}",
//!     post(|| async { "booked" }).route_layer(one_booking_per_seat),
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Answers
//!
//! | status | gRPC | when |
//! | --- | --- | --- |
//! | the handler's | the handler's | the lock was held while the handler ran |
//! | `400 Bad Request` | `INVALID_ARGUMENT` | the request lacks a part of the key (a header, a path parameter); the message names it; no lock taken |
//! | `409 Conflict`, or `429` with `Retry-After` ([`OnBusy`], [`RetryAfter`]) | `ABORTED` | another request held the lock for all of `wait` |
//! | `503 Service Unavailable` | `UNAVAILABLE` | the lock server could not be reached or failed; or the lease was lost while the handler ran, which was then cancelled |
//! | `500 Internal Server Error` | `INTERNAL` | the layer's options or manager cannot lock at all (the log says why) |
//!
//! # Guarantees
//!
//! - **Never unlocked.** The inner service is called only once the lock is
//!   held, and its future is dropped as soon as the lease is lost (at the
//!   latest when the lease's certain validity ends), so a handler never
//!   runs on without the lock; the request is answered `503`.
//! - **Never an empty key.** A key whose template part is absent or empty is
//!   answered `400`, not locked as a shorter key. Templates are checked when
//!   the layer is built: a bad placeholder fails [`LockLayerBuilder::build`].
//! - **Released at once.** The lock is released when the response is ready
//!   ([`Hold::UntilResponse`], the default) or when its body has ended
//!   ([`Hold::UntilBodyEnds`]); and when the server drops the request's
//!   future (the client went away), from a task, without waiting for the TTL.
//! - **A lock scope.** The handler runs as the body of `with_lock` (or
//!   `with_locks`, `with_permit`): inside it, `fencing_token()` is the lock's
//!   and a nested `#[distributed_lock]` on the same key re-enters. A body
//!   streamed under [`Hold::UntilBodyEnds`] is polled by the server after
//!   the handler has returned, outside that scope.
//!
//! # How long the lock is held
//!
//! By default the lock covers producing the response, not streaming its
//! body: most handlers do their work before they answer, and a slow client
//! reading a large body should not keep others from the resource. A
//! handler that keeps writing while its body streams chooses
//! [`Hold::UntilBodyEnds`].

#![warn(missing_docs)]

mod answer;
mod body;
mod config;
mod error;
mod layer;
mod retry;
mod route;
mod service;
#[cfg(feature = "serde")]
mod settings;
mod target;
mod template;

pub use answer::OnBusy;
pub use body::{BoxError, LockBody};
pub use config::Hold;
pub use error::{BuildError, KeyError};
pub use layer::{LockLayer, LockLayerBuilder};
pub use retry::RetryAfter;
pub use service::LockService;
#[cfg(feature = "serde")]
pub use settings::{LayerSettings, Templates};
