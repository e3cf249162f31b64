//! Flash sale: many buyers, spread over several service instances (one
//! `LockManager` each, as if each were its own process), buy from a limited
//! stock kept in Redis with a non-atomic read-check-write. With the lock no
//! unit is oversold; with `--no-lock` the same code oversells.
//!
//! Run: `scripts/example` (or `cargo run --example flash_sale -- --no-lock`).
//! Starts its own temporary redis-server unless `REDIS_URL` is set.
//! Options: `--no-lock`, `--buyers N` (default 200), `--stock N` (default 50),
//! `--instances N` (default 4), and where the locks live:
//! `--sentinel` (starts its own primary, 2 replicas and 3 Sentinels) or
//! `--sentinel NAME URL,URL,...` (an existing Sentinel set-up; the stock is
//! kept on the primary they name), `--cluster` (starts its own Redis Cluster
//! of 3 primaries with a replica each) or `--cluster URL,URL,...` (nodes of
//! an existing cluster, which also keeps the stock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{distributed_lock, LockError, LockManager};
use leasehold_testkit::{RedisCluster, RedisSentinel, RedisServer};
use redis::aio::ConnectionLike;
use redis::AsyncCommands;

/// What can go wrong while buying.
#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// One service instance: its own lock manager and a connection to where the
/// stock is kept (one server, or a cluster).
struct Shop<C> {
    locks: LockManager,
    redis: C,
}

impl<C: ConnectionLike + Clone + Send + Sync> Shop<C> {
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
    /// `--sentinel`: `Some(None)` starts a Sentinel set-up, `Some(Some(..))`
    /// names an existing one (service name, Sentinel URLs).
    sentinel: Option<Option<(String, Vec<String>)>>,
    /// `--cluster`: `Some(None)` starts a cluster, `Some(Some(urls))` names
    /// nodes of an existing one.
    cluster: Option<Option<Vec<String>>>,
}

/// Where the locks and the stock live.
enum Deployment {
    /// One server: the locks and the stock on it.
    Single { url: String },
    /// A Sentinel-managed primary: the locks through the Sentinels, the stock
    /// on the primary they name now.
    Sentinel {
        service: String,
        sentinels: Vec<String>,
        primary_url: String,
    },
    /// A Redis Cluster: the locks and the stock on it.
    Cluster { urls: Vec<String> },
}

impl Deployment {
    async fn manager(&self) -> Result<LockManager, LockError> {
        match self {
            Deployment::Single { url } => LockManager::connect(url).await,
            Deployment::Sentinel {
                service, sentinels, ..
            } => LockManager::sentinel(service, sentinels).await,
            Deployment::Cluster { urls } => LockManager::cluster(urls).await,
        }
    }
}

/// `redis://host:port` of the primary the first Sentinel names for `service`.
async fn primary_url(
    service: &str,
    sentinels: &[String],
) -> Result<String, Box<dyn std::error::Error>> {
    let first = sentinels
        .first()
        .ok_or("--sentinel needs at least one URL")?;
    let mut sentinel = redis::Client::open(first.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let named: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query_async(&mut sentinel)
        .await?;
    let (host, port) =
        named.ok_or_else(|| format!("the Sentinel at {first} does not know `{service}`"))?;
    Ok(format!("redis://{host}:{port}"))
}

fn parse_settings() -> Result<Settings, String> {
    let mut settings = Settings {
        locked: true,
        buyers: 200,
        stock: 50,
        instances: 4,
        sentinel: None,
        cluster: None,
    };
    let mut args = std::env::args().skip(1).peekable();
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
            "--sentinel" => {
                settings.sentinel = Some(match args.next_if(|next| !next.starts_with("--")) {
                    None => None,
                    Some(service) => {
                        let urls = args.next().ok_or("--sentinel NAME needs URL,URL,...")?;
                        Some((service, urls.split(',').map(str::to_owned).collect()))
                    }
                });
            }
            "--cluster" => {
                settings.cluster = Some(
                    args.next_if(|next| !next.starts_with("--"))
                        .map(|urls| urls.split(',').map(str::to_owned).collect()),
                );
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}`; use --no-lock, --buyers N, --stock N, \
                     --instances N, --sentinel [NAME URL,URL,...], --cluster [URL,URL,...]"
                ))
            }
        }
    }
    Ok(settings)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = parse_settings()?;
    // Kept until the end: dropping them stops the servers this run started.
    let mut own_server = None;
    let mut own_sentinels = None;
    let mut own_cluster = None;
    let deployment = match (&settings.sentinel, &settings.cluster) {
        (Some(_), Some(_)) => return Err("choose one of --sentinel and --cluster".into()),
        (None, None) => {
            let url = match std::env::var("REDIS_URL") {
                Ok(url) => url,
                Err(_) => {
                    let server = own_server.insert(RedisServer::start());
                    println!("started a temporary redis-server at {}", server.url());
                    server.url()
                }
            };
            Deployment::Single { url }
        }
        (Some(None), None) => {
            let topology = own_sentinels.insert(RedisSentinel::start());
            println!(
                "started a temporary primary {}, 2 replicas and 3 Sentinels ({})",
                topology.primary().url(),
                topology.sentinel_urls().join(", ")
            );
            Deployment::Sentinel {
                service: topology.service_name().to_owned(),
                sentinels: topology.sentinel_urls(),
                primary_url: topology.primary().url(),
            }
        }
        (Some(Some((service, sentinels))), None) => Deployment::Sentinel {
            primary_url: primary_url(service, sentinels).await?,
            service: service.clone(),
            sentinels: sentinels.clone(),
        },
        (None, Some(None)) => {
            let cluster: &RedisCluster = own_cluster.insert(RedisCluster::start());
            println!(
                "started a temporary Redis Cluster of 3 primaries and 3 replicas ({})",
                cluster.seed_urls().join(", ")
            );
            Deployment::Cluster {
                urls: cluster.seed_urls(),
            }
        }
        (None, Some(Some(urls))) => Deployment::Cluster { urls: urls.clone() },
    };
    match &deployment {
        Deployment::Single { url }
        | Deployment::Sentinel {
            primary_url: url, ..
        } => {
            let data = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            run_sale(&settings, &deployment, data).await
        }
        Deployment::Cluster { urls } => {
            let data = redis::cluster::ClusterClient::new(urls.clone())?
                .get_async_connection()
                .await?;
            run_sale(&settings, &deployment, data).await
        }
    }
}

/// Sells the stock kept at `data` to the buyers, over instances whose locks
/// live in `deployment`, and checks that nothing was oversold.
async fn run_sale<C>(
    settings: &Settings,
    deployment: &Deployment,
    mut data: C,
) -> Result<(), Box<dyn std::error::Error>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let sku = "sku-42";
    let _: () = data.set(format!("stock:{sku}"), settings.stock).await?;
    let _: () = data.set(format!("sold:{sku}"), 0).await?;

    let mut shops = Vec::new();
    for _ in 0..settings.instances {
        shops.push(Arc::new(Shop {
            locks: deployment.manager().await?,
            redis: data.clone(),
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
        let shop = Arc::clone(&shops[buyer % shops.len()]);
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

    let stock: i64 = data.get(format!("stock:{sku}")).await?;
    let sold: i64 = data.get(format!("sold:{sku}")).await?;
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
