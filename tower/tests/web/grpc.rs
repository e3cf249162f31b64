//! gRPC end to end: the layer on a real tonic server (HTTP/2 on loopback),
//! called by a real tonic client, which reads the layer's answers as the
//! statuses of `LockError::grpc_code`'s table that the README promises: a
//! busy lock `ABORTED`, a request without its key's part `INVALID_ARGUMENT`,
//! an unreachable lock server and a lost lease `UNAVAILABLE`; and the
//! handler's own answer when it ran under the lock.
//!
//! The service, `shop.Orders/Checkout`, is written by hand over a codec
//! that passes bytes through (what protobuf code generation would write,
//! without it): the layer sees the same requests either way.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use leasehold_runtime::{LockError, LockManager, LockOptions};
use leasehold_testkit::FaultProxy;
use leasehold_tower::LockLayer;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};

use crate::support::{bounded, DropFlag, Redis};

/// The method every test calls.
const CHECKOUT: &str = "/shop.Orders/Checkout";

/// Messages as they are: the request's bytes in, the handler's bytes out.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// What the handler of `Checkout` does once it runs (under the lock).
#[derive(Debug, Clone, Copy)]
enum Handler {
    /// Answers `done` at once.
    Answer,
    /// Says it started, then waits a minute (a lost lease must end it).
    Hang,
}

/// The `shop.Orders` service: `Checkout` counts its calls and does what
/// its [`Handler`] says.
#[derive(Debug, Clone)]
struct Orders {
    handler: Handler,
    calls: Arc<AtomicUsize>,
    started: Arc<Notify>,
    dropped: DropFlag,
}

impl NamedService for Orders {
    const NAME: &'static str = "shop.Orders";
}

impl tower_service::Service<http::Request<Body>> for Orders {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let checkout = Checkout(self.clone());
        Box::pin(async move {
            if request.uri().path() != CHECKOUT {
                return Ok(Status::unimplemented("only Checkout").into_http());
            }
            Ok(tonic::server::Grpc::new(RawCodec)
                .unary(checkout, request)
                .await)
        })
    }
}

/// The `Checkout` method of [`Orders`].
struct Checkout(Orders);

impl tonic::server::UnaryService<Bytes> for Checkout {
    type Response = Bytes;
    type Future = Pin<Box<dyn Future<Output = Result<tonic::Response<Bytes>, Status>> + Send>>;

    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        let orders = self.0.clone();
        Box::pin(async move {
            let _armed = orders.dropped.arm();
            orders.calls.fetch_add(1, Ordering::SeqCst);
            orders.started.notify_one();
            if let Handler::Hang = orders.handler {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok(tonic::Response::new(Bytes::from_static(b"done")))
        })
    }
}

