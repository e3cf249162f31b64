//! What operators ask of a lock in production: who holds it, since when and
//! until when, who waits; which locks are held; and, as a last resort,
//! freeing one whoever holds it, with the evicted holder fenced off. The same
//! questions of a semaphore (who holds its permits) and of a read/write lock
//! (its writer, readers and waiting writers), and the same last resort.
//!
//! The questions are methods of what they ask about:
//! [`LockManager::inspect`], [`LockManager::list`], [`LockManager::list_all`],
//! [`LockManager::force_release`], [`RwLock::inspect`],
//! [`RwLock::force_release`], [`Semaphore::inspect`] and
//! [`Semaphore::force_release`]. Their answers are the types of this module.

use std::time::Duration;

use crate::backend::{Evicted, MOST_WAITERS_SHOWN};
pub use crate::kinds::kind::LockKind;
use crate::kinds::kind::{Kind, Side};
use crate::token::Holder;
use crate::{LockDelayState, LockError, LockManager, RwLock, Semaphore};

/// Most user keys [`LockManager::list`] returns, and most locks
/// [`LockManager::list_all`] returns.
const MOST_LISTED: usize = 10_000;

/// One held lock that [`LockManager::list_all`] found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct ListedLock {
    /// The key, without namespace.
    pub key: String,
    /// Which of the key's locks is held.
    pub kind: LockKind,
}

/// One lock as the backend holds it now; see [`LockManager::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key, without namespace.
    pub key: String,
    /// Whether someone holds the lock now.
    pub held: bool,
    /// Who holds it, as its owner token says; `None` when it is free or was
    /// taken by a client that records no identity.
    pub holder: Option<Holder>,
    /// How long the holder's lease has left in the backend, if held.
    pub remaining: Option<Duration>,
    /// The key's fencing counter: the last fencing token issued (or the
    /// value a forced release raised it to), while the backend keeps it.
    pub fencing_counter: Option<u64>,
    /// Waiters queued in the backend, in arrival order (single server,
    /// Sentinel, Cluster; at most 100 shown, see `queued_count`); those of
    /// clients that record no identity are left out.
    pub queued: Vec<Holder>,
    /// How many waiters are queued in the backend.
    pub queued_count: usize,
    /// How many of this process's tasks wait for the lock now.
    pub local_waiters: usize,
    /// How long ago the holder was granted the lock, by the server's clock,
    /// when it was granted after waiting in the backend's queue (single
    /// server, Sentinel, Cluster; kept a day). `None` for a holder that took
    /// the lock at its first attempt: it was granted when it asked
    /// (`Holder::acquired_at`).
    pub granted_ago: Option<Duration>,
    /// How long the holder waited in the backend's queue before it was
    /// granted the lock, by the server's clock; `None` as `granted_ago`, or
    /// when it was granted without having a place in the queue.
    pub waited: Option<Duration>,
    /// Whether the holder released the lock within its `hold_at_least`
    /// (single server, Sentinel, Cluster): it is kept until the hold ends,
    /// and that expiry is the hold's designed end, not a holder that stopped
    /// renewing.
    pub released: bool,
}

/// One live lease of a semaphore (a permit) or of a read/write lock (a
/// reader, or the writer), as the backend holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// Who holds it, as its owner token says; `None` for a client that
    /// records no identity.
    pub holder: Option<Holder>,
    /// How long the lease has left in the backend.
    pub remaining: Duration,
}

/// A semaphore as the backend holds it now; see [`Semaphore::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The key, without namespace.
    pub key: String,
    /// The permits held now, earliest lease end first (at most 100; see
    /// `held`).
    pub holders: Vec<LeaseInfo>,
    /// How many permits are held now. N is not stored in the backend: each
    /// acquisition counts these against its own N.
    pub held: usize,
    /// How many of this process's tasks wait for a permit now.
    pub local_waiters: usize,
}

