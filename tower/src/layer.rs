//! [`LockLayer`] and its builder: which keys a request locks, with which
//! options, how refusals are answered and how long the lock is held.

use std::borrow::Borrow;
use std::sync::Arc;

use http::Request;
use leasehold_runtime::{LockManager, LockOptions, OnLost};
use tower_layer::Layer;

use crate::answer::{Answers, OnBusy};
use crate::config::{Config, Hold};
use crate::error::{BuildError, KeyError};
use crate::retry::{RecentHolds, RetryAfter};
use crate::route::Route;
use crate::service::LockService;
use crate::target::{KeyFn, Keys, OneKey};
use crate::template::KeyTemplate;

/// A tower layer that runs every request under a leasehold lock on a key
/// taken from the request; the [crate documentation](crate) has an example
/// on an axum router and the table of answers.
///
/// Built by [`LockLayer::builder`]; cheap to clone. `M` is the manager, or
/// anything that borrows one (`LockManager`, `Arc<LockManager>`, `&'static
/// LockManager`); `B` is the request body type of the services it wraps.
pub struct LockLayer<M, B> {
    config: Arc<Config<M, B>>,
}

impl<M: Borrow<LockManager>, B> LockLayer<M, B> {
    /// A builder of a layer that takes its locks through `manager`.
    pub fn builder(manager: M) -> LockLayerBuilder<M, B> {
        LockLayerBuilder {
            manager,
            templates: Vec::new(),
            key_fn: None,
            route: None,
            permits: None,
            options: LockOptions::new(),
            answers: Answers {
                on_busy: OnBusy::Conflict,
                grpc: false,
                retry_after: RetryAfter::RecentHolds,
            },
            hold: Hold::UntilResponse,
        }
    }
}

impl<M, B> Clone for LockLayer<M, B> {
    fn clone(&self) -> Self {
        LockLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, M, B> Layer<S> for LockLayer<M, B> {
    type Service = LockService<S, M, B>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, Arc::clone(&self.config))
    }
}

/// Settings of a [`LockLayer`]; [`build`](Self::build) checks them all.
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockLayerBuilder<M, B> {
    manager: M,
    templates: Vec<String>,
    key_fn: Option<KeyFn<B>>,
    route: Option<String>,
    permits: Option<u32>,
    options: LockOptions,
    answers: Answers,
    hold: Hold,
}

impl<M: Borrow<LockManager>, B> LockLayerBuilder<M, B> {
    /// The lock key, as a template over the request: literal text,
    /// `{header.NAME}` (the header's first value) and `{path.NAME}` (a
    /// parameter of the [`route`](Self::route)); `{{` and `}}` are literal
    /// braces. E.g. `"order:{header.idempotency-key}"`.
    ///
    /// Given more than once, the request locks every key, all or nothing (as
    /// `LockManager::with_locks`). A request whose key would lack a part
    /// (an absent or empty header, a path not matching the route) is
    /// answered `400` naming it, and takes no lock.
    pub fn key(mut self, template: &str) -> Self {
        self.templates.push(template.to_owned());
        self
    }

    /// The lock key, computed from the request. Return
    /// `Err(KeyError::Missing("what".into()))` (or another [`KeyError`]) when
    /// the request does not name one: it is answered `400` with that
    /// message. An empty key is answered `400` too, never locked.
    pub fn key_fn<F>(mut self, key_fn: F) -> Self
    where
        F: Fn(&Request<B>) -> Result<String, KeyError> + Send + Sync + 'static,
    {
        self.key_fn = Some(Arc::new(key_fn));
        self
    }

    /// The route the layer wraps, as the router writes it
    /// (`"/shows/{show}/seats/{seat}"`, `{*rest}` for the rest of the path):
    /// where `{path.NAME}` placeholders are read. The layer matches the
    /// request's path against it itself, so it works under any router.
    pub fn route(mut self, route: &str) -> Self {
        self.route = Some(route.to_owned());
        self
    }

    /// The lock's options: `ttl`, `wait` (how long a request waits for a
    /// busy lock before it is answered as busy; default 0, one attempt),
    /// `label`, `fenced`, ... `on_lost` is always `OnLost::Cancel`: the
    /// handler never runs on unlocked.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Take one of `permits` permits of the semaphore on the key instead of
    /// its lock: at most `permits` requests per key at once, across every
    /// instance (a concurrency limit per tenant, say). One key only.
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// What a busy lock answers over HTTP: `409` (the default) or `429` with
    /// `Retry-After`.
    pub fn on_busy(mut self, on_busy: OnBusy) -> Self {
        self.answers.on_busy = on_busy;
        self
    }

