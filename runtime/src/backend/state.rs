//! What a backend shows operators of one key, and what a forced release
//! evicted: one shape for every kind. A lock fills the holder, its waiters
//! and its record; a semaphore its member leases; a read/write lock its
//! writer (as the holder), its readers (as members), its waiting writers
//! (as the queued count) and the writers' fencing counter.

use std::time::Duration;

/// Most queued waiters or member leases an inspection returns (the counts
/// cover all).
pub(crate) const MOST_WAITERS_SHOWN: usize = 100;

/// What a backend holds for one key now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// The owner token of the lease held as the key's value (a lock's, a
    /// writer's), if there is one.
    pub(crate) holder: Option<String>,
    /// How long that lease has left.
    pub(crate) remaining: Option<Duration>,
    /// Owner tokens and remaining leases of the live member leases (a
    /// semaphore's permits, a read/write lock's readers), earliest end
    /// first, at most [`MOST_WAITERS_SHOWN`].
    pub(crate) members: Vec<(String, Duration)>,
    /// How many live member leases there are.
    pub(crate) member_count: usize,
    /// The last fencing token issued (or the value a forced release raised
    /// the counter to), while the counter is retained.
    pub(crate) fence: Option<u64>,
    /// Owner tokens of the waiters queued in the backend, in arrival order
    /// (at most [`MOST_WAITERS_SHOWN`]).
    pub(crate) queued: Vec<String>,
    /// How many waiters are queued in the backend (a read/write lock's:
    /// its writers' live intents).
    pub(crate) queued_count: usize,
    /// How long ago the holder was granted the lock, by the server's clock,
    /// when it waited and the grant is recorded (see `LockKey::record`).
    pub(crate) granted_ago: Option<Duration>,
    /// How long the holder waited in the queue before that grant.
    pub(crate) waited: Option<Duration>,
    /// Whether the holder released the lock within its `hold_at_least`: it
    /// is kept until the hold ends, as planned.
    pub(crate) released: bool,
}

/// What a forced release did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// The owner token of the lease held as the key's value that it
    /// evicted (a lock's, a writer's), if there was one.
    pub(crate) holder: Option<String>,
    /// The owner tokens of the member leases it evicted (a semaphore's
    /// permits, a read/write lock's readers), earliest end first, at most
    /// [`MOST_WAITERS_SHOWN`].
    pub(crate) members: Vec<String>,
    /// How many member leases it evicted.
    pub(crate) member_count: usize,
    /// The fencing counter after the release, above every token issued
    /// before it (0 for a kind without one).
    pub(crate) fence: u64,
}
