//! One holder per key in a process, whatever the servers answer. A
//! failover, or a restart that lost a grant, lets a server grant a lock
//! again while a task of this manager still holds it; the manager does not
//! let that second task hold it too. Each lease takes a seat of its key
//! here when its grant arrives and gives it up when its hold ends or it is
//! lost: a lock and a write lease sit alone, readers beside readers only,
//! and a semaphore's holders in this process are never more than its
//! permits. A grant that finds no free seat is given back, and its waiter
//! waits here for one (see `acquire`).

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use futures_util::future::select_all;
use tokio::sync::Notify;

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

/// The seats of one manager's keys, by the key's lock name.
#[derive(Default)]
pub(crate) struct Seats {
    keys: Mutex<HashMap<String, KeySeats>>,
}

struct KeySeats {
    taken: Vec<Occupant>,
    next_id: u64,
    /// Notified (all waiters) when a seat is given up or its lease set.
    changed: Arc<Notify>,
}

struct Occupant {
    id: u64,
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
fn admits(taken: &[Occupant], share: Share, now: Instant) -> bool {
    let mut live = taken.iter().filter(|occupant| occupant.live(now));
    match share {
        Share::Alone => live.next().is_none(),
        Share::Reader => live.all(|occupant| occupant.share == Share::Reader),
        Share::OneOf(permits) => live.count() < usize::try_from(permits).unwrap_or(usize::MAX),
    }
}

impl Seats {
    fn locked(&self) -> MutexGuard<'_, HashMap<String, KeySeats>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A seat of `key` for a lease sharing as `share`, if one is free now;
    /// otherwise when the first of the live holders' certain validity ends,
    /// if any of them is a lease already.
    pub(crate) fn take(self: &Arc<Self>, key: &str, share: Share) -> Result<Seat, Option<Instant>> {
        let mut keys = self.locked();
        let seats = keys.entry(key.to_owned()).or_insert_with(|| KeySeats {
            taken: Vec::new(),
            next_id: 0,
            changed: Arc::new(Notify::new()),
        });
        let now = Instant::now();
        if !admits(&seats.taken, share, now) {
            let ends = seats
                .taken
                .iter()
                .filter_map(|occupant| occupant.status.as_ref()?.valid_until())
                .filter(|&until| until > now)
                .min();
            return Err(ends);
        }
        seats.taken.retain(|occupant| occupant.live(now));
        let id = seats.next_id;
        seats.next_id += 1;
        seats.taken.push(Occupant {
            id,
            share,
            status: None,
        });
        Ok(Seat {
            seats: Arc::clone(self),
            key: key.to_owned(),
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
        loop {
            let Some(changed) = self
                .locked()
                .get(key)
                .map(|seats| Arc::clone(&seats.changed))
            else {
                return true;
            };
            // Listening before looking: a seat given up in between wakes it.
            let mut changed = pin!(changed.notified());
            changed.as_mut().enable();
            let holders: Vec<StatusCell> = {
                let keys = self.locked();
                let Some(seats) = keys.get(key) else {
                    return true;
                };
                let now = Instant::now();
                if admits(&seats.taken, share, now) {
                    return true;
                }
                seats
                    .taken
                    .iter()
                    .filter(|occupant| occupant.live(now))
                    .filter_map(|occupant| occupant.status.clone())
                    .collect()
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
                () = lost => {}
                () = deadline => return false,
            }
        }
    }
}

impl Seats {
    /// The leases of this process that hold seats of `key` now: what a
    /// forced release about to be sent takes back.
    pub(crate) fn leases_of(&self, key: &str) -> Vec<StatusCell> {
        self.locked().get(key).map_or_else(Vec::new, |seats| {
            seats
                .taken
                .iter()
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
        if let Some(seats) = self.locked().get(key) {
            seats.changed.notify_waiters();
        }
    }
}

/// One lease's seat of its key in this process; given up on drop.
pub(crate) struct Seat {
    seats: Arc<Seats>,
    key: String,
    id: u64,
}

impl Seat {
    /// The grant became the lease of `status`: the seat is free again once
    /// that lease is lost, even before the seat is given up.
    pub(crate) fn set_lease(&self, status: StatusCell) {
        let mut keys = self.seats.locked();
        if let Some(seats) = keys.get_mut(&self.key) {
            if let Some(occupant) = seats.taken.iter_mut().find(|o| o.id == self.id) {
                occupant.status = Some(status);
            }
            seats.changed.notify_waiters();
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut keys = self.seats.locked();
        let Some(seats) = keys.get_mut(&self.key) else {
            return;
        };
        seats.taken.retain(|occupant| occupant.id != self.id);
        seats.changed.notify_waiters();
        if seats.taken.is_empty() {
            keys.remove(&self.key);
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
