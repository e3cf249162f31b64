//! Which model each kind's steps run in memory: the one place the
//! in-memory backend tells kinds apart. A lock (and a read/write lock's
//! writer) is a key's holder in the table, as `mod.rs` keeps it; a permit
//! and a reader are members of a lease set, with the semantics of
//! `semaphore_acquire.lua` and `rw_read_acquire.lua`; a writer waits
//! behind readers and keeps an intent, as `rw_write_acquire.lua` does.

use std::time::{Duration, Instant};

use super::{deadline, Held, MemoryBackend, ReadersTurn};
use crate::backend::state::{Evicted, State};
use crate::backend::step::{Attempt, Claim, Taking};
use crate::keys::LockKey;
use crate::kinds::kind::{Kind, Side};
use crate::token::OwnerToken;

impl MemoryBackend {
    /// One attempt to take the lease of `claim`, as the kind's script would
    /// (see [`Backend::take`](crate::backend::Backend::take)).
    pub(crate) fn take(&self, claim: Claim<'_>, taking: Taking) -> Attempt {
        match claim.key.kind {
            Kind::Lock => self.take_lock(claim),
            Kind::Semaphore { permits } => self.take_permit(claim, permits),
            Kind::ReadWrite(side) => self.take_rw(claim, side, taking.place),
        }
    }

    /// Gives back the lease of `token` on `key`, as the kind's release
    /// script would, and wakes the waiters it lets in: one locker, the
    /// next permit holder or writer (a reader leaving wakes a writer, who
    /// waits on the readers' name); a writer leaving wakes every reader
    /// and a writer, and gives waiting readers their turn.
    pub(crate) fn release(&self, key: &LockKey, token: &OwnerToken) -> bool {
        let owned = match key.kind {
            Kind::Lock => self.release_lock(key, token),
            Kind::ReadWrite(Side::Read) | Kind::Semaphore { .. } => {
                self.release_permit(key.members(), token)
            }
            Kind::ReadWrite(Side::Write) => {
                let owned = self.release_lock(key, token);
                if owned {
                    self.table()
                        .give_readers_their_turn(key.as_rw().turn, Instant::now());
                }
                if self.release_permit(key.as_rw().intents, token) || owned {
                    self.queues.wake_every(key.lock());
                    self.queues.wake_one(key.members());
                }
                return owned;
            }
        };
        if owned {
            self.queues.wake_one(key.lease_name());
        }
        owned
    }

    /// What the table holds for `key` now, as its kind keeps it: a lock's
    /// holder and fencing counter (its waiters queue only in this process),
    /// a read/write lock's writer, readers, intents and writers' counter, a
    /// semaphore's permits.
    pub(crate) fn inspect(&self, key: &LockKey) -> State {
        let state = self.inspect_names(key);
        match key.kind {
            Kind::Lock => State {
                members: Vec::new(),
                member_count: 0,
                ..state
            },
            Kind::ReadWrite(_) => State {
                queued_count: self.intents(key),
                ..state
            },
            Kind::Semaphore { .. } => State {
                members: state.members,
                member_count: state.member_count,
                ..State::default()
            },
        }
    }

    /// How many writers wait for the read/write lock `key`: its live intents.
    fn intents(&self, key: &LockKey) -> usize {
        let now = Instant::now();
        self.table().live_members(key.as_rw().intents, now).len()
    }

    /// Frees `key` whoever holds it, as its kind's forced release script
    /// would: a lock's holder (its counter raised as `fence` issues
    /// tokens, every waiter woken); every permit of a semaphore; a
    /// read/write lock's writer and readers (its writers' counter raised,
    /// waiting writers keeping their intents, every reader and a writer
    /// woken).
    pub(crate) fn force(&self, key: &LockKey) -> Evicted {
        let now = Instant::now();
        let evicted = {
            let mut table = self.table();
            let mut evicted = match key.kind {
                Kind::Semaphore { .. } => Evicted::default(),
                Kind::Lock | Kind::ReadWrite(_) => table.evict_holder(key.lock(), now),
            };
            if key.kind != Kind::Lock {
                table.evict_members(key.members(), now, &mut evicted);
            }
            evicted
        };
        match key.kind {
            Kind::Lock => self.queues.wake_all(key.lock()),
            Kind::Semaphore { .. } => self.queues.wake_every(key.lock()),
            Kind::ReadWrite(_) => {
                self.queues.wake_every(key.lock());
                self.queues.wake_one(key.members());
            }
        }
        evicted
    }

