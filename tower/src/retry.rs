//! How long a busy answer tells the client to wait (`Retry-After`): about
//! as long as this layer's recent holds took, or a fixed time; never longer
//! than the holder's remaining lease.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// What `Retry-After` says on a `429` ([`OnBusy::TooManyRequests`](crate::OnBusy)),
/// in whole seconds rounded up (at least 1). Never more than the holder's
/// remaining lease: after it, the lock is free unless the holder renewed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfter {
    /// The longest of the last holds this layer saw complete, from the lock
    /// taken to the response ready (the default). A holder of the same key
    /// likely runs the same handler, so it is likely done by then. Before
    /// any hold has completed, and under [`Hold::UntilBodyEnds`](crate::Hold)
    /// (whose holds end with bodies the layer does not time), the holder's
    /// remaining lease.
    #[default]
    RecentHolds,
    /// This long.
    Fixed(Duration),
}

/// How many completed holds [`RecentHolds`] remembers.
const REMEMBERED: usize = 32;

/// The durations of the last [`REMEMBERED`] holds that completed.
#[derive(Debug, Default)]
pub(crate) struct RecentHolds(Mutex<Remembered>);

#[derive(Debug, Default)]
struct Remembered {
    holds: [Duration; REMEMBERED],
    /// How many holds were recorded, ever; the next goes at this modulo
    /// [`REMEMBERED`].
    recorded: usize,
}

impl RecentHolds {
    /// Remembers a hold that lasted `hold`, forgetting the oldest.
    pub(crate) fn record(&self, hold: Duration) {
        let mut remembered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let next = remembered.recorded % REMEMBERED;
        remembered.holds[next] = hold;
        remembered.recorded = remembered.recorded.wrapping_add(1);
    }

    /// The longest remembered hold; `None` before the first.
    fn longest(&self) -> Option<Duration> {
        let remembered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = remembered.recorded.min(REMEMBERED);
        remembered.holds[..kept].iter().max().copied()
    }
}

impl RetryAfter {
    /// How long to tell the client, given the holder's `remaining` lease
    /// (`None`: unknown, or the holder let go) and this layer's `holds`.
    pub(crate) fn of(self, remaining: Option<Duration>, holds: &RecentHolds) -> Option<Duration> {
        let remaining = remaining?;
        let wanted = match self {
            RetryAfter::RecentHolds => holds.longest(),
            RetryAfter::Fixed(wait) => Some(wait),
        };
        Some(wanted.map_or(remaining, |wanted| wanted.min(remaining)))
    }
}

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

    use super::{RecentHolds, RetryAfter};
    use crate::{LockLayer, OnBusy};

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

    #[test]
    fn recent_holds_bound_the_wait_by_their_longest_and_the_lease() {
        let holds = RecentHolds::default();
        let lease = Some(Duration::from_secs(20));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), lease);
        holds.record(Duration::from_millis(20));
        holds.record(Duration::from_millis(300));
        holds.record(Duration::from_millis(40));
        let longest = Some(Duration::from_millis(300));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), longest);
        let short = Some(Duration::from_millis(100));
        assert_eq!(RetryAfter::RecentHolds.of(short, &holds), short);
        assert_eq!(RetryAfter::RecentHolds.of(None, &holds), None);
        // The 300 ms hold is forgotten once 32 later ones were recorded.
        for _ in 0..32 {
            holds.record(Duration::from_millis(10));
        }
        let quick = Some(Duration::from_millis(10));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), quick);
    }
}
