//! The kinds of lock built on leases: plain locks, several keys at once,
//! read/write locks, counting semaphores, leader election, and jobs run
//! once per period.

pub(crate) mod leader;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod period;
pub(crate) mod rw_guard;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
