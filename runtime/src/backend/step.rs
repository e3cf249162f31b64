//! The words every backend step speaks, whatever the backend and the
//! kind: the lease a step is for ([`Claim`]), how an attempt takes it
//! ([`Taking`]), what an attempt answers ([`Attempt`]) and what a batch of
//! renewals answers for each lease ([`Renewal`]).

use std::time::Duration;

use crate::keys::LockKey;
use crate::options::MinReplicas;
use crate::token::OwnerToken;

/// The lease a step takes, extends or fences: the key, the owner token
/// that holds (or asks for) it, and the lease's length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) key: &'a LockKey,
    pub(crate) token: &'a OwnerToken,
    pub(crate) ttl_ms: u64,
}

impl Claim<'_> {
    /// The lease's length.
    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }
}

/// How one attempt takes a lease: the replicas a granted lock must reach
/// (`None`: no check), how long a blocked waiter keeps its place (a lock
/// waiter's in the key's queue, a writer's intent, a reader's mark that
/// readers wait; zero: it keeps none), and the waiter's number for this
/// place refresh, which a release's grant names (0: none; see
/// `release.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taking {
    pub(crate) replicas: Option<MinReplicas>,
    pub(crate) place: Duration,
    pub(crate) seq: u64,
}

/// The outcome of one acquisition attempt, in the same words for every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// We hold the lease now (a lock's fencing token is issued on request,
    /// see [`Backend::fence`](crate::backend::Backend::fence), or with the lock, see
    /// [`Backend::take_fenced`](crate::backend::Backend::take_fenced)); `room_left` when another waiter may get
    /// in too (a permit with more free), which passes the wake-up on.
    Granted { room_left: bool },
    /// Someone else holds it; their lease has about this much left.
    Busy { remaining: Option<Duration> },
    /// The server grants nothing for about `left` more: it is in its
    /// lock-delay (see `lock_delay`), whoever holds the key.
    Delayed { left: Duration },
}

impl Attempt {
    /// Granted, with no room left for another waiter.
    pub(crate) const GRANTED: Attempt = Attempt::Granted { room_left: false };
}

/// What a batch said of one of its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Still ours, and extended by its ttl.
    Renewed,
    /// No longer ours: expired, or taken over.
    Refused,
    /// Not known either way (Redlock: no quorum of nodes agreed on it).
    Unknown,
}

impl Renewal {
    /// The answer of one server (or one Redlock node) for one lease.
    pub(crate) fn from_server(renewed: bool) -> Self {
        if renewed {
            Renewal::Renewed
        } else {
            Renewal::Refused
        }
    }
}

/// `duration` in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
