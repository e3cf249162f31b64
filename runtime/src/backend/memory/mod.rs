//! The in-process backend: same semantics as Redis (TTL, owner tokens,
//! fencing, wake-on-release), for unit tests and single-process services.
//!
//! Counting semaphores keep their holders, each with its own lease, in a
//! second table, with the semantics of `semaphore_acquire.lua`. A read/write
//! lock keeps its writer in the first table (under its writer key, as a
//! lock), and its readers and its waiting writers' intents in the second
//! (under their names), with the semantics of `rw_read_acquire.lua` and
//! `rw_write_acquire.lua`.
//!
//! Memory stays bounded under any number of distinct keys: like Redis, the
//! table forgets expired locks and fencing counters idle for longer than
//! their retention, and semaphores whose every lease ended. It is swept once it has doubled since the last sweep
//! (and holds at least [`MIN_SWEEP`] entries), so a sweep costs amortised
//! O(1) per acquisition and the table never exceeds twice its live entries
//! plus [`MIN_SWEEP`].

mod kinds;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::redis::rwlock::READERS_TURN;
use super::state::{Evicted, State, MOST_WAITERS_SHOWN};
use super::step::Renewal;
use super::step::{Attempt, Claim};
use crate::backend::wait_queue::{WaitQueues, WaitTicket};
use crate::keys::LockKey;
use crate::kinds::kind::Holding;
use crate::token::OwnerToken;

/// Longest counter retention (100 years, as in `fence.lua`), and the lease
/// of a ttl too long for an `Instant`: no ttl can overflow a deadline.
const FAR_FUTURE: Duration = Duration::from_secs(3_155_760_000);
/// Shortest time a fencing counter is kept after it last issued a token; the
/// retention is the larger of this and twice the lease, as in `fence.lua`.
const MIN_RETENTION: Duration = Duration::from_secs(600);
/// Entries below which the table is never swept.
const MIN_SWEEP: usize = 1024;

/// What the table keeps for one key: the holder, if any, and its counter.
struct Entry {
    holder: Option<Held>,
    /// The last fencing token issued for the key.
    fence: u64,
    /// When the counter may be forgotten if no token was issued since.
    retained_until: Instant,
}

struct Held {
    token: OwnerToken,
    expires: Instant,
}

struct Table {
    /// Keyed by the lock key.
    entries: HashMap<String, Entry>,
    /// Entry count at which the next acquisition sweeps the table.
    sweep_at: usize,
    /// The holders of each semaphore, keyed by its holder set's name.
    semaphores: HashMap<String, Vec<Held>>,
    /// Semaphore count at which the next permit taken sweeps `semaphores`.
    semaphore_sweep_at: usize,
    /// The readers' turn of each read/write lock (see `rw_read_acquire.lua`),
    /// keyed by its name, until when it lasts.
    turns: HashMap<String, (ReadersTurn, Instant)>,
}

/// What a read/write lock's readers' turn says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadersTurn {
    /// A blocked reader waits.
    Waiting,
    /// A writer left while one waited: readers get in first.
    Turn,
}

/// Locks kept in this process's memory.
pub(crate) struct MemoryBackend {
    table: Mutex<Table>,
    queues: Arc<WaitQueues>,
}

impl MemoryBackend {
    pub(crate) fn new() -> Self {
        MemoryBackend {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                sweep_at: MIN_SWEEP,
                semaphores: HashMap::new(),
                semaphore_sweep_at: MIN_SWEEP,
                turns: HashMap::new(),
            }),
            queues: Arc::new(WaitQueues::new()),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lock of `claim` if nobody holds it.
    fn take_lock(&self, claim: Claim<'_>) -> Attempt {
        self.take_lock_at(claim, Instant::now())
    }

    /// [`take_lock`](Self::take_lock) as if it ran at `now`.
    fn take_lock_at(&self, claim: Claim<'_>, now: Instant) -> Attempt {
        let Claim { key, token, .. } = claim;
        let mut table = self.table();
        if let Some(held) = table.held(key.lock(), now) {
            return Attempt::Busy {
                remaining: Some(held.expires - now),
            };
        }
        table.sweep_if_grown(now);
        table.set_holder(key.lock(), token, deadline(now, claim.ttl()), now);
        Attempt::GRANTED
    }

