//! The peers: the Rust lock crates a user would pick instead of ours, each
//! run through its own idiomatic cycle on the same server as ours and raw.
//!
//! - **rslock** 0.10 (redis-rs 1.8, as ours): Redlock over the one server.
//!   `acquire(key, ttl)` loops on `lock` until it gets the key, and the
//!   guard's `release` unlocks it. No watchdog: a body longer than the ttl
//!   loses the lock silently.
//! - **distributed-lock-redis** 0.2 (fred 9): a port of madelson's
//!   DistributedLock, with a watchdog: `acquire(Some(wait))` on the lock the
//!   provider creates, a background task per handle extending it, and the
//!   handle's `release`. On one server its acquire is one `SET NX PX`, no
//!   waiting, so it runs only the uncontended workloads.
//!
//! Each keeps its keys under a prefix of its own, so no peer meets another's
//! lock.

use std::sync::Arc;

use distributed_lock_core::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_redis::{RedisLockHandle, RedisLockProvider};

use crate::limits::{TTL, WAIT};

/// rslock's manager over the one server. Clones share its connection.
#[derive(Clone)]
pub struct Rslock {
    manager: rslock::LockManager,
}

/// A lock rslock holds.
pub struct RslockHeld(rslock::LockGuard);

impl Rslock {
    /// rslock on the server at `url`.
    pub fn connect(url: &str) -> Rslock {
        Rslock {
            manager: rslock::LockManager::new(vec![url.to_owned()]),
        }
    }

    /// `acquire` on `rslock:{key}`: loops until the key is ours.
    pub async fn acquire(&self, key: &str) -> RslockHeld {
        let resource = format!("rslock:{key}");
        let guard = tokio::time::timeout(WAIT, self.manager.acquire(resource.as_bytes(), TTL))
            .await
            .unwrap_or_else(|_| panic!("rslock: `{resource}` stayed busy for {WAIT:?}"))
            .unwrap_or_else(|err| panic!("rslock: acquire `{resource}`: {err}"));
        RslockHeld(guard)
    }

    /// The guard's release.
    pub async fn release(&self, held: RslockHeld) {
        held.0.release().await;
    }
}

/// distributed-lock-redis's provider on the one server. Clones share it.
#[derive(Clone)]
pub struct DistLock {
    provider: Arc<RedisLockProvider>,
}

impl DistLock {
    /// The provider on the server at `url`, its locks expiring after
    /// [`TTL`] unless extended.
    pub async fn connect(url: &str) -> DistLock {
        // Its defaults in proportion to our ttl: 30 s expiry, extended every
        // 10 s, and an acquisition that leaves less than 27 s given up. Its
        // acquire waits at most expiry − min_validity for the SET's reply, so
        // an expiry set alone (below the 27 s default) leaves it no time: the
        // SET lands, the reply is dropped, and the key stays held.
        let provider = RedisLockProvider::builder()
            .url(url)
            .expiry(TTL)
            .extension_cadence(TTL / 3)
            .min_validity(TTL * 9 / 10)
            .build()
            .await
            .unwrap_or_else(|err| panic!("distributed-lock-redis: cannot connect: {err}"));
        DistLock {
            provider: Arc::new(provider),
        }
    }

    /// `acquire(Some(WAIT))` on the lock named `dlr:{key}`.
    pub async fn acquire(&self, key: &str) -> RedisLockHandle {
        let name = format!("dlr:{key}");
        self.provider
            .create_lock(&name)
            .acquire(Some(WAIT))
            .await
            .unwrap_or_else(|err| panic!("distributed-lock-redis: acquire `{name}`: {err}"))
    }

    /// The handle's release, which also stops its extension task.
    pub async fn release(&self, handle: RedisLockHandle) {
        handle
            .release()
            .await
            .unwrap_or_else(|err| panic!("distributed-lock-redis: release: {err}"));
    }
}
