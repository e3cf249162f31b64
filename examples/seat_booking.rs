//! Seat booking as an axum service: `POST /shows/{show}/seats/{seat}` books a
//! seat for the customer in the `x-customer` header. The handler reads the
//! seat, thinks, and writes it back (kept in Redis, so every instance of the
//! service sees the same seats): correct only because `LockLayer` runs it
//! under a lock on `seat:{show}:{seat}`, taken from the request's path.
//!
//! Answers: `201` booked, `409` the seat is someone else's, `429` another
//! request is booking that seat right now (with `Retry-After`), `400` no
//! `x-customer` header, `503` Redis is unreachable.
//!
//! Runs with no set-up: its own temporary redis-server unless `REDIS_URL` is
//! set. Listens on 127.0.0.1, port `PORT` or an ephemeral one.
//!
//! ```text
//! cargo run --example seat_booking --features tower
//! curl -i -X POST -H 'x-customer: ada' http://127.0.0.1:PORT/shows/1/seats/A1
//! cargo run --example seat_booking --features tower -- --self-test
//! cargo run --example seat_booking --features tower -- --self-test --no-lock
//! ```
//!
//! `--self-test` sends `--customers N` (default 50) concurrent bookings of
//! each of 3 seats at itself over loopback and prints how many got each
//! answer; with the lock every seat has exactly one `201`. `--no-lock`
//! serves the same handler without the layer: a seat then goes to several
//! customers.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use leasehold::tower::{LockLayer, OnBusy};
use leasehold::{LockManager, LockOptions};
use leasehold_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The seats the self-test books.
const SEATS: [&str; 3] = ["A1", "A2", "B7"];

/// Books `seat` of `show` for the `x-customer`: read, think, write. Two
/// requests for one seat at once would both find it free; the layer makes
/// them take turns.
async fn book(
    State(mut seats): State<MultiplexedConnection>,
    Path((show, seat)): Path<(String, String)>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let Some(customer) = headers
        .get("x-customer")
        .and_then(|value| value.to_str().ok())
    else {
        return (
            StatusCode::BAD_REQUEST,
            "who is booking? send an x-customer header\n".into(),
        );
    };
    let place = format!("booked:{show}:{seat}");
    let owner: Option<String> = match seats.get(&place).await {
        Ok(owner) => owner,
        Err(error) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("seat map: {error}\n"),
            )
        }
    };
    if let Some(owner) = owner {
        let status = if owner == customer {
            StatusCode::OK
        } else {
            StatusCode::CONFLICT
        };
        return (status, format!("seat {seat} of show {show} is {owner}'s\n"));
    }
    // Payment, seat map rendering, ...: time in which another request for
    // the same seat would also find it free.
    tokio::time::sleep(Duration::from_millis(5)).await;
    if let Err(error) = seats.set::<_, _, ()>(&place, customer).await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("seat map: {error}\n"),
        );
    }
    (
        StatusCode::CREATED,
        format!("seat {seat} of show {show} booked for {customer}\n"),
    )
}

/// The service: `book` behind a lock on the seat, unless `locked` is false.
fn router(
    locks: LockManager,
    seats: MultiplexedConnection,
    locked: bool,
) -> Result<Router, Box<dyn std::error::Error>> {
    const ROUTE: &str = "/shows/{show}/seats/{seat}";
    let booking = post(book);
    if !locked {
        return Ok(Router::new().route(ROUTE, booking).with_state(seats));
    }
    let one_booking_per_seat = LockLayer::builder(locks)
        .key("seat:{path.show}:{path.seat}")
        .route(ROUTE)
        .options(
            LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(2))
                .label("seat_booking::book"),
        )
        .on_busy(OnBusy::TooManyRequests)
        .build()?;
    Ok(Router::new()
        .route(ROUTE, booking.route_layer(one_booking_per_seat))
        .with_state(seats))
}

/// What the service runs on; dropping it stops the redis-server it started.
struct Environment {
    locks: LockManager,
    seats: MultiplexedConnection,
    _redis: Option<RedisServer>,
}

/// Connects to `REDIS_URL`, or to a redis-server of its own.
async fn environment() -> Result<Environment, Box<dyn std::error::Error>> {
    let (redis, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let locks = LockManager::connect(&url).await?;
    let seats = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    Ok(Environment {
        locks,
        seats,
        _redis: redis,
    })
}

/// Sends `POST path` as `customer` on a fresh connection; the status code.
async fn request(addr: SocketAddr, path: &str, customer: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nx-customer: {customer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    // "HTTP/1.1 201 Created\r\n..."
    String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))
}

/// How many requests got each answer, per seat.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Answers {
    booked: usize,
    taken: usize,
    busy: usize,
    other: usize,
}

/// Serves on an ephemeral loopback port and sends `customers` concurrent
/// bookings of every seat of [`SEATS`] at it.
async fn self_test(
    customers: usize,
    locked: bool,
) -> Result<Vec<(&'static str, Answers)>, Box<dyn std::error::Error>> {
    let env = environment().await?;
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let app = router(env.locks.clone(), env.seats.clone(), locked)?;
    let server = tokio::spawn(axum::serve(listener, app).into_future());
    let mut results = Vec::new();
    for seat in SEATS {
        let requests: Vec<_> = (0..customers)
            .map(|customer| {
                let path = format!("/shows/1/seats/{seat}");
                tokio::spawn(
                    async move { request(addr, &path, &format!("customer-{customer}")).await },
                )
            })
            .collect();
        let mut answers = Answers::default();
        for request in requests {
            match request.await? {
                Ok(201) => answers.booked += 1,
                Ok(409) => answers.taken += 1,
                Ok(429) => answers.busy += 1,
                _ => answers.other += 1,
            }
        }
        results.push((seat, answers));
    }
    server.abort();
    Ok(results)
}

/// Serves until Ctrl-C.
async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let env = environment().await?;
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port
            .parse()
            .map_err(|_| format!("PORT={port} is not a port"))?,
        Err(_) => 0,
    };
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!("try: curl -i -X POST -H 'x-customer: ada' http://{addr}/shows/1/seats/A1");
    println!("stop with Ctrl-C");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    axum::serve(
        listener,
        router(env.locks.clone(), env.seats.clone(), true)?,
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut self_testing = false;
    let mut locked = true;
    let mut customers = 50;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--self-test" => self_testing = true,
            "--no-lock" => locked = false,
            "--customers" => {
                customers = args
                    .next()
                    .and_then(|value| value.parse().ok())
                    .ok_or("--customers needs a whole number")?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other}; options: --self-test, --no-lock, --customers N"
                )
                .into())
            }
        }
    }
    if !self_testing {
        return serve().await;
    }
    let results = self_test(customers, locked).await?;
    let mut double_booked = 0;
    for (seat, answers) in &results {
        println!(
            "seat {seat}: {} booked, {} found it taken, {} told to retry (429), {} failed",
            answers.booked, answers.taken, answers.busy, answers.other
        );
        double_booked += answers.booked.saturating_sub(1);
    }
    println!("double bookings: {double_booked}");
    if double_booked > 0 && locked {
        return Err("a seat was booked twice under the lock".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--self-test --customers 20`, run by `cargo test --all-targets --all-features`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_seat_is_booked_once() {
        for (seat, answers) in self_test(20, true).await.expect("self-test") {
            assert_eq!(answers.booked, 1, "seat {seat}: {answers:?}");
            assert_eq!(answers.other, 0, "seat {seat}: {answers:?}");
            assert_eq!(
                answers.booked + answers.taken + answers.busy,
                20,
                "seat {seat}: {answers:?}"
            );
        }
    }
}
