//! A busy lock: `409` at once with `wait = 0`, or `429` with `Retry-After`
//! within the holder's TTL; the handler is not called.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use http::header::RETRY_AFTER;
use http::StatusCode;
use leasehold_runtime::{LockGuard, LockManager, LockOptions};
use leasehold_tower::{LockLayer, OnBusy};

use crate::support::{send, Answer, Redis, Server};

/// The holder's TTL in these tests.
const HOLDER_TTL: Duration = Duration::from_secs(20);

/// A server whose `POST /pay` locks `payment:{idempotency-key}`; and how
/// often its handler ran.
async fn payments(
    locks: &LockManager,
    on_busy: OnBusy,
    wait: Duration,
) -> (Server, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = LockLayer::builder(locks.clone())
        .key("payment:{header.idempotency-key}")
        .options(LockOptions::new().wait(wait))
        .on_busy(on_busy)
        .build()
        .expect("a valid layer");
    let handler = {
        let calls = calls.clone();
        move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            "paid"
        }
    };
    let app = Router::new().route("/pay", post(handler).route_layer(layer));
    (Server::start(app).await, calls)
}

/// `Retry-After` as whole seconds.
fn retry_after(headers: &http::HeaderMap) -> u64 {
    headers
        .get(RETRY_AFTER)
        .expect("a Retry-After header")
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds")
}

/// What a request for `payment:k1` got while another client held that lock
/// with a [`HOLDER_TTL`] lease, under a layer answering `on_busy` after
/// `wait`, and how long it took; asserts the handler never ran. Returns
/// the server, the holder's guard and its server too, for more requests
/// while `payment:k1` stays held.
async fn while_held_elsewhere(
    on_busy: OnBusy,
    wait: Duration,
) -> (Answer, Duration, (Server, LockGuard, Redis)) {
    let redis = Redis::start().await;
    let (server, calls) = payments(&redis.locks, on_busy, wait).await;
    let holder = redis
        .locks
        .acquire("payment:k1", LockOptions::new().ttl(HOLDER_TTL))
        .await
        .expect("the holder's lock");
    let started = Instant::now();
    let answer = send(server.post("/pay").header("idempotency-key", "k1")).await;
    let took = started.elapsed();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran without the lock"
    );
    (answer, took, (server, holder, redis))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_answers_409_at_once_when_wait_is_zero() {
    let (answer, took, (server, _holder, _redis)) =
        while_held_elsewhere(OnBusy::Conflict, Duration::ZERO).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    assert!(answer.headers.get(RETRY_AFTER).is_none());
    // At once: well before the holder's lease could have ended.
    assert!(took < HOLDER_TTL / 2, "took {took:?}");

    let answer = send(server.post("/pay").header("idempotency-key", "k2")).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "another key is free: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_answers_429_with_retry_after_within_the_holders_ttl() {
    let (answer, took, _held) = while_held_elsewhere(OnBusy::TooManyRequests, Duration::ZERO).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert!(took < HOLDER_TTL / 2, "took {took:?}");
    let seconds = retry_after(&answer.headers);
    assert!(
        (1..=HOLDER_TTL.as_secs()).contains(&seconds),
        "Retry-After: {seconds}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_busy_for_all_of_wait_answers_429_with_the_holders_remaining_ttl() {
    let wait = Duration::from_millis(300);
    let (answer, took, _held) = while_held_elsewhere(OnBusy::TooManyRequests, wait).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert!(took >= wait, "answered before its wait: {took:?}");
    let seconds = retry_after(&answer.headers);
    assert!(
        (1..=HOLDER_TTL.as_secs()).contains(&seconds),
        "Retry-After: {seconds}"
    );
}
