//! One handler at a time per key; other keys in parallel.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::routing::post;
use axum::Router;
use http::{Request, StatusCode};
use leasehold_runtime::LockOptions;
use leasehold_tower::LockLayer;
use tokio::sync::Barrier;

use crate::support::{bounded, send, Redis, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_requests_for_one_key_run_their_handlers_one_at_a_time() {
    let redis = Redis::start().await;
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let layer = LockLayer::builder(redis.locks.clone())
        .key("order:{path.id}")
        .route("/orders/{id}/checkout")
        .options(
            LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(120)),
        )
        .build()
        .expect("a valid layer");
    let handler = {
        let (inside, overlaps, ran) = (inside.clone(), overlaps.clone(), ran.clone());
        move || async move {
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            ran.fetch_add(1, Ordering::SeqCst);
            "checked out"
        }
    };
    let app = Router::new().route("/orders/{id}/checkout", post(handler).route_layer(layer));
    let server = Server::start(app).await;

    let requests: Vec<_> = (0..100)
        .map(|_| tokio::spawn(send(server.post("/orders/42/checkout"))))
        .collect();
    for request in requests {
        let answer = bounded("a checkout", request)
            .await
            .expect("the request task");
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 100);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "handlers of one key overlapped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_for_other_keys_run_in_parallel() {
    const KEYS: usize = 8;
    let redis = Redis::start().await;
    // Every handler waits until all of them are inside: they pass only if
    // no key waits for another.
    let together = Arc::new(Barrier::new(KEYS));
    let layer = LockLayer::builder(redis.locks.clone())
        .key_fn(|request: &Request<Body>| Ok(format!("order:{}", request.uri().path())))
        .options(LockOptions::new().wait(Duration::from_secs(60)))
        .build()
        .expect("a valid layer");
    let handler = move |Path(_id): Path<String>| {
        let together = together.clone();
        async move {
            match tokio::time::timeout(Duration::from_secs(20), together.wait()).await {
                Ok(_) => StatusCode::OK,
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
            }
        }
    };
    let app = Router::new().route("/orders/{id}/checkout", post(handler).route_layer(layer));
    let server = Server::start(app).await;

    let requests: Vec<_> = (0..KEYS)
        .map(|id| tokio::spawn(send(server.post(&format!("/orders/{id}/checkout")))))
        .collect();
    for request in requests {
        let answer = bounded("a checkout", request)
            .await
            .expect("the request task");
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "handlers of different keys did not run together: {answer:?}"
        );
    }
}
