//! Where locks live. Every backend offers the same steps for every kind of
//! lease (take, release, renew, issue a fencing token, inspect, force, wait
//! for a release), so the engine, guards, watchdog and the macro never need
//! to know which backend they talk to, nor which kind a step is for: the
//! key says it ([`LockKey::kind`](crate::keys::LockKey)), and each backend
//! maps it to that kind's scripts or in-memory model in one file of its own
//! (`redis/kinds.rs`, `memory/kinds.rs`).

mod memory;
mod redis;
mod redlock;
mod sentinel;
mod state;
pub(crate) mod step;
pub(crate) mod wait_queue;

use std::time::Duration;

pub(crate) use self::memory::MemoryBackend;
pub(crate) use self::redis::connection::RedisConfig;
pub(crate) use self::redis::lock_delay::LockDelay;
pub(crate) use self::redis::place_refresh::{PlaceRefresh, PlacesSeen};
pub(crate) use self::redis::tls::TlsConfig;
pub(crate) use self::redis::RedisBackend;
pub(crate) use self::redlock::RedlockBackend;
pub(crate) use self::sentinel::discovery::{SentinelCredentials, Sentinels};
pub(crate) use self::sentinel::SentinelBackend;
pub(crate) use self::state::{Evicted, State, MOST_WAITERS_SHOWN};
pub(crate) use self::step::{millis, Attempt, Claim, Taking};

use crate::backend::wait_queue::WaitTicket;
use crate::check::{CheckReport, LockDelayState};
use crate::keys::LockKey;
use crate::token::OwnerToken;
use crate::LockError;

/// One of the lock stores.
pub(crate) enum Backend {
    /// One server, or a Redis Cluster. Boxed: with the `tls` feature its
    /// client holds its TLS settings inline, which makes it several times
    /// larger than the other variants.
    Redis(Box<RedisBackend>),
    Memory(MemoryBackend),
    Redlock(RedlockBackend),
    /// The primary that Redis Sentinel names, followed across failovers.
    Sentinel(SentinelBackend),
}

/// Runs one step on whichever backend `$backend` is: `$call` on a server
/// backend bound to `$server` (on Sentinel's current primary, whose failure
/// starts following a failover), `$in_memory` on the in-memory table bound
/// to `$memory`. The one place that matches on the backends' kinds for a
/// step.
macro_rules! dispatch {
    ($backend:expr, $server:ident => $call:expr, $memory:ident => $in_memory:expr) => {
        match $backend {
            Backend::Redis($server) => $call,
            Backend::Redlock($server) => Box::pin(async { $call }).await,
            Backend::Sentinel(sentinel) => {
                Box::pin(sentinel.on_primary(async |$server: &RedisBackend| $call)).await
            }
            Backend::Memory($memory) => Ok($in_memory),
        }
    };
}

impl Backend {
    /// One atomic attempt to take the lease of `claim` (of the key's kind)
    /// for its ttl, or report how long the blocking lease has left. With
    /// `replicas`, a granted lock must also reach that many replicas (the
    /// in-memory backend ignores it, Redlock refuses it). Blocked, a non-zero
    /// `place` keeps the waiter's place for that long (see [`Taking`]):
    /// a lock's place in the key's queue, so that a release hands it over
    /// in arrival order (one server; the others wake waiters instead), a
    /// writer's intent, which holds new readers back, or a reader's mark
    /// that readers wait, which gives them a turn when the writer leaves.
    /// Redlock refuses every kind but locks with `InvalidOptions`.
    pub(crate) async fn take(
        &self,
        claim: Claim<'_>,
        taking: Taking,
    ) -> Result<Attempt, LockError> {
        dispatch!(self,
            server => server.take(claim, taking).await,
            memory => memory.take(claim, taking))
    }

    /// Gives back the lease of `token` on `key` if it still holds it, and
    /// wakes waiters; `Ok(false)` if it was no longer ours. A waiting
    /// writer's intent goes too. A lock taken `after_wait` is released by
    /// the script, which also clears the record of its grant.
    pub(crate) async fn release(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        after_wait: bool,
    ) -> Result<bool, LockError> {
        dispatch!(self,
            server => server.release(key, token, after_wait).await,
            memory => memory.release(key, token))
    }

    /// Releases the lease at once where that needs no I/O (the in-memory
    /// table): gives it back, or within `hold_left` of its `hold_at_least`
    /// keeps it that long, and says whether it was still ours. `None` on the
    /// backends whose release must travel to a server.
    pub(crate) fn release_in_place(
        &self,
        key: &LockKey,
        token: &OwnerToken,
        hold_left: Option<Duration>,
    ) -> Option<bool> {
        let Backend::Memory(memory) = self else {
            return None;
        };
        Some(match hold_left {
            Some(left) => memory.renew(Claim {
                key,
                token,
                ttl_ms: millis(left),
            }),
            None => memory.release(key, token),
        })
    }

