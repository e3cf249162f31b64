//! One holder per key in a process, whatever the servers answer. A
//! failover, or a restart that lost a grant, lets a server grant a lock
//! again while a task of this manager still holds it; the manager does not
//! let that second task hold it too. Each lease takes a seat of its key
//! here when its grant arrives and gives it up when its hold ends or it is
//! lost: a lock and a write lease sit alone, readers beside readers only,
//! and a semaphore's holders in this process are never more than its
//! permits. A grant that finds no free seat is given back, and its waiter
//! waits here for one (see `acquire`).
//!
//! Every acquisition passes through here, so a seat costs one keyed hash of
//! its key (SipHash with this process's random keys: lock names may come
//! from users' requests) and one small allocation; giving it up finds it by
//! that hash and its id.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use futures_util::future::select_all;
use tokio::sync::Notify;

use crate::hashing::FastMap;
use crate::lease::status::{LeaseStatus, StatusCell};

/// How a lease shares its key with the other holders of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// Nobody beside it: a lock, a write lease.
    Alone,
    /// Readers beside it, no writer.
    Reader,
    /// Up to this many holders, itself included: a semaphore's permits.
    OneOf(u32),
}

/// The seats of one manager's keys.
pub(crate) struct Seats {
    /// Seeds the hash of a key's name.
    hasher: RandomState,
    taken: Mutex<Taken>,
}

impl Default for Seats {
    fn default() -> Self {
        Seats {
            hasher: RandomState::new(),
            taken: Mutex::new(Taken::default()),
        }
    }
}

/// The occupied seats, by the hash of their key's name (keys whose names
/// share a hash share a bucket and are told apart by name).
#[derive(Default)]
struct Taken {
    buckets: FastMap<u64, Bucket>,
    next_id: u64,
}

#[derive(Default)]
struct Bucket {
    occupants: Vec<Occupant>,
    /// Notified (all waiters) when a seat of the bucket is given up or its
    /// lease set; made by the first waiter.
    changed: Option<Arc<Notify>>,
}

impl Bucket {
    fn of<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Occupant> + 'a {
        self.occupants.iter().filter(move |o| &*o.key == key)
    }

    fn notify(&self) {
        if let Some(changed) = &self.changed {
            changed.notify_waiters();
        }
    }
}

struct Occupant {
    id: u64,
    key: Box<str>,
    share: Share,
    /// The lease's status once it exists; until then the seat is held for
    /// the grant being turned into a lease.
    status: Option<StatusCell>,
}

impl Occupant {
    /// Whether it still holds its seat at `now`: a lost lease, or one past
    /// its certain validity, no longer does, whether or not it was told.
    fn live(&self, now: Instant) -> bool {
        self.status.as_ref().is_none_or(
            |status| matches!(status.get(), LeaseStatus::Held { valid_until } if valid_until > now),
        )
    }
}

/// Whether a newcomer sharing as `share` may sit beside `taken` at `now`.
fn admits<'a>(taken: impl Iterator<Item = &'a Occupant>, share: Share, now: Instant) -> bool {
    let mut live = taken.filter(|occupant| occupant.live(now));
    match share {
        Share::Alone => live.next().is_none(),
        Share::Reader => live.all(|occupant| occupant.share == Share::Reader),
        Share::OneOf(permits) => live.count() < usize::try_from(permits).unwrap_or(usize::MAX),
    }
}

impl Seats {
    fn locked(&self) -> MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// A seat of `key` for a lease sharing as `share`, if one is free now;
    /// otherwise when the first of the live holders' certain validity ends,
    /// if any of them is a lease already.
    pub(crate) fn take(self: &Arc<Self>, key: &str, share: Share) -> Result<Seat, Option<Instant>> {
        let hash = self.hash(key);
        let mut taken = self.locked();
        let id = taken.next_id;
        let bucket = taken.buckets.entry(hash).or_default();
        let now = Instant::now();
        if !admits(bucket.of(key), share, now) {
            let ends = bucket
                .of(key)
                .filter_map(|occupant| occupant.status.as_ref()?.valid_until())
                .filter(|&until| until > now)
                .min();
            return Err(ends);
        }
        bucket
            .occupants
            .retain(|occupant| &*occupant.key != key || occupant.live(now));
        bucket.occupants.push(Occupant {
            id,
            key: key.into(),
            share,
            status: None,
        });
        taken.next_id += 1;
        Ok(Seat {
            seats: Arc::clone(self),
            hash,
            id,
        })
    }

