//! [`LockService`]: the inner service, called only once the request's lock
//! is held, and cancelled as soon as its lease is lost.

use std::borrow::Borrow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use leasehold_runtime::{LockError, LockManager};
use tokio::sync::oneshot;
use tower_service::Service;

use crate::answer::Refusal;
use crate::body::{BoxError, LockBody, Locked};
use crate::config::{Config, Hold};
use crate::target::Target;

/// The service a [`LockLayer`](crate::LockLayer) wraps around `S`.
///
/// Guarantees: `S` is called only once the request's lock is held (never
/// for a request that names no key, or whose lock is busy or unreachable);
/// its future is dropped as soon as the lease is lost, and the request is
/// answered `503`; the lock is released when the response is ready (or the
/// body has ended, with [`Hold::UntilBodyEnds`]), and at once when the
/// response future is dropped, e.g. because the client disconnected.
pub struct LockService<S, M, B> {
    inner: S,
    config: Arc<Config<M, B>>,
}

impl<S, M, B> LockService<S, M, B> {
    pub(crate) fn new(inner: S, config: Arc<Config<M, B>>) -> Self {
        LockService { inner, config }
    }
}

impl<S: Clone, M, B> Clone for LockService<S, M, B> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S, M, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, M, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    M: Borrow<LockManager> + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<LockBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The instance polled ready serves this request; the clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        let target = config.keys.target(&request);
        Box::pin(async move {
            let target = match target {
                Ok(target) => target,
                Err(missing) => return Ok(config.answers.respond(Refusal::BadKey(missing))),
            };
            match config.hold {
                Hold::UntilResponse => until_response(config, target, inner, request).await,
                Hold::UntilBodyEnds => until_body_ends(config, target, inner, request).await,
            }
        })
    }
}

/// Calls `inner` under the lock and releases it once the response is ready.
async fn until_response<S, M, ReqBody, ResBody>(
    config: Arc<Config<M, ReqBody>>,
    target: Target,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<LockBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    M: Borrow<LockManager>,
{
    let manager = config.manager.borrow();
    // Boxed here, so the lock's futures carry a pointer to the handler's
    // future, not a copy each.
    let holds = &config.holds;
    let handler = Box::pin(async move {
        let taken = Instant::now();
        let response = inner.call(request).await;
        holds.record(taken.elapsed());
        response
    });
    match target.run(manager, config.options.clone(), handler).await {
        Ok(response) => response.map(|response| response.map(LockBody::inner)),
        Err(refused) => Ok(refuse(&config, &target, refused).await),
    }
}

/// Calls `inner` under the lock and hands the lock to the response body,
/// which holds it until it ends or is dropped.
async fn until_body_ends<S, M, ReqBody, ResBody>(
    config: Arc<Config<M, ReqBody>>,
    target: Target,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<LockBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    M: Borrow<LockManager> + Send + Sync + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    let (respond, mut response) = oneshot::channel();
    // The locked call sends the response out and then waits, holding the
    // lock, until the body drops it; it completes only with an error.
    let mut locked: Locked = {
        let config = Arc::clone(&config);
        let target = target.clone();
        Box::pin(async move {
            // Boxed, as in `until_response`.
            let handler = Box::pin(async move {
                // The client may be gone: the locked call is then dropped too.
                let _ = respond.send(inner.call(request).await);
                std::future::pending().await
            });
            target
                .run(config.manager.borrow(), config.options.clone(), handler)
                .await
        })
    };
    tokio::select! {
        biased;
        outcome = &mut locked => {
            let Err(refused) = outcome;
            Ok(refuse(&config, &target, refused).await)
        }
        Ok(handled) = &mut response => {
            handled.map(|response| response.map(|body| LockBody::held(body, locked)))
        }
    }
}

/// The answer to a request whose lock could not be taken or was lost.
async fn refuse<M: Borrow<LockManager>, B, Body>(
    config: &Config<M, B>,
    target: &Target,
    refused: LockError,
) -> Response<LockBody<Body>> {
    let remaining = match &refused {
        LockError::Busy { remaining, .. } => *remaining,
        LockError::Timeout {
            lock_delay: Some(left),
            ..
        } => Some(*left),
        LockError::Timeout { key, .. } if config.answers.tells_retry_after() => {
            target.remaining(config.manager.borrow(), key).await
        }
        _ => None,
    };
    let retry_after = config.answers.retry_after.of(remaining, &config.holds);
    let status = refused.http_status();
    match &refused {
        LockError::Busy { .. } | LockError::Timeout { .. } => {}
        LockError::LeaseLost { .. } => tracing::warn!(
            %target,
            "lease lost while the request ran: its handler was cancelled, answering {status}"
        ),
        _ if status == 503 => tracing::warn!(
            error = %refused,
            %target,
            "could not lock the request, answering {status}"
        ),
        _ => tracing::error!(
            error = %refused,
            %target,
            "the lock layer cannot lock this request, answering {status}"
        ),
    }
    let refusal = Refusal::Failed {
        error: refused,
        retry_after,
    };
    config.answers.respond(refusal)
}

impl<S: std::fmt::Debug, M, B> std::fmt::Debug for LockService<S, M, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("keys", &self.config.keys)
            .field("hold", &self.config.hold)
            .finish_non_exhaustive()
    }
}