/// A read/write lock as the backend holds it now; see
/// [`RwLock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// The key, without namespace.
    pub key: String,
    /// The writer holding it, if one does.
    pub writer: Option<LeaseInfo>,
    /// The readers holding it, earliest lease end first (at most 100; see
    /// `reader_count`).
    pub readers: Vec<LeaseInfo>,
    /// How many readers hold it.
    pub reader_count: usize,
    /// Writers waiting for it (their live intents, which hold new readers
    /// back), in every process.
    pub writers_waiting: usize,
    /// The writers' fencing counter: the last writer's fencing token, while
    /// the backend keeps it.
    pub fencing_counter: Option<u64>,
    /// How many of this process's tasks wait for it now, readers and
    /// writers.
    pub local_waiters: usize,
}

/// What [`LockManager::force_release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedRelease {
    /// The key, without namespace.
    pub key: String,
    /// Whether someone held the lock.
    pub was_held: bool,
    /// Who held it, if its token named them.
    pub evicted: Option<Holder>,
    /// The key's fencing counter after the release: above every fencing
    /// token issued before it. Storage that has seen this value (or any
    /// later holder's token) rejects the evicted holder's writes.
    pub fencing_counter: u64,
}

/// What [`Semaphore::force_release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedSemaphoreRelease {
    /// The key, without namespace.
    pub key: String,
    /// The evicted permits' holders that their tokens name, earliest lease
    /// end first (at most 100; see `evicted_count`).
    pub evicted: Vec<Holder>,
    /// How many permits were held and are now taken back.
    pub evicted_count: usize,
}

/// What [`RwLock::force_release`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedRwRelease {
    /// The key, without namespace.
    pub key: String,
    /// Whether a writer held the lock.
    pub writer_was_held: bool,
    /// The evicted writer, if its token named it.
    pub evicted_writer: Option<Holder>,
    /// The evicted readers that their tokens name, earliest lease end first
    /// (at most 100; see `evicted_reader_count`).
    pub evicted_readers: Vec<Holder>,
    /// How many readers held the lock.
    pub evicted_reader_count: usize,
    /// The writers' fencing counter after the release: above every fencing
    /// token issued to a writer before it. Storage that has seen this value
    /// (or any later writer's token) rejects the evicted writer's writes.
    pub fencing_counter: u64,
}

impl LockManager {
    /// The name this manager records as its locks' holder (see
    /// `LockManagerBuilder::name`).
    pub fn name(&self) -> &str {
        self.identity().name()
    }

    /// The lock on `key` as the backend holds it now: holder (manager name,
    /// host, pid, label, when it was acquired, its ttl), remaining lease,
    /// fencing counter and waiters. One round trip (Redlock: one to every
    /// node; the holder is the one a quorum names). Reads only.
    pub async fn inspect(&self, key: &str) -> Result<LockInfo, LockError> {
        let lock_key = self.lock_key(key);
        let state = self.backend().inspect(&lock_key).await?;
        let queued = state
            .queued
            .iter()
            .take(MOST_WAITERS_SHOWN)
            .filter_map(|token| Holder::from_token(token))
            .collect();
        Ok(LockInfo {
            key: key.to_owned(),
            held: state.holder.is_some(),
            holder: state.holder.as_deref().and_then(Holder::from_token),
            remaining: state.remaining,
            fencing_counter: state.fence,
            queued,
            queued_count: state.queued_count,
            local_waiters: self.backend().local_waiters(&lock_key),
            granted_ago: state.granted_ago.filter(|_| state.holder.is_some()),
            waited: state.waited.filter(|_| state.holder.is_some()),
            released: state.released,
        })
    }

