//! Running a body under held leases: the one runner behind every `with_*`
//! method and every annotated function's expansion.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::future::select_all;
use tracing::Instrument;

use crate::lease::{scope, Lease};
use crate::{LockError, OnLost};

/// What holds leases and gives them back: a guard of one key or of a set.
pub(crate) trait Held: Sized {
    /// The leases held, the innermost last.
    fn leases(&self) -> Vec<Arc<Lease>>;

    /// Gives every lease back; `LeaseLost` when one was no longer ours.
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send;
}

/// Runs `body` in a lock scope of every lease `held` holds, inside the
/// innermost lease's `lock.hold` span. With `OnLost::Cancel` the body is
/// dropped at its next `.await` once any of the leases is lost, and the
/// result is `LeaseLost` naming its key; a release that finds a lease no
/// longer ours gives the same. Then releases, also when the body panics or
/// this future is dropped (the guards release on drop).
///
/// The body comes boxed, and every `with_*` method boxes it before its
/// first `.await`: the futures between the caller and here then carry a
/// pointer rather than a copy of the body each, and a body that nests more
/// locked calls does not grow them level by level.
pub(crate) async fn run<H: Held, F: Future>(
    held: H,
    on_lost: OnLost,
    body: Pin<Box<F>>,
) -> Result<F::Output, LockError> {
    let leases = held.leases();
    let span = leases
        .last()
        .map_or_else(tracing::Span::none, |lease| lease.span());
    let scoped = scope::enter_all(leases.iter().cloned(), body).instrument(span);
    let Some(output) = until_lost(scoped, any_lost(&leases), on_lost).await else {
        let key = leases
            .iter()
            .find(|lease| lease.is_lost())
            .map_or_else(String::new, |lease| lease.key.user().to_owned());
        drop(held);
        return Err(LockError::LeaseLost { key });
    };
    match held.release().await {
        Err(lost @ LockError::LeaseLost { .. }) if on_lost == OnLost::Cancel => Err(lost),
        _ => Ok(output),
    }
}

/// Resolves as soon as any of `leases` is lost.
pub(crate) async fn any_lost(leases: &[Arc<Lease>]) {
    match leases {
        [] => std::future::pending().await,
        [lease] => lease.lost().await,
        leases => {
            select_all(leases.iter().map(|lease| Box::pin(lease.lost()))).await;
        }
    }
}

/// Runs `body` to completion or, with `OnLost::Cancel`, until `lost`
/// resolves first: then `None`, and the body is dropped at its current
/// `.await`.
async fn until_lost<F: Future>(
    body: F,
    lost: impl Future<Output = ()>,
    on_lost: OnLost,
) -> Option<F::Output> {
    match on_lost {
        OnLost::Cancel => tokio::select! {
            biased;
            () = lost => None,
            output = body => Some(output),
        },
        OnLost::Continue => Some(body.await),
    }
}