/// A tonic server on loopback whose every request goes through a lock
/// layer (`order:{header.x-order}`, gRPC answers) to [`Orders`]; stopped
/// when dropped.
struct GrpcServer {
    addr: SocketAddr,
    orders: Orders,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl GrpcServer {
    async fn start(locks: LockManager, options: LockOptions, handler: Handler) -> GrpcServer {
        let layer = LockLayer::<_, Body>::builder(locks)
            .key("order:{header.x-order}")
            .options(options)
            .grpc()
            .build()
            .expect("a valid layer");
        let orders = Orders {
            handler,
            calls: Arc::default(),
            started: Arc::default(),
            dropped: DropFlag::default(),
        };
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = oneshot::channel::<()>();
        let router = Server::builder().layer(layer).add_service(orders.clone());
        let task = tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve gRPC");
        });
        GrpcServer {
            addr,
            orders,
            stop: Some(stop),
            task,
        }
    }

    /// Calls `Checkout` with a tonic client on a connection of its own,
    /// with `x-order: <order>` in its metadata when given.
    async fn checkout(&self, order: Option<&str>) -> Result<Bytes, Status> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("a valid URI")
            .connect_timeout(Duration::from_secs(5));
        let channel = bounded("connecting", channel.connect())
            .await
            .expect("connect to the gRPC server");
        let mut client = tonic::client::Grpc::new(channel);
        bounded("the client's readiness", client.ready())
            .await
            .expect("a ready client");
        let mut request = tonic::Request::new(Bytes::from_static(b"order"));
        if let Some(order) = order {
            request
                .metadata_mut()
                .insert("x-order", order.parse().expect("ASCII metadata"));
        }
        let answer = client.unary(request, PathAndQuery::from_static(CHECKOUT), RawCodec);
        bounded("the answer", answer)
            .await
            .map(tonic::Response::into_inner)
    }

    /// How often the handler ran.
    fn calls(&self) -> usize {
        self.orders.calls.load(Ordering::SeqCst)
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// The code `error` promises, as tonic reads it.
fn promised(error: &LockError) -> Code {
    Code::from_i32(error.grpc_code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_runs_the_handler_and_its_answer_reaches_the_client() {
    let redis = Redis::start().await;
    let server = GrpcServer::start(redis.locks.clone(), LockOptions::new(), Handler::Answer).await;
    let answer = server
        .checkout(Some("1"))
        .await
        .expect("the handler's answer");
    assert_eq!(answer, Bytes::from_static(b"done"));
    assert_eq!(server.calls(), 1);
    assert!(
        !redis.locks.inspect("order:1").await.unwrap().held,
        "released after the answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_is_aborted() {
    let redis = Redis::start().await;
    let server = GrpcServer::start(redis.locks.clone(), LockOptions::new(), Handler::Answer).await;
    let _holder = redis
        .locks
        .acquire("order:1", LockOptions::new())
        .await
        .expect("the holder's lock");
    let status = server.checkout(Some("1")).await.expect_err("busy");
    let busy = LockError::Busy {
        key: "order:1".into(),
        remaining: None,
        lock_delay: None,
    };
    assert_eq!(status.code(), promised(&busy), "{status:?}");
    assert_eq!(status.code(), Code::Aborted, "the README's row");
    assert!(
        status.message().contains("another request holds the lock"),
        "{status:?}"
    );
    assert_eq!(server.calls(), 0, "the handler did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_its_keys_part_is_an_invalid_argument() {
    let redis = Redis::start().await;
    let server = GrpcServer::start(redis.locks.clone(), LockOptions::new(), Handler::Answer).await;
    let status = server.checkout(None).await.expect_err("no key");
    let invalid = LockError::InvalidOptions("no key".into());
    assert_eq!(status.code(), promised(&invalid), "{status:?}");
    assert_eq!(status.code(), Code::InvalidArgument, "the README's row");
    assert!(
        status.message().contains("x-order"),
        "names the header: {status:?}"
    );
    assert_eq!(server.calls(), 0, "the handler did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_lock_server_is_unavailable() {
    let mut redis = Redis::start().await;
    let server = GrpcServer::start(redis.locks.clone(), LockOptions::new(), Handler::Answer).await;
    redis.server.kill();
    let status = server
        .checkout(Some("1"))
        .await
        .expect_err("no lock server");
    let unreachable = redis
        .locks
        .try_acquire("order:2", LockOptions::new())
        .await
        .expect_err("no lock server");
    assert_eq!(
        status.code(),
        promised(&unreachable),
        "{unreachable:?}: {status:?}"
    );
    assert_eq!(status.code(), Code::Unavailable, "the README's row");
    assert_eq!(server.calls(), 0, "the handler ran without the lock");
}

/// The lease is cut off under a running handler (the link to Redis
/// blackholed, so no renewal lands): the handler's future is dropped and
/// the client is told `UNAVAILABLE`, as `LeaseLost` promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_under_a_running_handler_is_unavailable() {
    let redis = Redis::start().await;
    let proxy = FaultProxy::start(redis.server.addr());
    let locks = bounded(
        "connecting",
        LockManager::builder()
            .response_timeout(Duration::from_millis(300))
            .connect(&proxy.url()),
    )
    .await
    .expect("connect through the proxy");
    let options = LockOptions::new().ttl(Duration::from_secs(1));
    let server = GrpcServer::start(locks, options, Handler::Hang).await;
    let started = Arc::clone(&server.orders.started);
    let checkout = server.checkout(Some("7"));
    tokio::pin!(checkout);
    tokio::select! {
        _ = started.notified() => {}
        early = &mut checkout => panic!("answered before the handler started: {early:?}"),
    }
    proxy.blackhole();
    let status = checkout.await.expect_err("the lease was lost");
    let lost = LockError::LeaseLost {
        key: "order:7".into(),
    };
    assert_eq!(status.code(), promised(&lost), "{status:?}");
    assert_eq!(status.code(), Code::Unavailable, "the README's row");
    assert!(status.message().contains("was lost"), "{status:?}");
    assert!(
        server.orders.dropped.is_set(),
        "the handler's future was dropped"
    );
}
