//! A scheduled job that a whole fleet fires and exactly one instance runs,
//! per period: 3 service instances (one `LockManager` each, as if each were
//! its own process) fire the same report every second, their clocks 0, 150
//! and 300 ms apart. `on_busy = "skip"` makes the late ones return at once,
//! and `hold_at_least` keeps the key held long enough that they find it busy
//! even though the job itself takes 1 ms.
//!
//! Run: `cargo run --example scheduled_job` (10 periods; `--periods N`).
//! Starts its own temporary redis-server unless `REDIS_URL` is set. Exits
//! with an error if any period's job ran other than once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager};
use leasehold_testkit::RedisServer;

/// Instances, and how far apart their schedules fire.
const INSTANCES: u32 = 3;
const SKEW: Duration = Duration::from_millis(150);

/// Which instance ran each period's job.
type Log = Arc<Mutex<BTreeMap<u64, Vec<u32>>>>;

struct Instance {
    name: u32,
    locks: LockManager,
    log: Log,
}

impl Instance {
    /// The report of `period`. The key stays held 800 ms after the job
    /// started: longer than the instances' skew (300 ms), shorter than the
    /// period (1 s).
    #[distributed_lock(
        key = "job:report",
        on_busy = "skip",
        hold_at_least = "800ms",
        manager = self.locks
    )]
    async fn report(&self, period: u64) -> Result<(), LockError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.log
            .lock()
            .expect("log")
            .entry(period)
            .or_default()
            .push(self.name);
        println!("period {period}: report written by instance {}", self.name);
        Ok(())
    }
}

fn periods() -> Result<u64, String> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => Ok(10),
        (Some("--periods"), Some(n)) => n
            .parse()
            .map_err(|_| format!("--periods needs a whole number, not `{n}`")),
        _ => Err("use --periods N".to_owned()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let periods = periods()?;
    let own_server = std::env::var("REDIS_URL").is_err().then(RedisServer::start);
    let url = match &own_server {
        Some(server) => server.url(),
        None => std::env::var("REDIS_URL")?,
    };
    let log: Log = Arc::default();
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut fleet = Vec::new();
    for name in 0..INSTANCES {
        let instance = Instance {
            name,
            locks: LockManager::connect(&url).await?,
            log: Arc::clone(&log),
        };
        fleet.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(start + SKEW * name, Duration::from_secs(1));
            for period in 0..periods {
                ticks.tick().await;
                instance.report(period).await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for instance in fleet {
        instance.await??;
    }

    let log = log.lock().expect("log");
    let wrong: Vec<_> = (0..periods)
        .filter(|period| log.get(period).map_or(0, Vec::len) != 1)
        .collect();
    println!(
        "{periods} periods, {INSTANCES} instances firing each: {} ran exactly once",
        periods - wrong.len() as u64
    );
    if !wrong.is_empty() {
        return Err(format!("periods {wrong:?} did not run exactly once").into());
    }
    Ok(())
}