    /// Releases the lock of `claim` within its `hold_at_least`: keeps it for
    /// `claim.ttl_ms` (what is left of the hold) if `claim.token` still owns
    /// it, noting (where the backend keeps a record, see `LockKey::record`)
    /// that its holder released it; `Ok(false)` if it was no longer ours.
    pub(crate) async fn hold_down(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        dispatch!(self,
            server => server.hold_down(claim).await,
            memory => memory.renew(claim))
    }

    /// Extends the lease if `token` still owns the lock (or the permit of a
    /// semaphore); `Ok(false)` if it was no longer ours.
    pub(crate) async fn renew(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        dispatch!(self,
            server => server.renew(claim).await,
            memory => memory.renew(claim))
    }

    /// Confirms a lock that a release handed to the claim's token (extends
    /// it to the claim's ttl); `Ok(false)` if the grant had run out. On one
    /// server (Redis, Sentinel's primary, a Cluster's) one round trip, also
    /// when the server's script cache is empty; elsewhere (nothing else
    /// hands a lock over) a renewal.
    pub(crate) async fn confirm(&self, claim: Claim<'_>) -> Result<bool, LockError> {
        match self {
            Backend::Redis(server) => server.confirm(claim).await,
            Backend::Sentinel(sentinel) => {
                Box::pin(
                    sentinel.on_primary(async |server: &RedisBackend| server.confirm(claim).await),
                )
                .await
            }
            Backend::Memory(_) | Backend::Redlock(_) => self.renew(claim).await,
        }
    }

    /// One attempt on a lock, as [`take`](Self::take), that also issues the
    /// fencing token of the lock it takes (see [`fence`](Self::fence)): the
    /// token only when granted and issued to this claim. On one server
    /// (Redis, Sentinel's primary, a Cluster's) without `replicas`, one
    /// script call takes the lock and issues its token. Elsewhere (Redlock,
    /// in memory, a replicated acquisition) the token's request goes out
    /// beside the attempt, so both answers come back in one round trip; a
    /// request answered before the lock was taken gets no token (the lease
    /// asks again on request), and one that failed is dropped.
    pub(crate) async fn take_fenced(
        &self,
        claim: Claim<'_>,
        taking: Taking,
    ) -> Result<(Attempt, Option<u64>), LockError> {
        let in_one_call = taking.replicas.is_none();
        match self {
            Backend::Redis(server) if in_one_call => server.take_fenced(claim).await,
            Backend::Sentinel(sentinel) if in_one_call => {
                Box::pin(
                    sentinel
                        .on_primary(async |server: &RedisBackend| server.take_fenced(claim).await),
                )
                .await
            }
            _ => {
                // Boxed: two steps' states at once, on the backends
                // whose steps are large already.
                let (attempt, fence) =
                    Box::pin(async { tokio::join!(self.take(claim, taking), self.fence(claim)) })
                        .await;
                let attempt = attempt?;
                let fence = match (attempt, fence) {
                    (Attempt::Granted { .. }, Ok(fence)) => fence,
                    _ => None,
                };
                Ok((attempt, fence))
            }
        }
    }

    /// The next fencing token of `key`, issued only if `token` holds it:
    /// above every token issued for `key` before, by any holder, also after a
    /// restart from stale data (see `fence.lua`). `Ok(None)`: not ours (any
    /// more). `ttl_ms` is the lease's, which sets how long the counter is kept.
    pub(crate) async fn fence(&self, claim: Claim<'_>) -> Result<Option<u64>, LockError> {
        dispatch!(self,
            server => server.fence(claim).await,
            memory => memory.fence(claim))
    }

    /// Where the server that takes locks stands in its lock-delay now;
    /// `None` where none is kept (Redlock, a cluster, in memory, a manager
    /// that keeps none). Read through the names of `key`.
    pub(crate) async fn lock_delay_state(
        &self,
        key: &LockKey,
    ) -> Result<Option<LockDelayState>, LockError> {
        match self {
            Backend::Redis(redis) => redis.lock_delay_state(key).await,
            Backend::Sentinel(sentinel) => {
                Box::pin(sentinel.on_primary(async |primary| primary.lock_delay_state(key).await))
                    .await
            }
            Backend::Redlock(_) | Backend::Memory(_) => Ok(None),
        }
    }

