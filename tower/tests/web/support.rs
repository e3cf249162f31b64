//! A real redis-server, a real HTTP server on loopback and a real HTTP/1
//! client (hyper's), each step bounded in time.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use leasehold_runtime::LockManager;
use leasehold_testkit::RedisServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest any one step of a test may take.
pub const STEP: Duration = Duration::from_secs(30);

/// `future`, or a panic naming `what` after [`STEP`].
pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {STEP:?}"))
}

/// A redis-server of the test's own, and a manager connected to it.
pub struct Redis {
    pub server: RedisServer,
    pub locks: LockManager,
}

impl Redis {
    pub async fn start() -> Redis {
        let server = RedisServer::start();
        let locks = bounded("connecting", LockManager::connect(&server.url()))
            .await
            .expect("connect to the test's redis-server");
        Redis { server, locks }
    }

    /// How many keys the server holds.
    pub fn key_count(&self) -> i64 {
        match self.server.command(&["DBSIZE"]) {
            Ok(leasehold_testkit::RespValue::Integer(count)) => count,
            reply => panic!("DBSIZE answered {reply:?}"),
        }
    }
}

/// An axum app served on 127.0.0.1; stopped when dropped.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    pub async fn start(app: Router) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .into_future()
                .await
                .expect("serve");
        });
        Server { addr, task }
    }

    /// A request to `path` with these headers, on a connection of its own.
    pub fn post(&self, path: &str) -> http::request::Builder {
        Request::post(format!("http://{}{path}", self.addr))
            .header(http::header::HOST, self.addr.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a client received, body read to its end.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

/// Sends `request` on a new connection and returns the response head; the
/// body is left to read.
pub async fn send_head(request: http::request::Builder) -> http::Response<Incoming> {
    let request = request
        .body(Empty::<Bytes>::new())
        .expect("a valid request");
    let authority = request
        .uri()
        .authority()
        .expect("an absolute URI")
        .to_string();
    let stream = bounded("connecting", TcpStream::connect(authority))
        .await
        .expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(connection);
    bounded("the response head", sender.send_request(request))
        .await
        .expect("a response")
}

/// Sends `request` on a new connection and reads the whole answer.
pub async fn send(request: http::request::Builder) -> Answer {
    let response = send_head(request).await;
    let (head, body) = response.into_parts();
    let body = bounded("the response body", body.collect())
        .await
        .expect("the whole body")
        .to_bytes();
    Answer {
        status: head.status,
        headers: head.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Set when its [`Armed`] guard is dropped: proves a handler's future was dropped.
#[derive(Debug, Default, Clone)]
pub struct DropFlag(Arc<AtomicBool>);

/// Kept in a handler's future; sets its [`DropFlag`] when dropped.
#[derive(Debug)]
pub struct Armed(Arc<AtomicBool>);

impl DropFlag {
    pub fn arm(&self) -> Armed {
        Armed(Arc::clone(&self.0))
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Waits, polling every 10 ms for at most `limit`, until `held` of the lock
/// on `key` is false; whether it became so.
pub async fn until_released(locks: &LockManager, key: &str, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !locks.inspect(key).await.expect("inspect").held {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}
