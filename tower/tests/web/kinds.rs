//! The lock kinds a layer takes: a permit of a per-key semaphore, several
//! keys all or nothing; the handler runs in their lock scope.

use std::time::Duration;

use axum::routing::post;
use axum::Router;
use http::StatusCode;
use leasehold_runtime::LockOptions;
use leasehold_tower::LockLayer;
use tokio::sync::{mpsc, Semaphore};

use crate::support::{bounded, send, Redis, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_limit_the_requests_of_each_key() {
    let redis = Redis::start().await;
    let layer = LockLayer::builder(redis.locks.clone())
        .key("import:{header.x-tenant}")
        .permits(2)
        .options(LockOptions::new().ttl(Duration::from_secs(10)))
        .build()
        .expect("a valid layer");
    let (entered, mut inside) = mpsc::unbounded_channel();
    // Closed until the test opens it: the handlers inside stay there.
    let gate = std::sync::Arc::new(Semaphore::new(0));
    let handler = {
        let gate = gate.clone();
        move || async move {
            let _ = entered.send(());
            let _open = gate.acquire().await;
            "imported"
        }
    };
    let app = Router::new().route("/import", post(handler).route_layer(layer));
    let server = Server::start(app).await;

    let first_two: Vec<_> = (0..2)
        .map(|_| tokio::spawn(send(server.post("/import").header("x-tenant", "acme"))))
        .collect();
    for _ in 0..2 {
        bounded("a permit holder's start", inside.recv()).await;
    }
    let third = send(server.post("/import").header("x-tenant", "acme")).await;
    assert_eq!(
        third.status,
        StatusCode::CONFLICT,
        "a third request of one tenant got in: {third:?}"
    );
    let other_tenant = tokio::spawn(send(server.post("/import").header("x-tenant", "globex")));
    bounded("another tenant's start", inside.recv()).await;

    gate.add_permits(3);
    for request in first_two.into_iter().chain([other_tenant]) {
        let answer = bounded("an import", request)
            .await
            .expect("the request task");
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_keys_are_locked_all_or_nothing_in_the_handlers_scope() {
    let redis = Redis::start().await;
    let layer = LockLayer::builder(redis.locks.clone())
        .key("account:{path.from}")
        .key("account:{path.to}")
        .route("/transfers/{from}/{to}")
        .build()
        .expect("a valid layer");
    let handler = || async { leasehold_runtime::held_locks().join(",") };
    let app = Router::new().route("/transfers/{from}/{to}", post(handler).route_layer(layer));
    let server = Server::start(app).await;

    let holder = redis
        .locks
        .acquire("account:b", LockOptions::new())
        .await
        .expect("the holder's lock");
    let answer = send(server.post("/transfers/a/b")).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    assert!(
        !redis
            .locks
            .inspect("account:a")
            .await
            .expect("inspect")
            .held,
        "a key of a refused set stayed locked"
    );

    holder.release().await.expect("release");
    let answer = send(server.post("/transfers/a/b")).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let mut held: Vec<&str> = answer.body.split(',').collect();
    held.sort_unstable();
    assert_eq!(
        held,
        ["account:a", "account:b"],
        "the handler did not run in the locks' scope"
    );
}
