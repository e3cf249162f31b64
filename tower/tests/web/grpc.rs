//! gRPC answers: the statuses tonic's `Status::aborted`, `invalid_argument`
//! and `unavailable` put on the wire, in the response headers.

use axum::routing::post;
use axum::Router;
use http::StatusCode;
use leasehold_runtime::LockOptions;
use leasehold_tower::LockLayer;

use crate::support::{send, Redis, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_grpc_statuses() {
    let redis = Redis::start().await;
    let layer = LockLayer::builder(redis.locks.clone())
        .key("order:{header.x-order}")
        .grpc()
        .build()
        .expect("a valid layer");
    let app = Router::new().route(
        "/shop.Orders/Checkout",
        post(|| async { "done" }).route_layer(layer),
    );
    let server = Server::start(app).await;
    let _holder = redis
        .locks
        .acquire("order:1", LockOptions::new())
        .await
        .expect("the holder's lock");

    for (request, code) in [
        (
            server.post("/shop.Orders/Checkout").header("x-order", "1"),
            "10",
        ),
        (server.post("/shop.Orders/Checkout"), "3"),
    ] {
        let answer = send(request).await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        assert_eq!(answer.headers["content-type"], "application/grpc");
        assert_eq!(answer.headers["grpc-status"], code, "{answer:?}");
        assert!(answer.headers.contains_key("grpc-message"));
    }
}