    /// The next fencing token of `key` if `token` holds it: max(last + 1,
    /// wall clock in µs), as `fence.lua` issues them.
    pub(crate) fn fence(&self, claim: Claim<'_>) -> Option<u64> {
        self.fence_at(claim, Instant::now())
    }

    /// [`fence`](Self::fence) as if it ran at `now`.
    fn fence_at(&self, claim: Claim<'_>, now: Instant) -> Option<u64> {
        let Claim { key, token, .. } = claim;
        let mut table = self.table();
        let entry = table
            .entries
            .get_mut(key.lock())
            .filter(|entry| entry.held_by(token, now))?;
        entry.fence = entry.fence.saturating_add(1).max(wall_clock_micros());
        entry.retained_until = deadline(now, retention(claim.ttl()));
        Some(entry.fence)
    }

    /// Removes `token` from the holder set `set` (a semaphore's, a
    /// read/write lock's readers or writers' intents); whether its lease was
    /// still live.
    fn release_permit(&self, set: &str, token: &OwnerToken) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        let Some(holders) = table.semaphores.get_mut(set) else {
            return false;
        };
        holders.retain(|held| held.expires > now);
        let before = holders.len();
        holders.retain(|held| held.token != *token);
        let released = holders.len() < before;
        if holders.is_empty() {
            table.semaphores.remove(set);
        }
        released
    }

    /// Extends `token`'s lease in the holder set `set`, if still live.
    fn renew_permit(&self, set: &str, claim: Claim<'_>) -> bool {
        let token = claim.token;
        let now = Instant::now();
        let mut table = self.table();
        let mine = table
            .semaphores
            .get_mut(set)
            .and_then(|holders| holders.iter_mut().find(|held| held.token == *token))
            .filter(|held| held.expires > now);
        match mine {
            Some(held) => {
                held.expires = deadline(now, claim.ttl());
                true
            }
            None => false,
        }
    }

    /// Frees the lock `key` if `token` holds it; whether it did.
    fn release_lock(&self, key: &LockKey, token: &OwnerToken) -> bool {
        let mut table = self.table();
        let now = Instant::now();
        match table.entries.get_mut(key.lock()) {
            Some(entry) if entry.held_by(token, now) => {
                entry.holder = None;
                true
            }
            _ => false,
        }
    }

    /// Extends the lease of `claim` if its token still holds it: as a
    /// key's holder or as a member of a lease set (see [`Holding`]).
    pub(crate) fn renew(&self, claim: Claim<'_>) -> bool {
        let Claim { key, token, .. } = claim;
        if key.kind.holding() == Holding::Member {
            return self.renew_permit(key.members(), claim);
        }
        let now = Instant::now();
        let mut table = self.table();
        match table.entries.get_mut(key.lock()) {
            Some(Entry {
                holder: Some(held), ..
            }) if held.token == *token && held.expires > now => {
                held.expires = deadline(now, claim.ttl());
                true
            }
            _ => false,
        }
    }

    pub(crate) fn local_waiters(&self, key: &LockKey) -> usize {
        self.queues.waiters(key.channel())
    }

    /// What the table holds under the names of `key`, whatever its kind:
    /// the key's holder and fencing counter, and its live member leases.
    fn inspect_names(&self, key: &LockKey) -> State {
        let now = Instant::now();
        let mut table = self.table();
        let members = table.live_members(key.members(), now);
        let held = table.held(key.lock(), now);
        State {
            holder: held.map(|held| held.token.as_str().to_owned()),
            remaining: held.map(|held| held.expires - now),
            members: members
                .iter()
                .take(MOST_WAITERS_SHOWN)
                .map(|(token, expires)| (token.as_str().to_owned(), *expires - now))
                .collect(),
            member_count: members.len(),
            fence: table
                .entries
                .get(key.lock())
                .map(|entry| entry.fence)
                .filter(|fence| *fence > 0),
            ..State::default()
        }
    }

    /// The names held now: lock keys with a live holder (a read/write
    /// lock's writer key among them) and holder sets with a live lease (a
    /// semaphore's, a read/write lock's readers or its writers' intents).
    pub(crate) fn held_keys(&self) -> Vec<String> {
        let now = Instant::now();
        let table = self.table();
        let locks = table
            .entries
            .keys()
            .filter(|lock| table.held(lock, now).is_some());
        let sets = table
            .semaphores
            .iter()
            .filter(|(_, holders)| holders.iter().any(|held| held.expires > now))
            .map(|(set, _)| set);
        let mut keys: Vec<String> = locks.chain(sets).cloned().collect();
        keys.sort_unstable();
        keys
    }

    pub(crate) fn watch(&self, key: &LockKey) -> WaitTicket {
        self.queues.join(key.channel())
    }

    /// Renews each lease of a batch in place; see `batch`.
    pub(crate) fn renew_batch(&self, claims: &[Claim<'_>]) -> Vec<Renewal> {
        claims
            .iter()
            .map(|claim| Renewal::from_server(self.renew(*claim)))
            .collect()
    }
}