    /// Where the server this manager takes locks on stands in its lock-delay
    /// (see [`LockManagerBuilder::lock_delay`](crate::LockManagerBuilder::lock_delay)),
    /// read as [`check`](Self::check) reads it but alone: `Running { left }`
    /// while it grants nothing after a promotion or a restart, `Pending`
    /// when its delay starts at the next grant or renewal asked of it,
    /// `None` when it grants as usual or no delay is kept there (Redlock,
    /// Redis Cluster, in memory, `risk_two_holders_after_failover`). What
    /// `dlock show` prints. Reads only.
    pub async fn lock_delay_state(&self) -> Result<Option<LockDelayState>, LockError> {
        let names = self.lock_key("leasehold-lock-delay");
        self.backend().lock_delay_state(&names).await
    }

    /// The keys (without namespace) of the locks held now whose key matches
    /// the glob `pattern` (`*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\` escapes;
    /// `*` lists all), sorted, at most 10 000. Walks the keyspace with
    /// `SCAN`, never `KEYS`, on the server, every Redlock node or every
    /// cluster primary; a lock that is taken or freed meanwhile may or may
    /// not be listed.
    pub async fn list(&self, pattern: &str) -> Result<Vec<String>, LockError> {
        let keys = self.key_space();
        let names = self.backend().scan(&keys.scan_pattern(pattern)).await?;
        let mut users: Vec<String> = names
            .iter()
            .filter_map(|name| keys.user_key_of(name))
            .filter(|user| glob_match(pattern.as_bytes(), user.as_bytes()))
            .map(str::to_owned)
            .collect();
        users.sort_unstable();
        users.dedup();
        users.truncate(MOST_LISTED);
        Ok(users)
    }

    /// Every held lock, of every kind, whose key matches the glob `pattern`
    /// (as [`list`](Self::list) matches it), sorted by key then kind, at
    /// most 10 000: plain locks, read/write locks held by a writer or by
    /// readers, semaphores with a permit held. One key held as two kinds is
    /// listed twice. Walks the keyspace with `SCAN`, never `KEYS`, once, on
    /// the server or every cluster primary; a lock taken or freed meanwhile
    /// may or may not be listed. Redlock, which refuses semaphores and
    /// read/write locks, lists plain locks only (on every node, as `list`).
    pub async fn list_all(&self, pattern: &str) -> Result<Vec<ListedLock>, LockError> {
        let keys = self.key_space();
        let names = self
            .backend()
            .scan(&keys.scan_pattern_every_kind(pattern))
            .await?;
        let plain_only = self.backend().holds_only_plain_locks();
        let mut listed: Vec<ListedLock> = names
            .iter()
            .filter_map(|name| keys.held_of(name))
            .filter(|(kind, _)| !plain_only || *kind == LockKind::Lock)
            .filter(|(_, user)| glob_match(pattern.as_bytes(), user.as_bytes()))
            .map(|(kind, user)| ListedLock {
                key: user.to_owned(),
                kind,
            })
            .collect();
        listed.sort_unstable();
        listed.dedup();
        listed.truncate(MOST_LISTED);
        Ok(listed)
    }

    /// Frees the lock on `key` whoever holds it: for operators, when a
    /// holder is stuck and its lease keeps being renewed. The fencing
    /// counter is raised above every token issued so far (and returned), so
    /// the evicted holder's later writes are rejected by fenced storage; its
    /// next renewal fails (a holder of this manager learns it at once) and
    /// its body is cancelled as for any lost lease.
    /// Waiters are woken and the lock goes to the next of them. Logged at
    /// warn.
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease, LockError> {
        let lock_key = self.lock_key(key);
        let ours = self.seats().leases_of(lock_key.lock());
        let evicted = self.backend().force(&lock_key).await?;
        self.seats().evicted(lock_key.lock(), ours);
        let holder = evicted.holder.as_deref().and_then(Holder::from_token);
        tracing::warn!(
            key,
            was_held = evicted.holder.is_some(),
            evicted_manager = holder.as_ref().map(|holder| holder.manager.as_str()),
            evicted_pid = holder.as_ref().map(|holder| holder.pid),
            fencing_counter = evicted.fence,
            "lock released by force"
        );
        Ok(ForcedRelease {
            key: key.to_owned(),
            was_held: evicted.holder.is_some(),
            evicted: holder,
            fencing_counter: evicted.fence,
        })
    }
}