    /// Waits until a lease sharing as `share` may take a seat of `key`:
    /// `true` then, `false` when `deadline` came first.
    pub(crate) async fn until_free(
        &self,
        key: &str,
        share: Share,
        deadline: Option<Instant>,
    ) -> bool {
        let hash = self.hash(key);
        loop {
            // Listening before looking, under one lock: a seat given up
            // after the look wakes it.
            let (changed, holders) = {
                let mut taken = self.locked();
                let Some(bucket) = taken.buckets.get_mut(&hash) else {
                    return true;
                };
                let now = Instant::now();
                if admits(bucket.of(key), share, now) {
                    return true;
                }
                let changed = Arc::clone(bucket.changed.get_or_insert_with(Arc::default));
                let holders: Vec<StatusCell> = bucket
                    .of(key)
                    .filter(|occupant| occupant.live(now))
                    .filter_map(|occupant| occupant.status.clone())
                    .collect();
                let mut changed = Box::pin(changed.notified_owned());
                changed.as_mut().enable();
                (changed, holders)
            };
            let lost = async {
                if holders.is_empty() {
                    std::future::pending::<()>().await;
                }
                select_all(holders.iter().map(|status| Box::pin(status.lost()))).await;
            };
            let deadline = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = changed => {}
                () = pin!(lost) => {}
                () = pin!(deadline) => return false,
            }
        }
    }

    /// The leases of this process that hold seats of `key` now: what a
    /// forced release about to be sent takes back.
    pub(crate) fn leases_of(&self, key: &str) -> Vec<StatusCell> {
        let hash = self.hash(key);
        self.locked()
            .buckets
            .get(&hash)
            .map_or_else(Vec::new, |bucket| {
                bucket
                    .of(key)
                    .filter_map(|occupant| occupant.status.clone())
                    .collect()
            })
    }

    /// `leases` (see [`leases_of`](Self::leases_of)) of `key` were taken
    /// back by a forced release: each is lost now (its holder learns it at
    /// once, not at its next renewal) and its seat is free. A lease granted
    /// since is not among them.
    pub(crate) fn evicted(&self, key: &str, leases: Vec<StatusCell>) {
        for status in &leases {
            status.mark_lost();
        }
        if let Some(bucket) = self.locked().buckets.get(&self.hash(key)) {
            bucket.notify();
        }
    }
}

/// One lease's seat of its key in this process; given up on drop.
pub(crate) struct Seat {
    seats: Arc<Seats>,
    hash: u64,
    id: u64,
}

impl Seat {
    /// The grant became the lease of `status`: the seat is free again once
    /// that lease is lost, even before the seat is given up.
    pub(crate) fn set_lease(&self, status: StatusCell) {
        let mut taken = self.seats.locked();
        if let Some(bucket) = taken.buckets.get_mut(&self.hash) {
            if let Some(occupant) = bucket.occupants.iter_mut().find(|o| o.id == self.id) {
                occupant.status = Some(status);
            }
            bucket.notify();
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut taken = self.seats.locked();
        let Some(bucket) = taken.buckets.get_mut(&self.hash) else {
            return;
        };
        bucket.occupants.retain(|occupant| occupant.id != self.id);
        bucket.notify();
        if bucket.occupants.is_empty() {
            taken.buckets.remove(&self.hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    fn held_for(seconds: u64) -> StatusCell {
        StatusCell::held_until(Instant::now() + Duration::from_secs(seconds))
    }

    #[test]
    fn a_lock_sits_alone_until_its_seat_is_given_up() {
        let seats = Arc::new(Seats::default());
        let first = seats.take("k", Share::Alone).expect("free");
        first.set_lease(held_for(60));
        assert!(seats.take("k", Share::Alone).is_err(), "two holders");
        assert!(seats.take("other", Share::Alone).is_ok(), "keys are apart");
        drop(first);
        assert!(seats.take("k", Share::Alone).is_ok());
    }

    #[tokio::test]
    async fn a_lost_lease_frees_its_seat_before_it_is_given_up() {
        let seats = Arc::new(Seats::default());
        let first = seats.take("k", Share::Alone).expect("free");
        let status = held_for(60);
        first.set_lease(status.clone());
        let mut waiting = seats.until_free("k", Share::Alone, None).boxed();
        assert!(waiting.as_mut().now_or_never().is_none());
        status.mark_lost();
        assert_eq!(waiting.now_or_never(), Some(true));
        assert!(seats.take("k", Share::Alone).is_ok());
    }

    #[test]
    fn readers_share_a_seat_a_writer_does_not_and_permits_are_counted() {
        let seats = Arc::new(Seats::default());
        let _a = seats.take("rw", Share::Reader).expect("free");
        let _b = seats.take("rw", Share::Reader).expect("beside a reader");
        assert!(
            seats.take("rw", Share::Alone).is_err(),
            "writer beside readers"
        );
        let _one = seats.take("sem", Share::OneOf(2)).expect("first permit");
        let _two = seats.take("sem", Share::OneOf(2)).expect("second permit");
        assert!(
            seats.take("sem", Share::OneOf(2)).is_err(),
            "a third of two"
        );
    }

    #[tokio::test]
    async fn a_wait_for_a_seat_ends_at_its_deadline() {
        let seats = Arc::new(Seats::default());
        let first = seats.take("k", Share::Alone).expect("free");
        first.set_lease(held_for(60));
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(!seats.until_free("k", Share::Alone, Some(deadline)).await);
    }
}
