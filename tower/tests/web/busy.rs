//! A busy lock: `409` at once with `wait = 0`, or `429` with `Retry-After`
//! within the holder's TTL; the handler is not called.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use http::header::RETRY_AFTER;
use http::StatusCode;
use leasehold_runtime::{LockManager, LockOptions};
use leasehold_tower::{LockLayer, OnBusy};

use crate::support::{send, Redis, Server};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_answers_409_at_once_when_wait_is_zero() {
    let redis = Redis::start().await;
    let (server, calls) = payments(&redis.locks, OnBusy::Conflict, Duration::ZERO).await;
    let _holder = redis
        .locks
        .acquire("payment:k1", LockOptions::new().ttl(HOLDER_TTL))
        .await
        .expect("the holder's lock");

    let started = Instant::now();
    let answer = send(server.post("/pay").header("idempotency-key", "k1")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    assert!(answer.headers.get(RETRY_AFTER).is_none());
    // At once: well before the holder's lease could have ended.
    assert!(
        started.elapsed() < HOLDER_TTL / 2,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran without the lock"
    );

    let answer = send(server.post("/pay").header("idempotency-key", "k2")).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "another key is free: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_answers_429_with_retry_after_within_the_holders_ttl() {
    let redis = Redis::start().await;
    let (server, calls) = payments(&redis.locks, OnBusy::TooManyRequests, Duration::ZERO).await;
    let _holder = redis
        .locks
        .acquire("payment:k1", LockOptions::new().ttl(HOLDER_TTL))
        .await
        .expect("the holder's lock");

    let started = Instant::now();
    let answer = send(server.post("/pay").header("idempotency-key", "k1")).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert!(
        started.elapsed() < HOLDER_TTL / 2,
        "took {:?}",
        started.elapsed()
    );
    let seconds = retry_after(&answer.headers);
    assert!(
        (1..=HOLDER_TTL.as_secs()).contains(&seconds),
        "Retry-After: {seconds}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran without the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_busy_for_all_of_wait_answers_429_with_the_holders_remaining_ttl() {
    let redis = Redis::start().await;
    let wait = Duration::from_millis(300);
    let (server, calls) = payments(&redis.locks, OnBusy::TooManyRequests, wait).await;
    let _holder = redis
        .locks
        .acquire("payment:k1", LockOptions::new().ttl(HOLDER_TTL))
        .await
        .expect("the holder's lock");

    let started = Instant::now();
    let answer = send(server.post("/pay").header("idempotency-key", "k1")).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{answer:?}");
    assert!(
        started.elapsed() >= wait,
        "answered before its wait: {:?}",
        started.elapsed()
    );
    let seconds = retry_after(&answer.headers);
    assert!(
        (1..=HOLDER_TTL.as_secs()).contains(&seconds),
        "Retry-After: {seconds}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran without the lock"
    );
}
