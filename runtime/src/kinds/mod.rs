//! The kinds of lock built on leases: plain locks, several keys at once,
//! read/write locks, counting semaphores, leader election, and jobs run
//! once per period; and what each kind of lease is (`kind`, `rules`),
//! described once for the engine and the backends.

pub(crate) mod kind;
pub(crate) mod leader;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod period;
pub(crate) mod rules;
pub(crate) mod rw_guard;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