impl RwLock {
    /// This read/write lock as the backend holds it now: its writer,
    /// its readers (each with its own holder and remaining lease), how many
    /// writers wait, and the writers' fencing counter. One round trip;
    /// reads only. Redlock refuses with `InvalidOptions`, as it refuses
    /// read/write locks.
    pub async fn inspect(&self) -> Result<RwLockInfo, LockError> {
        let (manager, key) = (self.manager(), self.key());
        let writer_key = manager.key_space().key(Kind::ReadWrite(Side::Write), key);
        let state = manager.backend().inspect(&writer_key).await?;
        let reader_key = manager.key_space().key(Kind::ReadWrite(Side::Read), key);
        let local_waiters = manager.backend().local_waiters(&writer_key)
            + manager.backend().local_waiters(&reader_key);
        Ok(RwLockInfo {
            key: key.to_owned(),
            writer: state
                .holder
                .clone()
                .zip(state.remaining)
                .as_ref()
                .map(lease_info),
            readers: state.members.iter().map(lease_info).collect(),
            reader_count: state.member_count,
            writers_waiting: state.queued_count,
            fencing_counter: state.fence,
            local_waiters,
        })
    }

    /// Frees this read/write lock whoever holds it: its writer and
    /// every reader. The writers' fencing counter is raised above every
    /// writer's token issued so far (and returned), so the evicted writer's
    /// later writes are rejected by fenced storage. Each evicted holder's
    /// next renewal is refused and its body is cancelled as for any lost
    /// lease. Writers waiting for the lock keep their places (their
    /// intents), so they take it before new readers; waiters are woken.
    /// Logged at warn. One atomic round trip; Redlock refuses with
    /// `InvalidOptions`, as it refuses read/write locks.
    pub async fn force_release(&self) -> Result<ForcedRwRelease, LockError> {
        let (manager, key) = (self.manager(), self.key());
        let rw_key = manager.key_space().key(Kind::ReadWrite(Side::Write), key);
        let ours = manager.seats().leases_of(rw_key.lock());
        let evicted = manager.backend().force(&rw_key).await?;
        manager.seats().evicted(rw_key.lock(), ours);
        let writer = evicted.holder.as_deref().and_then(Holder::from_token);
        tracing::warn!(
            key,
            writer_was_held = evicted.holder.is_some(),
            evicted_writer = writer.as_ref().map(|holder| holder.manager.as_str()),
            evicted_readers = evicted.member_count,
            fencing_counter = evicted.fence,
            "read/write lock released by force"
        );
        Ok(ForcedRwRelease {
            key: key.to_owned(),
            writer_was_held: evicted.holder.is_some(),
            evicted_writer: writer,
            evicted_readers: named_holders(&evicted),
            evicted_reader_count: evicted.member_count,
            fencing_counter: evicted.fence,
        })
    }
}

impl Semaphore {
    /// This semaphore as the backend holds it now: each permit's holder and
    /// remaining lease, and how many are held. One round trip; reads only.
    /// Redlock refuses with `InvalidOptions`, as it refuses semaphores.
    pub async fn inspect(&self) -> Result<SemaphoreInfo, LockError> {
        let manager = self.manager();
        let key = manager.key_space().key(self.kind(), self.key());
        let state = manager.backend().inspect(&key).await?;
        Ok(SemaphoreInfo {
            key: self.key().to_owned(),
            holders: state.members.iter().map(lease_info).collect(),
            held: state.member_count,
            local_waiters: manager.backend().local_waiters(&key),
        })
    }