impl Table {
    /// The entry of `lock`, a new one (free, counter 0) if it has none.
    fn entry(&mut self, lock: &str, now: Instant) -> &mut Entry {
        self.entries
            .entry(lock.to_owned())
            .or_insert_with(|| Entry {
                holder: None,
                fence: 0,
                retained_until: now,
            })
    }

    /// Makes `token` the holder of `lock` until `expires`, keeping its
    /// fencing counter.
    fn set_holder(&mut self, lock: &str, token: &OwnerToken, expires: Instant, now: Instant) {
        let entry = self.entry(lock, now);
        entry.holder = Some(Held {
            token: token.clone(),
            expires,
        });
    }

    /// Frees `lock` whoever holds it and raises its fencing counter to
    /// max(counter + 1, wall clock in µs), kept for [`MIN_RETENTION`].
    fn evict_holder(&mut self, lock: &str, now: Instant) -> Evicted {
        let holder = self
            .held(lock, now)
            .map(|held| held.token.as_str().to_owned());
        let entry = self.entry(lock, now);
        entry.holder = None;
        entry.fence = entry.fence.saturating_add(1).max(wall_clock_micros());
        entry.retained_until = deadline(now, MIN_RETENTION);
        Evicted {
            holder,
            fence: entry.fence,
            ..Evicted::default()
        }
    }

    /// Empties the holder set `set` into `evicted`: the members whose
    /// lease was live at `now`, earliest lease end first.
    fn evict_members(&mut self, set: &str, now: Instant, evicted: &mut Evicted) {
        let live = self.live_members(set, now);
        self.semaphores.remove(set);
        evicted.members = live
            .iter()
            .take(MOST_WAITERS_SHOWN)
            .map(|(token, _)| token.as_str().to_owned())
            .collect();
        evicted.member_count = live.len();
    }

    /// The members of the holder set `set` whose lease is live at `now`
    /// (the others are dropped), earliest lease end first.
    fn live_members(&mut self, set: &str, now: Instant) -> Vec<(OwnerToken, Instant)> {
        let Some(holders) = self.semaphores.get_mut(set) else {
            return Vec::new();
        };
        holders.retain(|held| held.expires > now);
        let mut live: Vec<(OwnerToken, Instant)> = holders
            .iter()
            .map(|held| (held.token.clone(), held.expires))
            .collect();
        if live.is_empty() {
            self.semaphores.remove(set);
        }
        live.sort_by_key(|(_, expires)| *expires);
        live
    }

    /// Sets `token`'s lease in the holder set `set` to end at `expires`
    /// (added if missing), or with `None` removes it.
    fn set_member(&mut self, set: &str, token: &OwnerToken, expires: Option<Instant>) {
        let holders = self.semaphores.entry(set.to_owned()).or_default();
        holders.retain(|held| held.token != *token);
        match expires {
            Some(expires) => holders.push(Held {
                token: token.clone(),
                expires,
            }),
            None if holders.is_empty() => {
                self.semaphores.remove(set);
            }
            None => {}
        }
    }

    /// The unexpired holder of `lock`, if any.
    /// The readers' turn of the read/write lock whose turn is kept at
    /// `name`, and until when, unless it ended.
    fn readers_turn(&mut self, name: &str, now: Instant) -> Option<(ReadersTurn, Instant)> {
        match self.turns.get(name) {
            Some(&(state, until)) if until > now => Some((state, until)),
            Some(_) => {
                self.turns.remove(name);
                None
            }
            None => None,
        }
    }