    /// A permit of the semaphore `key` for `ttl_ms` if fewer than `permits`
    /// are held, as `semaphore_acquire.lua` grants them.
    fn take_permit(&self, claim: Claim<'_>, permits: u32) -> Attempt {
        let (Claim { key, token, .. }, now) = (claim, Instant::now());
        let expires = deadline(now, claim.ttl());
        let mut table = self.table();
        table.sweep_semaphores_if_grown(now);
        let holders = table
            .semaphores
            .entry(key.members().to_owned())
            .or_default();
        holders.retain(|held| held.expires > now);
        let held = u32::try_from(holders.len()).unwrap_or(u32::MAX);
        if let Some(mine) = holders.iter_mut().find(|held| held.token == *token) {
            mine.expires = expires;
            return Attempt::Granted {
                room_left: permits > held,
            };
        }
        if held < permits {
            holders.push(Held {
                token: token.clone(),
                expires,
            });
            return Attempt::Granted {
                room_left: permits - held > 1,
            };
        }
        Attempt::Busy {
            remaining: holders.iter().map(|held| held.expires - now).min(),
        }
    }

    /// A read lease or the write lease (`side`) of the read/write lock
    /// `key` for `ttl_ms`, as `rw_read_acquire.lua` and
    /// `rw_write_acquire.lua` grant them; blocked, a writer keeps its intent
    /// and a reader marks that readers wait, for `place` unless that is zero.
    fn take_rw(&self, claim: Claim<'_>, side: Side, place: Duration) -> Attempt {
        let (Claim { key, token, .. }, now) = (claim, Instant::now());
        let names = key.as_rw();
        let expires = deadline(now, claim.ttl());
        let mut table = self.table();
        table.sweep_if_grown(now);
        table.sweep_semaphores_if_grown(now);
        let writer = table
            .held(key.lock(), now)
            .map(|held| (held.token == *token, held.expires));
        let readers = table.live_members(key.members(), now);
        let intents = table.live_members(names.intents, now);
        let busy = |until: Option<Instant>| Attempt::Busy {
            remaining: until.map(|until| until - now),
        };
        // Until when it is the readers' turn, if it is.
        let readers_turn = match table.readers_turn(names.turn, now) {
            Some((ReadersTurn::Turn, until)) => Some(until),
            _ => None,
        };
        if side == Side::Read {
            if !readers.iter().any(|(member, _)| member == token) {
                let blocker = writer.map(|(_, until)| until).or_else(|| {
                    let intent = intents.first().filter(|_| readers_turn.is_none());
                    intent.map(|(_, until)| *until)
                });
                if blocker.is_some() {
                    if !place.is_zero() && readers_turn.is_none() {
                        let until = deadline(now, place);
                        table
                            .turns
                            .insert(names.turn.to_owned(), (ReadersTurn::Waiting, until));
                    }
                    return busy(blocker);
                }
            }
            table.set_member(key.members(), token, Some(expires));
            return Attempt::GRANTED;
        }
        let ours_or_free = match writer {
            Some((ours, _)) => ours,
            None => readers.is_empty() && readers_turn.is_none(),
        };
        if ours_or_free {
            table.set_member(names.intents, token, None);
            table.set_holder(key.lock(), token, expires, now);
            return Attempt::GRANTED;
        }
        if !place.is_zero() {
            table.set_member(names.intents, token, Some(deadline(now, place)));
        }
        busy(
            writer
                .map(|(_, until)| until)
                .or(readers_turn)
                .or(readers.first().map(|(_, until)| *until)),
        )
    }
}
