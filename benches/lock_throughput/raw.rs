//! The baseline: what a careful user would write with redis-rs alone.
//! `SET key token NX PX ttl`, retried every millisecond while the key is
//! busy, and an EVALSHA of a compare-and-delete script to release, on one
//! multiplexed connection. No fencing, no renewal, no wake-ups.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis::aio::MultiplexedConnection;
use redis::{Script, Value};

use crate::limits::{TTL, WAIT};

/// Pause between two attempts on a busy lock.
const POLL: Duration = Duration::from_millis(1);

/// Compare-and-delete.
/// KEYS[1] lock key, ARGV[1] owner token; returns 1 when deleted, 0 when not ours.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The baseline client. Clones share the connection and the token source.
#[derive(Clone)]
pub struct Raw {
    connection: MultiplexedConnection,
    release: Arc<Script>,
    tokens: Arc<TokenSource>,
}

/// Unique owner tokens: a per-process prefix and a counter.
struct TokenSource {
    prefix: u64,
    next: AtomicU64,
}

/// A lock the baseline holds.
pub struct RawLock {
    key: String,
    token: String,
}

impl Raw {
    /// Connects to `url`; panics if it cannot.
    pub async fn connect(url: &str) -> Raw {
        let connection = redis::Client::open(url)
            .expect("raw: invalid Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("raw: cannot connect");
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Raw {
            connection,
            release: Arc::new(Script::new(RELEASE)),
            tokens: Arc::new(TokenSource {
                prefix: (u64::from(std::process::id()) << 32) ^ started.as_nanos() as u64,
                next: AtomicU64::new(0),
            }),
        }
    }

    /// `SET NX PX` on `raw:{key}`, retried every [`POLL`] while someone else
    /// holds it; panics after [`WAIT`] (a bench run that stalls is broken).
    pub async fn acquire(&mut self, key: &str) -> RawLock {
        let key = format!("raw:{key}");
        let token = format!(
            "{:016x}{:016x}",
            self.tokens.prefix,
            self.tokens.next.fetch_add(1, Ordering::Relaxed)
        );
        let deadline = Instant::now() + WAIT;
        loop {
            let reply: Value = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query_async(&mut self.connection)
                .await
                .unwrap_or_else(|err| panic!("raw: SET `{key}`: {err}"));
            if reply != Value::Nil {
                return RawLock { key, token };
            }
            if Instant::now() >= deadline {
                panic!("raw: `{key}` stayed busy for {WAIT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Compare-and-delete; panics if the lock was no longer ours.
    pub async fn release(&mut self, lock: RawLock) {
        let deleted: i64 = self
            .release
            .key(&lock.key)
            .arg(&lock.token)
            .invoke_async(&mut self.connection)
            .await
            .unwrap_or_else(|err| panic!("raw: release `{}`: {err}", lock.key));
        if deleted != 1 {
            panic!("raw: `{}` was no longer ours at release", lock.key);
        }
    }
}
