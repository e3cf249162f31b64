//! Flash sale as an HTTP service: `POST /buy/{sku}` buys one unit in a SQLite
//! transaction opened inside a Redis lock on the SKU, so the next buyer
//! always reads the committed stock. `GET /stock/{sku}` shows what is left,
//! `GET /metrics` the locks' metrics in the Prometheus text format.
//!
//! Runs with no set-up: an embedded SQLite file in a temporary directory, and
//! its own temporary redis-server unless `REDIS_URL` is set. Listens on
//! 127.0.0.1, port `PORT` or an ephemeral one, and prints a curl line.
//!
//! ```text
//! cargo run --example flash_sale_service --features sqlite
//! curl -X POST http://127.0.0.1:PORT/buy/sku-1
//! cargo run --example flash_sale_service --features sqlite -- --self-test
//! ```
//!
//! Options: `--self-test` (fire `--buyers N` concurrent POSTs at itself over
//! loopback, print sold/stock/oversold and exit; default 500 buyers),
//! `--stock N` (units per SKU, default 100). The self-test ends by scraping
//! its own `/metrics` and printing the lock metrics.

use std::fmt;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use leasehold::{distributed_lock, fencing_token, transactional, LockError, LockManager};
use leasehold_testkit::RedisServer;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The SKUs on sale.
const SKUS: [&str; 2] = ["sku-1", "sku-2"];
/// Requests in flight at once during the self-test.
const MAX_IN_FLIGHT: usize = 100;

/// What can go wrong while buying.
#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("fencing token {0} is older than the stock row's: a newer holder wrote first")]
    StaleFence(u64),
}

/// The outcome of one purchase.
enum Purchase {
    Sold {
        order: i64,
        remaining: i64,
        fencing_token: u64,
    },
    SoldOut,
    UnknownSku,
}

/// One service instance: a lock manager and a database pool.
struct Shop {
    locks: LockManager,
    db: SqlitePool,
}

impl Shop {
    /// Buys one unit of `sku`: read the stock, check it, write it back, record
    /// the order. The lock on the SKU is taken first, then the transaction
    /// begins; it commits before the lock is released. `BEGIN IMMEDIATE` (the
    /// default on SQLite) takes SQLite's write lock up front: buyers of *other* SKUs hold other
    /// Redis locks and may write at the same time. Every purchase writes with
    /// its fencing token, so the token comes with the lock (`fenced`).
    #[transactional(pool = self.db)]
    #[distributed_lock(
        key = "stock:{sku}",
        ttl = "10s",
        wait = "30s",
        fenced = true,
        manager = self.locks
    )]
    async fn buy(&self, sku: &str) -> Result<Purchase, ShopError> {
        let token = fencing_token().await?;
        let fence = i64::try_from(token).expect("fencing tokens fit in i64");
        let units: Option<i64> = sqlx::query_scalar("SELECT units FROM stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&mut **tx)
            .await?;
        let Some(units) = units else {
            return Ok(Purchase::UnknownSku);
        };
        if units <= 0 {
            return Ok(Purchase::SoldOut);
        }
        // The write is guarded by the fencing token: a holder whose lease ran
        // out cannot overwrite what a newer holder wrote.
        let updated = sqlx::query(
            "UPDATE stock SET units = ?1, sold = sold + 1, fence = ?2 WHERE sku = ?3 AND fence < ?2",
        )
        .bind(units - 1)
        .bind(fence)
        .bind(sku)
        .execute(&mut **tx)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(ShopError::StaleFence(token));
        }
        let order = sqlx::query("INSERT INTO orders (sku, fencing_token) VALUES (?, ?)")
            .bind(sku)
            .bind(fence)
            .execute(&mut **tx)
            .await?
            .last_insert_rowid();
        Ok(Purchase::Sold {
            order,
            remaining: units - 1,
            fencing_token: token,
        })
    }

    /// Units left and sold of `sku`.
    async fn stock(&self, sku: &str) -> Result<Option<(i64, i64)>, sqlx::Error> {
        sqlx::query_as("SELECT units, sold FROM stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&self.db)
            .await
    }
}