    /// What `Retry-After` says with [`OnBusy::TooManyRequests`]: by default
    /// about as long as this layer's recent holds took
    /// ([`RetryAfter::RecentHolds`]), never longer than the holder's
    /// remaining lease.
    pub fn retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.answers.retry_after = retry_after;
        self
    }

    /// Answer with gRPC statuses (for tonic and other gRPC servers): a
    /// missing key `INVALID_ARGUMENT`, a busy lock `ABORTED`, an unreachable
    /// lock server or a lost lease `UNAVAILABLE`, anything else `INTERNAL`.
    pub fn grpc(mut self) -> Self {
        self.answers.grpc = true;
        self
    }

    /// How long a request holds its lock (default [`Hold::UntilResponse`]).
    pub fn hold(mut self, hold: Hold) -> Self {
        self.hold = hold;
        self
    }

    /// The layer; fails naming the bad part of a template or route, when no
    /// key or two key sources were given, and for `permits(0)` or permits
    /// on several keys.
    pub fn build(mut self) -> Result<LockLayer<M, B>, BuildError> {
        let route = self
            .route
            .as_deref()
            .map(Route::parse)
            .transpose()?
            .map(Arc::new);
        let mut templates = self
            .templates
            .iter()
            .map(|template| KeyTemplate::parse(template, route.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if self.permits == Some(0) {
            return Err(BuildError::ZeroPermits);
        }
        let source = match (templates.len(), self.key_fn.take()) {
            (0, None) => return Err(BuildError::NoKey),
            (0, Some(key_fn)) => OneKey::Function(key_fn),
            (_, Some(_)) => return Err(BuildError::TwoKeySources),
            (1, None) => OneKey::Template(templates.remove(0)),
            (several, None) => {
                if self.permits.is_some() {
                    return Err(BuildError::PermitsOnSeveralKeys { templates: several });
                }
                return Ok(self.layer_of(Keys::Several(templates)));
            }
        };
        let permits = self.permits;
        Ok(self.layer_of(Keys::One { source, permits }))
    }

    fn layer_of(self, keys: Keys<B>) -> LockLayer<M, B> {
        LockLayer {
            config: Arc::new(Config {
                manager: self.manager,
                keys,
                options: self.options.on_lost(OnLost::Cancel),
                answers: self.answers,
                hold: self.hold,
                holds: RecentHolds::default(),
            }),
        }
    }
}

impl<M, B> std::fmt::Debug for LockLayer<M, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayer")
            .field("keys", &self.config.keys)
            .field("options", &self.config.options)
            .field("answers", &self.config.answers)
            .field("hold", &self.config.hold)
            .finish_non_exhaustive()
    }
}

impl<M, B> std::fmt::Debug for LockLayerBuilder<M, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayerBuilder")
            .field("templates", &self.templates)
            .field("key_fn", &self.key_fn.is_some())
            .field("route", &self.route)
            .field("permits", &self.permits)
            .field("options", &self.options)
            .field("answers", &self.answers)
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

/// The `Retry-After` a layer tells: its tests build a whole layer, so they
/// live here, beside the layer, not in `retry.rs`.
#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{ready, Ready};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use bytes::Bytes;
    use http::header::RETRY_AFTER;
    use http::{Request, Response, StatusCode};
    use http_body_util::Empty;
    use leasehold_runtime::{LockManager, LockOptions};
    use tower_layer::Layer;
    use tower_service::Service;

    use super::LockLayer;
    use crate::answer::OnBusy;
    use crate::retry::RetryAfter;

    /// A handler that answers at once: its holds take well under a second.
    #[derive(Clone)]
    struct Quick;

    impl Service<Request<()>> for Quick {
        type Response = Response<Empty<Bytes>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            ready(Ok(Response::new(Empty::new())))
        }
    }

    fn order(id: &str) -> Request<()> {
        Request::builder().header("order", id).body(()).unwrap()
    }

    /// The holder's lease in these tests.
    const LEASE: Duration = Duration::from_secs(20);

    /// The `Retry-After` of a request for `order:a` while another client
    /// holds that lock with a [`LEASE`] lease, after one quick request
    /// through the layer built by `builder`.
    async fn retry_after_while_held(
        build: impl FnOnce(LockManager) -> LockLayer<LockManager, ()>,
    ) -> u64 {
        let locks = LockManager::in_memory();
        let mut service = build(locks.clone()).layer(Quick);
        let served = service.call(order("a")).await.unwrap();
        assert_eq!(served.status(), StatusCode::OK);
        let holder = locks
            .acquire("order:a", LockOptions::new().ttl(LEASE))
            .await
            .unwrap();
        let busy = service.call(order("a")).await.unwrap();
        assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
        holder.release().await.unwrap();
        let header = busy.headers().get(RETRY_AFTER).expect("a Retry-After");
        header.to_str().unwrap().parse().unwrap()
    }

    /// A 429 after quick holds tells clients to come back about when such a
    /// hold ends, not when the holder's whole lease would (20 s for a
    /// handler that takes milliseconds).
    #[tokio::test]
    async fn retry_after_follows_recent_holds_not_the_whole_lease() {
        let seconds = retry_after_while_held(|locks| {
            LockLayer::builder(locks)
                .key("order:{header.order}")
                .on_busy(OnBusy::TooManyRequests)
                .build()
                .unwrap()
        })
        .await;
        assert!(seconds < LEASE.as_secs() / 2, "Retry-After: {seconds}");
    }

    /// A fixed `Retry-After` is said as configured, and never above the
    /// holder's remaining lease.
    #[tokio::test]
    async fn a_fixed_retry_after_is_bounded_by_the_remaining_lease() {
        let fixed = |wait| {
            move |locks| {
                LockLayer::builder(locks)
                    .key("order:{header.order}")
                    .on_busy(OnBusy::TooManyRequests)
                    .retry_after(RetryAfter::Fixed(wait))
                    .build()
                    .unwrap()
            }
        };
        let seconds = retry_after_while_held(fixed(Duration::from_millis(2500))).await;
        assert_eq!(seconds, 3);
        let seconds = retry_after_while_held(fixed(Duration::from_secs(600))).await;
        assert!(seconds <= LEASE.as_secs(), "Retry-After: {seconds}");
    }
}