    /// After a writer left: the readers' turn at `name` if a reader waits
    /// (see `rw_write_release.lua`).
    fn give_readers_their_turn(&mut self, name: &str, now: Instant) {
        if let Some((ReadersTurn::Waiting, _)) = self.readers_turn(name, now) {
            let until = deadline(now, READERS_TURN);
            self.turns
                .insert(name.to_owned(), (ReadersTurn::Turn, until));
        }
    }

    fn held(&self, lock: &str, now: Instant) -> Option<&Held> {
        self.entries
            .get(lock)?
            .holder
            .as_ref()
            .filter(|held| held.expires > now)
    }

    /// Forgets every idle entry once the table has doubled since the last
    /// sweep; the next sweep comes when it has doubled again.
    fn sweep_if_grown(&mut self, now: Instant) {
        if self.entries.len() < self.sweep_at {
            return;
        }
        self.entries.retain(|_, entry| !entry.idle(now));
        self.sweep_at = self.entries.len().saturating_mul(2).max(MIN_SWEEP);
    }

    /// As [`sweep_if_grown`](Self::sweep_if_grown), for semaphores: forgets
    /// those whose every lease ended.
    fn sweep_semaphores_if_grown(&mut self, now: Instant) {
        if self.semaphores.len() < self.semaphore_sweep_at {
            return;
        }
        self.semaphores
            .retain(|_, holders| holders.iter().any(|held| held.expires > now));
        self.turns.retain(|_, (_, until)| *until > now);
        self.semaphore_sweep_at = self.semaphores.len().saturating_mul(2).max(MIN_SWEEP);
    }
}

impl Entry {
    /// Whether `token` holds the lock at `now`.
    fn held_by(&self, token: &OwnerToken, now: Instant) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|held| held.token == *token && held.expires > now)
    }

    /// Whether nothing is left to keep: no live holder, counter past its retention.
    fn idle(&self, now: Instant) -> bool {
        let unheld = self.holder.as_ref().is_none_or(|held| held.expires <= now);
        unheld && self.retained_until <= now
    }
}

/// How long a fencing counter outlives its last acquisition with a lease of `ttl`.
fn retention(ttl: Duration) -> Duration {
    ttl.saturating_mul(2).max(MIN_RETENTION).min(FAR_FUTURE)
}

/// `now + after`, or [`FAR_FUTURE`] from now when that does not fit an
/// `Instant` (100 years always does).
fn deadline(now: Instant, after: Duration) -> Instant {
    now.checked_add(after).unwrap_or_else(|| now + FAR_FUTURE)
}

