//! The body of every response that passes the layer: the inner service's,
//! the layer's own answer, or the inner body streamed under the lock.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use leasehold_runtime::LockError;
use pin_project_lite::pin_project;

/// The errors a [`LockBody`] yields: the inner body's, or the lease lost
/// while the body streamed under [`Hold::UntilBodyEnds`](crate::Hold::UntilBodyEnds).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The locked call while the body streams: never completes but with the
/// lease lost (the lock's body waits forever once the response is out).
pub(crate) type Locked =
    Pin<Box<dyn Future<Output = Result<std::convert::Infallible, LockError>> + Send>>;

pin_project! {
    /// The body of a response that passed the layer: the inner service's
    /// body, or the layer's own short answer (a text message, or nothing for
    /// a gRPC status).
    ///
    /// Under [`Hold::UntilBodyEnds`](crate::Hold::UntilBodyEnds) it holds
    /// the lock until the inner body has ended or is dropped; if the lease is
    /// lost first, it ends with a [`LockError::LeaseLost`] error (the server
    /// then aborts the response) and no frame of the inner body is passed on
    /// after that.
    pub struct LockBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Held { #[pin] body: B, locked: Option<Locked> },
        Answer { message: Option<Bytes> },
    }
}

impl<B> LockBody<B> {
    /// The inner service's body, passed on as it is.
    pub(crate) fn inner(body: B) -> Self {
        LockBody {
            kind: Kind::Inner { body },
        }
    }

    /// The inner body, streamed while `locked` holds the lock.
    pub(crate) fn held(body: B, locked: Locked) -> Self {
        LockBody {
            kind: Kind::Held {
                body,
                locked: Some(locked),
            },
        }
    }

    /// The layer's own answer.
    pub(crate) fn answer(message: Bytes) -> Self {
        LockBody {
            kind: Kind::Answer {
                message: (!message.is_empty()).then_some(message),
            },
        }
    }
}

impl<B> Body for LockBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            KindProjection::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            KindProjection::Answer { message } => {
                Poll::Ready(message.take().map(|data| Ok(Frame::data(data))))
            }
            KindProjection::Held { body, locked } => {
                let Some(lock) = locked.as_mut() else {
                    return Poll::Ready(None);
                };
                if let Poll::Ready(Err(lost)) = lock.as_mut().poll(cx) {
                    *locked = None;
                    return Poll::Ready(Some(Err(lost.into())));
                }
                let frame = ready!(body.poll_frame(cx));
                if frame.is_none() {
                    // The end: dropping the locked call releases the lock
                    // (from a task, at once).
                    *locked = None;
                }
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Held { locked, .. } => locked.is_none(),
            Kind::Answer { message } => message.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } | Kind::Held { body, .. } => body.size_hint(),
            Kind::Answer { message } => {
                SizeHint::with_exact(message.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

impl<B> std::fmt::Debug for LockBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Held {
                locked: Some(_), ..
            } => "streaming under the lock",
            Kind::Held { locked: None, .. } => "ended",
            Kind::Answer { .. } => "answer",
        };
        f.debug_struct("LockBody").field("kind", &kind).finish()
    }
}
