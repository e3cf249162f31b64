//! The in-process backend: same semantics as Redis (TTL, owner tokens,
//! fencing, wake-on-release), for unit tests and single-process services.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{Attempt, LockKey};
use crate::wait_queue::{WaitQueues, WaitTicket};
use crate::OwnerToken;

struct Held {
    token: OwnerToken,
    expires: Instant,
}

#[derive(Default)]
struct Table {
    locks: HashMap<String, Held>,
    fences: HashMap<String, u64>,
}

/// Locks kept in this process's memory.
pub(crate) struct MemoryBackend {
    table: Mutex<Table>,
    queues: Arc<WaitQueues>,
}

impl MemoryBackend {
    pub(crate) fn new() -> Self {
        MemoryBackend {
            table: Mutex::new(Table::default()),
            queues: Arc::new(WaitQueues::new()),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn try_lock(&self, key: &LockKey, token: &OwnerToken, ttl_ms: u64) -> Attempt {
        let now = Instant::now();
        let mut table = self.table();
        if let Some(held) = table.locks.get(&key.lock) {
            if held.expires > now {
                return Attempt::Busy {
                    remaining: Some(held.expires - now),
                };
            }
        }
        let held = Held {
            token: token.clone(),
            expires: now + Duration::from_millis(ttl_ms),
        };
        table.locks.insert(key.lock.clone(), held);
        let stored = table.fences.get(&key.fence).copied().unwrap_or(0);
        let fence = (stored + 1).max(wall_clock_micros());
        table.fences.insert(key.fence.clone(), fence);
        Attempt::Acquired { fence }
    }

    pub(crate) fn unlock(&self, key: &LockKey, token: &OwnerToken) -> bool {
        let owned = {
            let mut table = self.table();
            let owned = table
                .locks
                .get(&key.lock)
                .is_some_and(|held| held.token == *token && held.expires > Instant::now());
            if owned {
                table.locks.remove(&key.lock);
            }
            owned
        };
        if owned {
            self.queues.wake_one(&key.lock);
        }
        owned
    }

    pub(crate) fn renew(&self, key: &LockKey, token: &OwnerToken, ttl_ms: u64) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        match table.locks.get_mut(&key.lock) {
            Some(held) if held.token == *token && held.expires > now => {
                held.expires = now + Duration::from_millis(ttl_ms);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.queues.waiters(&key.lock)
    }

    pub(crate) fn watch(&self, key: &LockKey) -> WaitTicket {
        self.queues.join(&key.lock)
    }
}

fn wall_clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}
