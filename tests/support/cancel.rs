//! Cancelling a future at each of its `.await` points in turn.

use std::future::Future;
use std::task::Poll;

/// Polls `future` until it completes, or until it has been polled `polls`
/// times and is still pending: then drops it and returns `None`. Dropping
/// after 1, 2, 3… polls cancels a future at each of its `.await` points in
/// turn, without guessing at timings.
pub async fn drop_after_polls<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut pending = 0;
    std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => {
            pending += 1;
            if pending >= polls {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        }
    })
    .await
}
