//! Durations and counts from configuration: a `const`, a field, a function
//! call, any `Duration` or `u32` expression, next to literals.
use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager};

const HOLD: Duration = Duration::from_secs(60);

fn limit() -> u32 {
    8
}

struct Settings {
    ttl: Duration,
    permits: u32,
    replicas: u32,
}

struct Service {
    locks: LockManager,
    settings: Settings,
}

impl Service {
    #[distributed_lock(key = "job", ttl = self.settings.ttl, wait = Duration::from_millis(250), manager = self.locks)]
    async fn configured(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "job:nightly", on_busy = "skip", hold_at_least = HOLD, manager = self.locks)]
    async fn nightly(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "api", permits = self.settings.permits, ttl = "10s", manager = self.locks)]
    async fn limited(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(
        key = "job:replicated",
        ttl = "10s",
        min_replicas = self.settings.replicas,
        replica_timeout = "100ms",
        manager = self.locks
    )]
    async fn replicated(&self) -> Result<(), LockError> {
        Ok(())
    }
}

#[distributed_lock(key = "api:{name}", permits = limit(), wait = timeout_for(name))]
async fn called(name: &str) -> Result<(), LockError> {
    Ok(())
}

fn timeout_for(name: &str) -> Duration {
    Duration::from_millis(name.len() as u64)
}

fn main() {}