/// `POST /buy/{sku}`: 200 with the order, 409 when sold out, 404 for an
/// unknown SKU, 503 when the lock stayed busy, 500 otherwise.
async fn buy(State(shop): State<Arc<Shop>>, Path(sku): Path<String>) -> (StatusCode, String) {
    match shop.buy(&sku).await {
        Ok(Purchase::Sold {
            order,
            remaining,
            fencing_token,
        }) => (
            StatusCode::OK,
            format!("order {order}: 1 x {sku} (fencing token {fencing_token}), {remaining} left\n"),
        ),
        Ok(Purchase::SoldOut) => (StatusCode::CONFLICT, format!("{sku} is sold out\n")),
        Ok(Purchase::UnknownSku) => (StatusCode::NOT_FOUND, format!("no such SKU: {sku}\n")),
        Err(ShopError::Lock(error @ (LockError::Timeout { .. } | LockError::Busy { .. }))) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n"))
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// `GET /stock/{sku}`: units left and sold.
async fn stock(State(shop): State<Arc<Shop>>, Path(sku): Path<String>) -> (StatusCode, String) {
    match shop.stock(&sku).await {
        Ok(Some((units, sold))) => (
            StatusCode::OK,
            format!("{sku}: {units} left, {sold} sold\n"),
        ),
        Ok(None) => (StatusCode::NOT_FOUND, format!("no such SKU: {sku}\n")),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

/// Histogram buckets of the lock's `*_seconds` metrics (wait and hold times):
/// from a millisecond to the longest `wait` this service allows.
const SECONDS_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Installs the Prometheus recorder as the process's `metrics` recorder, so
/// everything the lock runtime reports can be scraped from `/metrics`.
fn install_metrics() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)?
        .install_recorder()?;
    Ok(handle)
}

fn router(shop: Arc<Shop>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/buy/{sku}", post(buy))
        .route("/stock/{sku}", get(stock))
        .route("/metrics", get(move || async move { metrics.render() }))
        .with_state(shop)
}

/// A fresh directory under the system temp dir, deleted on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let name = format!("flash-sale-service-{}-{nanos}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Everything the service runs on; dropping it stops the redis-server it
/// started and deletes the database.
struct Environment {
    shop: Arc<Shop>,
    _redis: Option<RedisServer>,
    _dir: TempDir,
}

/// Opens the database in a temporary directory, seeds `stock` units of each
/// SKU, and connects to `REDIS_URL` or to a redis-server of its own.
async fn environment(stock: i64) -> Result<Environment, Box<dyn std::error::Error>> {
    let (redis, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let dir = TempDir::new()?;
    // WAL lets readers run beside the writer; the busy timeout makes a
    // connection wait for another's write lock instead of failing.
    let options = SqliteConnectOptions::new()
        .filename(dir.0.join("shop.sqlite"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10));
    let db = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    sqlx::query(
        "CREATE TABLE stock (sku TEXT PRIMARY KEY, units INTEGER NOT NULL, \
         sold INTEGER NOT NULL, fence INTEGER NOT NULL)",
    )
    .execute(&db)
    .await?;
    sqlx::query(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, sku TEXT NOT NULL, \
         fencing_token INTEGER NOT NULL)",
    )
    .execute(&db)
    .await?;
    for sku in SKUS {
        sqlx::query("INSERT INTO stock (sku, units, sold, fence) VALUES (?, ?, 0, 0)")
            .bind(sku)
            .bind(stock)
            .execute(&db)
            .await?;
    }
    let locks = LockManager::connect(&url).await?;
    Ok(Environment {
        shop: Arc::new(Shop { locks, db }),
        _redis: redis,
        _dir: dir,
    })
}

/// Sends `METHOD path` on a fresh connection and returns the status code
/// and the body.
async fn request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
    let malformed = || std::io::Error::other("malformed HTTP response");
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(malformed)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(malformed)?;
    Ok((status, body.to_owned()))
}

/// The value of the sample `name{labels}` in a Prometheus text payload.
fn sample(payload: &str, name_and_labels: &str) -> Option<f64> {
    payload.lines().find_map(|line| {
        let value = line.strip_prefix(name_and_labels)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// What the self-test saw.
#[derive(Debug)]
struct Report {
    buyers: usize,
    initial: i64,
    /// 200 responses.
    sold: i64,
    /// 409 responses.
    sold_out: i64,
    /// Any other response, or a failed request.
    failed: i64,
    /// Units left in the database.
    stock: i64,
    /// Order rows in the database.
    orders: i64,
    /// Whether the orders' fencing tokens strictly increase in commit order.
    tokens_increase: bool,
    elapsed: Duration,
    /// The lock's lines of the service's own `/metrics`, scraped after the load.
    lock_metrics: String,
    /// `leasehold_acquisitions_total` of the lock `stock:{sku}` with outcome `ok`.
    acquired: f64,
    /// Whether `/metrics` describes the acquisitions metric (`# HELP`).
    described: bool,
}

impl Report {
    /// Units sold beyond the initial stock.
    fn oversold(&self) -> i64 {
        (self.orders - self.initial).max(0)
    }

    fn is_consistent(&self) -> bool {
        let expected = self.initial.min(self.buyers as i64);
        self.failed == 0
            && self.sold == expected
            && self.orders == expected
            && self.stock + self.orders == self.initial
            && self.tokens_increase
            && self.acquired == self.buyers as f64
            && self.described
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} buyers in {:.2?}: sold={} stock={} oversold={} (sold out: {}, failed: {}, \
             fencing tokens increasing: {})",
            self.buyers,
            self.elapsed,
            self.sold,
            self.stock,
            self.oversold(),
            self.sold_out,
            self.failed,
            self.tokens_increase,
        )?;
        write!(f, "\nGET /metrics (lock metrics):\n{}", self.lock_metrics)
    }
}

/// Serves on an ephemeral loopback port, fires `buyers` POSTs at
/// `/buy/sku-1` (at most [`MAX_IN_FLIGHT`] at once), scrapes its own
/// `/metrics`, and reports.
async fn self_test(buyers: usize, stock: i64) -> Result<Report, Box<dyn std::error::Error>> {
    let metrics = install_metrics()?;
    let env = environment(stock).await?;
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let app = router(Arc::clone(&env.shop), metrics);
    let server = tokio::spawn(axum::serve(listener, app).into_future());
    let started = Instant::now();
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let requests: Vec<_> = (0..buyers)
        .map(|_| {
            let in_flight = Arc::clone(&in_flight);
            tokio::spawn(async move {
                let _permit = in_flight.acquire_owned().await;
                request(addr, "POST", "/buy/sku-1").await
            })
        })
        .collect();
    let (mut sold, mut sold_out, mut failed) = (0, 0, 0);
    for request in requests {
        match request.await? {
            Ok((200, _)) => sold += 1,
            Ok((409, _)) => sold_out += 1,
            _ => failed += 1,
        }
    }
    let elapsed = started.elapsed();
    let (status, scraped) = request(addr, "GET", "/metrics").await?;
    if status != 200 {
        return Err(format!("GET /metrics answered {status}").into());
    }
    server.abort();
    let lock_metrics: String = scraped
        .lines()
        .filter(|line| line.starts_with("leasehold_") && !line.contains("_bucket{"))
        .map(|line| format!("  {line}\n"))
        .collect();
    let acquired = sample(
        &scraped,
        r#"leasehold_acquisitions_total{lock="stock:{sku}",kind="lock",outcome="ok"}"#,
    )
    .unwrap_or(0.0);
    let (units, _) = env.shop.stock("sku-1").await?.ok_or("sku-1 is missing")?;
    let tokens: Vec<i64> =
        sqlx::query_scalar("SELECT fencing_token FROM orders WHERE sku = 'sku-1' ORDER BY id")
            .fetch_all(&env.shop.db)
            .await?;
    Ok(Report {
        buyers,
        initial: stock,
        sold,
        sold_out,
        failed,
        stock: units,
        orders: tokens.len() as i64,
        tokens_increase: tokens.windows(2).all(|pair| pair[0] < pair[1]),
        elapsed,
        lock_metrics,
        acquired,
        described: scraped
            .lines()
            .any(|line| line.starts_with("# HELP leasehold_acquisitions_total ")),
    })
}

/// Serves until Ctrl-C.
async fn serve(stock: i64) -> Result<(), Box<dyn std::error::Error>> {
    let metrics = install_metrics()?;
    let env = environment(stock).await?;
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port
            .parse()
            .map_err(|_| format!("PORT={port} is not a port"))?,
        Err(_) => 0,
    };
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("flash sale: {} units each of {SKUS:?}", stock);
    println!("listening on http://{addr}");
    println!("try: curl -X POST http://{addr}/buy/sku-1");
    println!("     curl http://{addr}/stock/sku-1");
    println!("     curl http://{addr}/metrics");
    println!("stop with Ctrl-C");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    // Drains the histograms now and then, so memory stays bounded however
    // rarely `/metrics` is scraped.
    let upkeep = tokio::spawn({
        let metrics = metrics.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                metrics.run_upkeep();
            }
        }
    });
    let served = axum::serve(listener, router(Arc::clone(&env.shop), metrics))
        .with_graceful_shutdown(shutdown)
        .await;
    upkeep.abort();
    served?;
    Ok(())
}

