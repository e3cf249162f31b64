//! A job that runs once per period whatever the instances' phases: 3
//! service instances (one `LockManager` each, as if each were its own
//! process) fire the same digest from a plain `tokio::time::interval` loop
//! every 700 ms, their first ticks 0, 900 and 1 800 ms apart, unaligned to
//! the job's period of 2 s. `period = "2s"` puts the period's start into
//! the key (`job:digest@1765105200`) and keeps that key until a period
//! after the period's end, so whichever instance fires first in a period
//! runs it and every later tick of that period, on any instance, skips.
//! With `hold_at_least` alone, an instance firing more than the hold after
//! another would run the period again.
//!
//! Run: `cargo run --example periodic_job` (8 s; `--seconds N`). Starts its
//! own temporary redis-server unless `REDIS_URL` is set. Exits with an
//! error if any period ran more than once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{distributed_lock, held_locks, LockError, LockManager};
use leasehold_testkit::RedisServer;

/// Instances, how often each one's interval ticks, and how far apart
/// their first ticks are.
const INSTANCES: u32 = 3;
const TICK: Duration = Duration::from_millis(700);
const PHASE: Duration = Duration::from_millis(900);

/// Which instances ran each period's key.
type Log = Arc<Mutex<BTreeMap<String, Vec<u32>>>>;

struct Instance {
    name: u32,
    locks: LockManager,
    log: Log,
}

impl Instance {
    /// The digest of the current 2 s period; `Ok(())` too when skipped.
    #[distributed_lock(
        key = "job:digest",
        period = "2s",
        on_busy = "skip",
        manager = self.locks
    )]
    async fn digest(&self) -> Result<(), LockError> {
        let key = held_locks().join(",");
        println!("{key}: digest written by instance {}", self.name);
        self.log
            .lock()
            .expect("log")
            .entry(key)
            .or_default()
            .push(self.name);
        Ok(())
    }
}

fn seconds() -> Result<u64, String> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => Ok(8),
        (Some("--seconds"), Some(n)) => n
            .parse()
            .map_err(|_| format!("--seconds needs a whole number, not `{n}`")),
        _ => Err("use --seconds N".to_owned()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = seconds()?;
    let own_server = std::env::var("REDIS_URL").is_err().then(RedisServer::start);
    let url = match &own_server {
        Some(server) => server.url(),
        None => std::env::var("REDIS_URL")?,
    };
    let log: Log = Arc::default();
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut fleet = Vec::new();
    for name in 0..INSTANCES {
        let instance = Instance {
            name,
            locks: LockManager::connect(&url).await?,
            log: Arc::clone(&log),
        };
        fleet.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(start + PHASE * name, TICK);
            while ticks.tick().await < end {
                instance.digest().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for instance in fleet {
        instance.await??;
    }

    let log = log.lock().expect("log");
    let twice: Vec<_> = log.iter().filter(|(_, runs)| runs.len() > 1).collect();
    println!(
        "{} periods ran, {} of them more than once",
        log.len(),
        twice.len()
    );
    if !twice.is_empty() {
        return Err(format!("periods ran more than once: {twice:?}").into());
    }
    Ok(())
}
