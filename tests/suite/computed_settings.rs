//! Attribute settings written as expressions (a field of configuration, a
//! `const`, a function call) instead of literals: each call computes them
//! once, before the lock is taken, and a value a literal could not have (a
//! zero ttl, hold or permit count, a ttl past the longest lease) fails that
//! call with `InvalidOptions` without taking the lock or running the body,
//! never with a panic. On the in-memory backend: nothing here depends on Redis.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{distributed_lock, LockError, LockManager, LockOptions};
use support::{is_free, is_held, long};

/// The hold of [`Service::report`], as a configuration constant.
const HOLD: Duration = Duration::from_millis(400);

/// What a service reads from its configuration file.
#[derive(Clone, Copy)]
struct Config {
    ttl: Duration,
    wait: Duration,
    hold: Duration,
    permits: u32,
    replicas: u32,
    replica_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ttl: Duration::from_secs(5),
            wait: Duration::ZERO,
            hold: Duration::from_millis(300),
            permits: 2,
            replicas: 1,
            replica_timeout: Duration::from_millis(100),
        }
    }
}

struct Service {
    locks: LockManager,
    config: Config,
    /// Calls of [`Service::ttl`].
    computed: AtomicUsize,
    /// Bodies that ran.
    ran: AtomicUsize,
}

impl Service {
    fn new(config: Config) -> Service {
        Service {
            locks: LockManager::in_memory(),
            config,
            computed: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
        }
    }

    /// The ttl, counting how often it is asked for.
    fn ttl(&self) -> Duration {
        self.computed.fetch_add(1, Ordering::SeqCst);
        self.config.ttl
    }

    /// Returns how often the ttl had been computed when the body ran.
    #[distributed_lock(key = "job:sync", ttl = self.ttl(), wait = self.config.wait, manager = self.locks)]
    async fn sync(&self) -> Result<usize, LockError> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(self.computed.load(Ordering::SeqCst))
    }

    #[distributed_lock(key = "job:report", hold_at_least = self.config.hold, manager = self.locks)]
    async fn report(&self) -> Result<(), LockError> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    #[distributed_lock(key = "job:export", hold_at_least = HOLD, wait = "0s", manager = self.locks)]
    async fn export(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[distributed_lock(key = "api:payments", permits = self.config.permits, manager = self.locks)]
    async fn pay(&self) -> Result<(), LockError> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    #[distributed_lock(
        key = "job:replicated",
        min_replicas = self.config.replicas,
        replica_timeout = self.config.replica_timeout,
        manager = self.locks
    )]
    async fn replicated(&self) -> Result<(), LockError> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// `result` is `InvalidOptions` naming `option`, and no body ran.
fn assert_refused<T: std::fmt::Debug>(
    service: &Service,
    result: Result<T, LockError>,
    option: &str,
) {
    match &result {
        Err(LockError::InvalidOptions(message)) => {
            assert!(message.contains(option), "{option}: {message}")
        }
        other => panic!("{option}: expected InvalidOptions, got {other:?}"),
    }
    assert_eq!(
        service.ran.load(Ordering::SeqCst),
        0,
        "{option}: no body ran"
    );
}

#[tokio::test]
async fn a_computed_ttl_is_evaluated_once_per_call_before_the_body() {
    let service = Service::new(Config::default());
    assert_eq!(service.sync().await.unwrap(), 1);
    assert_eq!(service.sync().await.unwrap(), 2);
    assert_eq!(service.computed.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_hold_from_a_field_or_a_const_keeps_the_key_after_the_body() {
    let service = Service::new(Config::default());
    service.report().await.unwrap();
    assert!(
        is_held(&service.locks, "job:report").await,
        "held for `hold`"
    );
    service.export().await.unwrap();
    assert!(
        is_held(&service.locks, "job:export").await,
        "held for `HOLD`"
    );
}

#[tokio::test]
async fn computed_permits_admit_that_many_holders() {
    let service = Service::new(Config::default());
    let semaphore = service.locks.semaphore("api:payments", 2);
    let first = semaphore.acquire(long()).await.unwrap();
    service
        .pay()
        .await
        .expect("the second of 2 permits is free");
    let second = semaphore.acquire(long()).await.unwrap();
    let full = service.pay().await;
    assert!(
        !matches!(full, Ok(()) | Err(LockError::InvalidOptions(_))),
        "both permits held: {full:?}"
    );
    drop((first, second));
}

#[tokio::test]
async fn a_zero_ttl_fails_the_call_before_the_lock_is_taken() {
    let service = Service::new(Config {
        ttl: Duration::ZERO,
        ..Config::default()
    });
    // Held elsewhere: an attempt on the lock would report it busy.
    let _rival = service
        .locks
        .acquire("job:sync", LockOptions::new())
        .await
        .unwrap();
    assert_refused(&service, service.sync().await, "ttl");
}

#[tokio::test]
async fn a_ttl_past_the_longest_lease_is_refused_not_a_panic() {
    let service = Service::new(Config {
        ttl: Duration::MAX,
        ..Config::default()
    });
    assert_refused(&service, service.sync().await, "ttl");
    assert!(is_free(&service.locks, "job:sync").await);
}

#[tokio::test]
async fn the_longest_wait_on_a_free_lock_is_not_a_panic() {
    let service = Service::new(Config {
        wait: Duration::MAX,
        ..Config::default()
    });
    assert_eq!(service.sync().await.unwrap(), 1);
}

#[tokio::test]
async fn a_zero_or_overlong_hold_is_refused() {
    for hold in [Duration::ZERO, Duration::MAX] {
        let service = Service::new(Config {
            hold,
            ..Config::default()
        });
        assert_refused(&service, service.report().await, "hold_at_least");
        assert!(is_free(&service.locks, "job:report").await, "{hold:?}");
    }
}

#[tokio::test]
async fn zero_permits_are_refused() {
    let service = Service::new(Config {
        permits: 0,
        ..Config::default()
    });
    assert_refused(&service, service.pay().await, "permits");
}

#[tokio::test]
async fn zero_replicas_or_a_zero_replica_timeout_are_refused() {
    let no_replicas = Service::new(Config {
        replicas: 0,
        ..Config::default()
    });
    assert_refused(&no_replicas, no_replicas.replicated().await, "min_replicas");
    let no_timeout = Service::new(Config {
        replica_timeout: Duration::ZERO,
        ..Config::default()
    });
    assert_refused(
        &no_timeout,
        no_timeout.replicated().await,
        "replica_timeout",
    );
}
