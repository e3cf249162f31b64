//! Faults: a lease deleted under a slow handler, a client that goes away,
//! a lock server that cannot be reached.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use http::StatusCode;
use leasehold_runtime::{LockManager, LockOptions};
use leasehold_tower::LockLayer;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::support::{bounded, send, until_released, DropFlag, Redis, Server};

/// A server whose `POST /orders/{id}` locks `order:{id}` for a handler
/// that says when it started and then sleeps for a minute.
struct Slow {
    server: Server,
    started: Arc<Notify>,
    dropped: DropFlag,
    finished: Arc<AtomicBool>,
}

async fn slow_handler(locks: &LockManager, ttl: Duration) -> Slow {
    let started = Arc::new(Notify::new());
    let dropped = DropFlag::default();
    let finished = Arc::new(AtomicBool::new(false));
    let layer = LockLayer::builder(locks.clone())
        .key("order:{path.id}")
        .route("/orders/{id}")
        .options(LockOptions::new().ttl(ttl))
        .build()
        .expect("a valid layer");
    let handler = {
        let (started, dropped, finished) = (started.clone(), dropped.clone(), finished.clone());
        move || async move {
            let _armed = dropped.arm();
            started.notify_one();
            tokio::time::sleep(Duration::from_secs(60)).await;
            finished.store(true, Ordering::SeqCst);
            "done"
        }
    };
    let app = Router::new().route("/orders/{id}", post(handler).route_layer(layer));
    Slow {
        server: Server::start(app).await,
        started,
        dropped,
        finished,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_under_a_slow_handler_answers_503_within_its_validity() {
    let ttl = Duration::from_secs(3);
    let redis = Redis::start().await;
    let slow = slow_handler(&redis.locks, ttl).await;
    let request = tokio::spawn(send(slow.server.post("/orders/7")));
    bounded("the handler's start", slow.started.notified()).await;

    let deleted = Instant::now();
    let forced = redis
        .locks
        .force_release("order:7")
        .await
        .expect("force_release");
    assert!(forced.was_held, "the handler ran without the lock");
    let answer = bounded("the answer", request)
        .await
        .expect("the request task");

    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert!(
        deleted.elapsed() < ttl,
        "answered {:?} after the deletion, past the lease's validity",
        deleted.elapsed()
    );
    assert!(
        slow.dropped.is_set(),
        "the handler's future was not dropped"
    );
    assert!(
        !slow.finished.load(Ordering::SeqCst),
        "the handler ran on unlocked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_releases_the_lock_at_once() {
    let ttl = Duration::from_secs(30);
    let redis = Redis::start().await;
    let slow = slow_handler(&redis.locks, ttl).await;
    let mut client = bounded("connecting", TcpStream::connect(slow.server.addr))
        .await
        .expect("connect");
    client
        .write_all(b"POST /orders/9 HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n")
        .await
        .expect("send the request");
    bounded("the handler's start", slow.started.notified()).await;
    assert!(redis.locks.inspect("order:9").await.expect("inspect").held);

    drop(client);
    // Far sooner than the TTL would free it.
    assert!(
        until_released(&redis.locks, "order:9", Duration::from_secs(5)).await,
        "the lock outlived the client"
    );
    assert!(
        slow.dropped.is_set(),
        "the handler's future was not dropped"
    );
    assert!(!slow.finished.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_lock_server_answers_503() {
    let mut redis = Redis::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = LockLayer::builder(redis.locks.clone())
        .key("order:{path.id}")
        .route("/orders/{id}")
        .build()
        .expect("a valid layer");
    let handler = {
        let calls = calls.clone();
        move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            "done"
        }
    };
    let app = Router::new().route("/orders/{id}", post(handler).route_layer(layer));
    let server = Server::start(app).await;

    redis.server.kill();
    let answer = send(server.post("/orders/1")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the handler ran without the lock"
    );
}