fn wall_clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LockKey {
        crate::keys::KeySpace::new("lock:".into()).key(crate::kinds::kind::Kind::Lock, name)
    }

    fn claim<'a>(key: &'a LockKey, token: &'a OwnerToken, ttl_ms: u64) -> Claim<'a> {
        Claim { key, token, ttl_ms }
    }

    fn acquired(attempt: Attempt) {
        assert_eq!(attempt, Attempt::GRANTED, "expected the lock");
    }

    /// Takes `name` at `now` and has a fencing token issued (which is what
    /// keeps the key's counter).
    fn fenced(
        backend: &MemoryBackend,
        name: &str,
        token: &OwnerToken,
        ttl_ms: u64,
        now: Instant,
    ) -> u64 {
        acquired(backend.take_lock_at(claim(&key(name), token, ttl_ms), now));
        backend
            .fence_at(claim(&key(name), token, ttl_ms), now)
            .expect("the holder gets a token")
    }

    fn entries(backend: &MemoryBackend) -> usize {
        backend.table().entries.len()
    }

    #[test]
    fn expired_locks_and_idle_counters_are_forgotten_once_the_table_grows() {
        let (backend, token, start) =
            (MemoryBackend::new(), OwnerToken::generate(), Instant::now());
        let first = fenced(&backend, "reused", &token, 1_000, start);
        for i in 1..MIN_SWEEP {
            fenced(&backend, &format!("k{i}"), &token, 1_000, start);
        }
        assert_eq!(entries(&backend), MIN_SWEEP);

        let later = start + MIN_RETENTION + Duration::from_secs(1);
        let again = fenced(&backend, "reused", &token, 1_000, later);
        assert_eq!(entries(&backend), 1, "only the new acquisition is left");
        assert!(again > first, "a forgotten counter restarts from the clock");
    }

    #[test]
    fn only_the_holder_gets_tokens_and_each_is_above_the_last() {
        let backend = MemoryBackend::new();
        let (first, second) = (OwnerToken::generate(), OwnerToken::generate());
        let k = key("fenced");
        acquired(backend.take_lock(claim(&k, &first, 1_000)));
        let a = backend.fence(claim(&k, &first, 1_000)).unwrap();
        let b = backend.fence(claim(&k, &first, 1_000)).unwrap();
        assert!(b > a);
        assert_eq!(backend.fence(claim(&k, &second, 1_000)), None);
        assert!(backend.release(&k, &first));
        assert_eq!(
            backend.fence(claim(&k, &first, 1_000)),
            None,
            "released: no token"
        );
        acquired(backend.take_lock(claim(&k, &second, 1_000)));
        assert!(backend.fence(claim(&k, &second, 1_000)).unwrap() > b);
    }

    #[test]
    fn a_sweep_keeps_live_locks_and_recently_used_counters() {
        let (backend, token, start) =
            (MemoryBackend::new(), OwnerToken::generate(), Instant::now());
        let hour = Duration::from_secs(3_600);
        backend.take_lock_at(claim(&key("held"), &token, 3_600_000), start);
        fenced(&backend, "recent", &token, 1_000, start + hour / 12);
        for i in 2..MIN_SWEEP {
            fenced(&backend, &format!("k{i}"), &token, 1_000, start);
        }

        backend.take_lock_at(
            claim(&key("trigger"), &token, 1_000),
            start + MIN_RETENTION + hour / 60,
        );
        let table = backend.table();
        let mut kept: Vec<&str> = table.entries.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["lock:held", "lock:recent", "lock:trigger"]);
        assert_eq!(table.sweep_at, MIN_SWEEP);
    }

    #[test]
    fn many_distinct_keys_do_not_grow_the_table_without_bound() {
        let (backend, token, start) =
            (MemoryBackend::new(), OwnerToken::generate(), Instant::now());
        let step = Duration::from_millis(100);
        let mut largest = 0;
        for i in 0..100_000u32 {
            let now = start + step * i;
            fenced(&backend, &format!("k{i}"), &token, 10, now);
            largest = largest.max(entries(&backend));
        }
        // Counters live MIN_RETENTION, one key per step: at most `live` at a
        // time, and the table never exceeds twice that plus MIN_SWEEP.
        let live = usize::try_from(MIN_RETENTION.as_millis() / step.as_millis()).unwrap() + 1;
        assert!(largest <= 2 * live + MIN_SWEEP, "{largest} entries");
    }

    #[test]
    fn ttl_of_u64_max_ms_neither_panics_nor_expires() {
        let backend = MemoryBackend::new();
        let (owner, other) = (OwnerToken::generate(), OwnerToken::generate());
        let k = key("forever");
        acquired(backend.take_lock(claim(&k, &owner, u64::MAX)));
        match backend.take_lock(claim(&k, &other, u64::MAX)) {
            Attempt::Busy {
                remaining: Some(remaining),
            } => assert!(remaining >= FAR_FUTURE, "{remaining:?}"),
            other => panic!("expected busy, got {other:?}"),
        }
        assert!(backend.renew(claim(&k, &owner, u64::MAX)));
        assert!(backend.release(&k, &owner));
        acquired(backend.take_lock(claim(&k, &other, u64::MAX)));
    }

    #[test]
    fn deadlines_and_retention_saturate_instead_of_overflowing() {
        let now = Instant::now();
        assert_eq!(deadline(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(retention(Duration::MAX), FAR_FUTURE);
        assert_eq!(retention(Duration::from_secs(1)), MIN_RETENTION);
        assert_eq!(
            retention(Duration::from_secs(3_600)),
            Duration::from_secs(7_200)
        );
    }
}
