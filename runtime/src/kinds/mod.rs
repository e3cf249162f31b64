//! The kinds of lock built on leases: plain locks, several keys at once,
//! read/write locks, counting semaphores and leader election.

pub(crate) mod leader;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod rw_guard;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