struct Settings {
    self_test: bool,
    buyers: usize,
    stock: i64,
}

fn parse_settings() -> Result<Settings, String> {
    let mut settings = Settings {
        self_test: false,
        buyers: 500,
        stock: 100,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| format!("{name} needs a whole number"))
        };
        match arg.as_str() {
            "--self-test" => settings.self_test = true,
            "--buyers" => settings.buyers = number("--buyers")?,
            "--stock" => settings.stock = number("--stock")? as i64,
            other => {
                return Err(format!(
                    "unknown argument {other}; options: --self-test, --buyers N, --stock N"
                ))
            }
        }
    }
    Ok(settings)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = parse_settings()?;
    if !settings.self_test {
        return serve(settings.stock).await;
    }
    let report = self_test(settings.buyers, settings.stock).await?;
    println!("{report}");
    if !report.is_consistent() {
        return Err("inconsistent result".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--self-test --buyers 200 --stock 50`, run by `cargo test --all-features`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn self_test_sells_exactly_the_stock() {
        let report = self_test(200, 50).await.expect("self-test");
        assert!(report.is_consistent(), "{report}");
        assert_eq!((report.sold, report.sold_out, report.stock), (50, 150, 0));
        for histogram in ["wait", "hold"] {
            let count = format!(
                "leasehold_{histogram}_seconds_count{{lock=\"stock:{{sku}}\",kind=\"lock\"}}"
            );
            assert_eq!(
                sample(&report.lock_metrics.replace("  ", ""), &count),
                Some(200.0),
                "{report}"
            );
        }
    }
}