    /// Takes back every permit of this semaphore whoever holds them: for
    /// operators, when holders are stuck and keep renewing. Each evicted
    /// holder's next renewal is refused and its body is cancelled as for any
    /// lost lease; semaphores have no fencing tokens, so work it already
    /// has in flight is not stopped. Every waiter is woken. Logged at warn.
    /// One atomic round trip; Redlock refuses with `InvalidOptions`, as it
    /// refuses semaphores.
    pub async fn force_release(&self) -> Result<ForcedSemaphoreRelease, LockError> {
        let manager = self.manager();
        let key = manager.key_space().key(self.kind(), self.key());
        let ours = manager.seats().leases_of(key.lock());
        let evicted = manager.backend().force(&key).await?;
        manager.seats().evicted(key.lock(), ours);
        tracing::warn!(
            key = self.key(),
            evicted_permits = evicted.member_count,
            "semaphore released by force"
        );
        Ok(ForcedSemaphoreRelease {
            key: self.key().to_owned(),
            evicted: named_holders(&evicted),
            evicted_count: evicted.member_count,
        })
    }
}

/// The holders that the evicted member leases' owner tokens name.
fn named_holders(evicted: &Evicted) -> Vec<Holder> {
    evicted
        .members
        .iter()
        .filter_map(|token| Holder::from_token(token))
        .collect()
}

/// A lease as the backend reported it: owner token and remaining time.
fn lease_info((token, remaining): &(String, Duration)) -> LeaseInfo {
    LeaseInfo {
        holder: Holder::from_token(token),
        remaining: *remaining,
    }
}

/// Whether `text` matches the glob `pattern`, as Redis matches keys: `*` any
/// run, `?` any one byte, `[...]` a set (ranges `a-z`, `^` negates), `\`
/// quotes the next byte.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // Where to resume after the last `*`: (pattern index after it, text index).
    let mut star: Option<(usize, usize)> = None;
    let (mut p, mut t) = (0, 0);
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => match_set(pattern, p, text[t]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&byte) => (byte == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((after_star, from))) => {
                p = after_star;
                t = from + 1;
                star = Some((after_star, from + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// Matches `byte` against the set starting at `pattern[open]` (a `[`):
/// the index after the set's `]` if it matches, `None` if not. A set with
/// no closing `]` runs to the end of the pattern.
fn match_set(pattern: &[u8], open: usize, byte: u8) -> Option<usize> {
    let mut i = open + 1;
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        let low = if pattern[i] == b'\\' && i + 1 < pattern.len() {
            i += 1;
            pattern[i]
        } else {
            pattern[i]
        };
        if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() && pattern[i + 2] != b']' {
            let high = pattern[i + 2];
            matched |= (low.min(high)..=low.max(high)).contains(&byte);
            i += 3;
        } else {
            matched |= low == byte;
            i += 1;
        }
    }
    (matched != negated).then_some((i + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    fn matches(pattern: &str, text: &str) -> bool {
        glob_match(pattern.as_bytes(), text.as_bytes())
    }

    #[test]
    fn globs_match_as_redis_matches_keys() {
        assert!(matches("*", ""));
        assert!(matches("*", "stock:42"));
        assert!(matches("stock:*", "stock:42"));
        assert!(!matches("stock:*", "order:42"));
        assert!(matches("stock:?2", "stock:42"));
        assert!(!matches("stock:?", "stock:42"));
        assert!(matches("*:4*", "stock:42"));
        assert!(matches("s[tx]ock:*", "stock:1"));
        assert!(!matches("s[^t]ock:*", "stock:1"));
        assert!(matches("k[0-9]", "k7"));
        assert!(!matches("k[0-9]", "ka"));
        assert!(matches("a\\*b", "a*b"));
        assert!(!matches("a\\*b", "axb"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
        assert!(matches("{x}*", "{x}y"));
    }

    #[test]
    fn odd_patterns_never_panic() {
        for pattern in ["[", "[^", "\\", "[a-", "[]", "***", "?*?", "[\\]]"] {
            for text in ["", "a", "]", "-", "\\"] {
                let _ = matches(pattern, text);
            }
        }
    }
}
