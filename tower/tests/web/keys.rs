//! Keys taken from the request: a missing part is a `400` naming it and
//! takes no lock; a bad template or setting fails the build.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use http::{Request, StatusCode};
use leasehold_runtime::LockManager;
use leasehold_tower::{BuildError, KeyError, LockLayer};

use crate::support::{send, Redis, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_headers_and_path_parameters_answer_400_naming_them() {
    let redis = Redis::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            "done"
        }
    };
    let by_header = LockLayer::builder(redis.locks.clone())
        .key("payment:{header.idempotency-key}")
        .build()
        .expect("a valid layer");
    let by_path = LockLayer::builder(redis.locks.clone())
        .key("order:{path.id}")
        .route("/orders/{id}")
        .build()
        .expect("a valid layer");
    let by_function = LockLayer::builder(redis.locks.clone())
        .key_fn(|request: &Request<Body>| {
            request
                .uri()
                .query()
                .map(str::to_owned)
                .ok_or_else(|| KeyError::Missing("a tenant in the query".into()))
        })
        .build()
        .expect("a valid layer");
    // `by_path` wraps every route of its router, also one that has no `id`.
    let orders = Router::new()
        .route("/orders/{id}", post(handler.clone()))
        .route("/orders", post(handler.clone()))
        .layer(by_path);
    let app = Router::new()
        .route("/pay", post(handler.clone()).route_layer(by_header))
        .route("/import", post(handler).route_layer(by_function))
        .merge(orders);
    let server = Server::start(app).await;

    for (request, part) in [
        (server.post("/pay"), "missing header `idempotency-key`"),
        (
            server.post("/pay").header("idempotency-key", ""),
            "header `idempotency-key` is empty",
        ),
        (server.post("/orders"), "missing path parameter `id`"),
        (
            server.post("/orders/%FF"),
            "path parameter `id` is not valid",
        ),
        (server.post("/import"), "missing a tenant in the query"),
        (
            server.post("/import?"),
            "the lock key taken from the request is empty",
        ),
    ] {
        let answer = send(request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
        assert!(
            answer.body.contains(part),
            "`{}` does not name `{part}`",
            answer.body
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a handler ran without a lock"
    );
    assert_eq!(redis.key_count(), 0, "a request locked something");

    let answer = send(server.post("/orders/7")).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
}

#[tokio::test]
async fn build_names_what_is_wrong() {
    let locks = LockManager::in_memory();
    let builder = || LockLayer::<_, Body>::builder(locks.clone());
    let refused = |built: Result<LockLayer<LockManager, Body>, BuildError>| {
        built.expect_err("a refused layer")
    };

    assert_eq!(refused(builder().build()), BuildError::NoKey);
    assert_eq!(
        refused(builder().key("a").key_fn(|_| Ok("b".into())).build()),
        BuildError::TwoKeySources
    );
    assert_eq!(
        refused(builder().key("a").permits(0).build()),
        BuildError::ZeroPermits
    );
    assert_eq!(
        refused(builder().key("a").key("b").permits(2).build()),
        BuildError::PermitsOnSeveralKeys { templates: 2 }
    );
    for (built, part) in [
        (
            builder().key("order:{query.id}").build(),
            "`{query.id}` is not a placeholder",
        ),
        (builder().key("order:{path.id}").build(), "needs the route"),
        (
            builder()
                .key("order:{path.id}")
                .route("/orders/{order}")
                .build(),
            "no parameter `id`",
        ),
        (
            builder().key("order:{header.a b}").build(),
            "`a b` is not a valid header name",
        ),
        (
            builder().key("a").route("orders").build(),
            "starts with `/`",
        ),
    ] {
        let message = refused(built).to_string();
        assert!(message.contains(part), "`{message}` does not name `{part}`");
    }
}
