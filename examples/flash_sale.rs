//! Flash sale: many buyers, spread over several service instances (one
//! `LockManager` each, as if each were its own process), buy from a limited
//! stock kept in Redis with a non-atomic read-check-write. With the lock no
//! unit is oversold; with `--no-lock` the same code oversells.
//!
//! Run: `scripts/example` (or `cargo run --example flash_sale -- --no-lock`).
//! Starts its own temporary redis-server unless `REDIS_URL` is set.
//! Options: `--no-lock`, `--buyers N` (default 200), `--stock N` (default 50),
//! `--instances N` (default 4).

use std::time::{Duration, Instant};

use distributed_lock::{distributed_lock, LockError, LockManager};
use distributed_lock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// What can go wrong while buying.
#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// One service instance: its own lock manager and its own Redis connection.
struct Shop {
    locks: LockManager,
    redis: MultiplexedConnection,
}

impl Shop {
    /// Buys one unit under the lock on the SKU's stock. Returns whether a unit was sold.
    #[distributed_lock(key = "stock:{sku}", ttl = "10s", wait = "30s", manager = self.locks)]
    async fn buy(&self, sku: &str) -> Result<bool, ShopError> {
        self.buy_unlocked(sku).await
    }

    /// Read, think, write: correct only when nobody else does the same meanwhile.
    async fn buy_unlocked(&self, sku: &str) -> Result<bool, ShopError> {
        let mut redis = self.redis.clone();
        let stock: i64 = redis.get(format!("stock:{sku}")).await?;
        if stock <= 0 {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = redis.set(format!("stock:{sku}"), stock - 1).await?;
        let _: i64 = redis.incr(format!("sold:{sku}"), 1).await?;
        Ok(true)
    }
}

struct Settings {
    locked: bool,
    buyers: usize,
    stock: i64,
    instances: usize,
}

fn parse_settings() -> Result<Settings, String> {
    let mut settings = Settings {
        locked: true,
        buyers: 200,
        stock: 50,
        instances: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| format!("{name} needs a whole number"))
        };
        match arg.as_str() {
            "--no-lock" => settings.locked = false,
            "--buyers" => settings.buyers = number("--buyers")?,
            "--stock" => settings.stock = number("--stock")? as i64,
            "--instances" => settings.instances = number("--instances")?.max(1),
            other => {
                return Err(format!(
                "unknown argument `{other}`; use --no-lock, --buyers N, --stock N, --instances N"
            ))
            }
        }
    }
    Ok(settings)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = parse_settings()?;
    let own_server = std::env::var("REDIS_URL").is_err().then(RedisServer::start);
    let url = match &own_server {
        Some(server) => {
            println!("started a temporary redis-server at {}", server.url());
            server.url()
        }
        None => std::env::var("REDIS_URL")?,
    };

    let sku = "sku-42";
    let client = redis::Client::open(url.as_str())?;
    let mut setup = client.get_multiplexed_async_connection().await?;
    let _: () = setup.set(format!("stock:{sku}"), settings.stock).await?;
    let _: () = setup.set(format!("sold:{sku}"), 0).await?;

    let mut shops = Vec::new();
    for _ in 0..settings.instances {
        shops.push(std::sync::Arc::new(Shop {
            locks: LockManager::connect(&url).await?,
            redis: client.get_multiplexed_async_connection().await?,
        }));
    }

    println!(
        "{} buyers over {} instances, stock {}, lock {}",
        settings.buyers,
        settings.instances,
        settings.stock,
        if settings.locked {
            "ON"
        } else {
            "OFF (--no-lock)"
        }
    );
    let started = Instant::now();
    let mut buyers = Vec::new();
    for buyer in 0..settings.buyers {
        let shop = std::sync::Arc::clone(&shops[buyer % shops.len()]);
        let locked = settings.locked;
        buyers.push(tokio::spawn(async move {
            if locked {
                shop.buy(sku).await
            } else {
                shop.buy_unlocked(sku).await
            }
        }));
    }
    let mut successful_buyers = 0;
    for buyer in buyers {
        if buyer.await?? {
            successful_buyers += 1;
        }
    }

    let stock: i64 = setup.get(format!("stock:{sku}")).await?;
    let sold: i64 = setup.get(format!("sold:{sku}")).await?;
    let oversold = (sold - settings.stock).max(0);
    println!("took {:?}", started.elapsed());
    println!("buyers told yes: {successful_buyers}");
    println!("sold:            {sold}");
    println!("stock left:      {stock}");
    println!("oversold:        {oversold}");
    if settings.locked && (oversold != 0 || sold + stock != settings.stock) {
        return Err("the lock failed to prevent an oversell".into());
    }
    if !settings.locked && oversold > 0 {
        println!("without the lock, {oversold} units were sold that did not exist");
    }
    Ok(())
}