    /// Checks the servers without taking a lock, using the names of `key`,
    /// which no lock uses (see `probe`); in memory there is nothing to check.
    pub(crate) async fn check(&self, key: &LockKey) -> Result<CheckReport, LockError> {
        match self {
            Backend::Redis(redis) => redis.check(key, false).await,
            Backend::Redlock(redlock) => redlock.check(key).await,
            Backend::Sentinel(sentinel) => sentinel.check(key).await,
            Backend::Memory(_) => Ok(CheckReport::new("in memory")),
        }
    }

    /// Whether every name of one lock must share a hash slot (Redis Cluster).
    pub(crate) fn needs_hash_tags(&self) -> bool {
        matches!(self, Backend::Redis(redis) if redis.needs_hash_tags())
    }

    /// Whether waiters queue in the backend and a release hands the lock to
    /// the first of them (single Redis server, Cluster, or Sentinel's primary);
    /// otherwise a release wakes waiters, who then try again.
    pub(crate) fn hands_off(&self) -> bool {
        matches!(self, Backend::Redis(_) | Backend::Sentinel(_))
    }

    /// Refreshes the places of this process's queued waiters on `key` in
    /// one call (see `places`). The backends where waiters are woken, not
    /// queued, keep no places: nothing to see there.
    pub(crate) async fn refresh_places(
        &self,
        key: &LockKey,
        refresh: PlaceRefresh<'_>,
    ) -> Result<PlacesSeen, LockError> {
        match self {
            Backend::Redis(redis) => redis.refresh_places(key, refresh).await,
            Backend::Sentinel(sentinel) => {
                sentinel
                    .on_primary(async |redis: &RedisBackend| {
                        redis.refresh_places(key, refresh).await
                    })
                    .await
            }
            Backend::Memory(_) | Backend::Redlock(_) => Ok(PlacesSeen::default()),
        }
    }

    /// How many waiters of this process are queued for `key` now.
    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        match self {
            Backend::Redis(redis) => redis.local_waiters(key),
            Backend::Memory(memory) => memory.local_waiters(key),
            Backend::Redlock(redlock) => redlock.local_waiters(key),
            Backend::Sentinel(sentinel) => sentinel.local_waiters(key),
        }
    }

    /// What the backend holds for `key` now, for operators: its holder,
    /// member leases, waiters and fencing counter, as its kind has them.
    /// Reads only. Redlock refuses every kind but locks.
    pub(crate) async fn inspect(&self, key: &LockKey) -> Result<State, LockError> {
        dispatch!(self,
            server => server.inspect(key).await,
            memory => memory.inspect(key))
    }

    /// Frees `key` whoever holds it (a lock, every permit, a read/write
    /// lock's writer and readers) and raises its fencing counter above
    /// every token issued before; waiters are woken, a read/write lock's
    /// waiting writers keep their intents. Redlock refuses every kind but
    /// locks.
    pub(crate) async fn force(&self, key: &LockKey) -> Result<Evicted, LockError> {
        dispatch!(self,
            server => server.force(key).await,
            memory => memory.force(key))
    }

    /// Whether this backend holds only plain locks: Redlock, which refuses
    /// the other kinds (see [`Kind::on_redlock`](crate::kinds::kind::Kind)).
    pub(crate) fn holds_only_plain_locks(&self) -> bool {
        matches!(self, Backend::Redlock(_))
    }

    /// Backend keys matching the glob `pattern` (the in-memory backend
    /// returns every held lock key and every lease set with a live lease:
    /// the caller filters).
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        dispatch!(self,
            server => server.scan(pattern).await,
            memory => memory.held_keys())
    }

    /// Which server the releases that wake waiters come from: it changes
    /// when the Sentinel backend follows a failover to a new primary, and
    /// then a waiter must watch again (the old primary's releases no longer
    /// concern it). Constant on the other backends, whose notifications
    /// follow their servers by themselves (see `notify`).
    pub(crate) fn notifier(&self) -> u64 {
        match self {
            Backend::Sentinel(sentinel) => sentinel.generation(),
            _ => 0,
        }
    }

    /// Registers interest in releases of `key`; once this returns, a release wakes the ticket.
    pub(crate) async fn watch(&self, key: &LockKey) -> WaitTicket {
        match self {
            Backend::Redis(redis) => redis.watch(key).await,
            Backend::Memory(memory) => memory.watch(key),
            Backend::Redlock(redlock) => redlock.watch(key).await,
            Backend::Sentinel(sentinel) => sentinel.watch(key).await,
        }
    }
}

/// Renewals of many leases in one script call per server; declared after
/// `dispatch!`, which it uses.
pub(crate) mod batch;
