//! How long the lock is held: until the response is ready (the default), or
//! until its body has ended.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::channel::{Channel, Sender};
use http_body_util::BodyExt;
use leasehold_runtime::{LockManager, LockOptions};
use leasehold_tower::{Hold, LockLayer};
use tokio::sync::mpsc;

use crate::support::{bounded, send_head, until_released, Redis, Server};

/// A server whose `POST /reports/{id}` locks `report:{id}` and answers a
/// body the test writes through the sender it receives.
async fn reports(
    locks: &LockManager,
    hold: Hold,
    ttl: Duration,
) -> (Server, mpsc::UnboundedReceiver<Sender<Bytes>>) {
    let layer = LockLayer::builder(locks.clone())
        .key("report:{path.id}")
        .route("/reports/{id}")
        .options(LockOptions::new().ttl(ttl))
        .hold(hold)
        .build()
        .expect("a valid layer");
    let (writers, receive) = mpsc::unbounded_channel();
    let handler = move || async move {
        let (writer, body) = Channel::<Bytes>::new(1);
        let _ = writers.send(writer);
        Body::new(body)
    };
    let app = Router::new().route("/reports/{id}", post(handler).route_layer(layer));
    (Server::start(app).await, receive)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_lock_is_released_before_the_body_streams() {
    let redis = Redis::start().await;
    let (server, mut writers) =
        reports(&redis.locks, Hold::UntilResponse, Duration::from_secs(30)).await;
    let response = send_head(server.post("/reports/1")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        !redis.locks.inspect("report:1").await.expect("inspect").held,
        "the lock covers the body"
    );

    let mut writer = bounded("the body's writer", writers.recv())
        .await
        .expect("a writer");
    writer
        .send_data(Bytes::from_static(b"rows"))
        .await
        .expect("write");
    drop(writer);
    let body = bounded("the body", response.into_body().collect())
        .await
        .expect("the body");
    assert_eq!(body.to_bytes(), "rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_ends_keeps_the_lock_while_the_body_streams() {
    let redis = Redis::start().await;
    let (server, mut writers) =
        reports(&redis.locks, Hold::UntilBodyEnds, Duration::from_secs(30)).await;
    let response = send_head(server.post("/reports/1")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut writer = bounded("the body's writer", writers.recv())
        .await
        .expect("a writer");
    writer
        .send_data(Bytes::from_static(b"rows"))
        .await
        .expect("write");
    assert!(
        redis.locks.inspect("report:1").await.expect("inspect").held,
        "released before the body ended"
    );

    drop(writer);
    let body = bounded("the body", response.into_body().collect())
        .await
        .expect("the body");
    assert_eq!(body.to_bytes(), "rows");
    assert!(
        until_released(&redis.locks, "report:1", Duration::from_secs(5)).await,
        "the lock outlived the body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_while_the_body_streams_aborts_it() {
    let ttl = Duration::from_secs(3);
    let redis = Redis::start().await;
    let (server, mut writers) = reports(&redis.locks, Hold::UntilBodyEnds, ttl).await;
    let response = send_head(server.post("/reports/1")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut writer = bounded("the body's writer", writers.recv())
        .await
        .expect("a writer");
    writer
        .send_data(Bytes::from_static(b"rows"))
        .await
        .expect("write");

    let deleted = Instant::now();
    redis
        .locks
        .force_release("report:1")
        .await
        .expect("force_release");
    let body = bounded("the body", response.into_body().collect()).await;
    assert!(body.is_err(), "the body ended normally without its lock");
    assert!(
        deleted.elapsed() < ttl,
        "aborted {:?} after the deletion",
        deleted.elapsed()
    );
    drop(writer);
}
