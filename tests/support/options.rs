//! The lock options the tests use again and again.

use std::time::Duration;

use leasehold::LockOptions;

/// A TTL so long that it cannot run out during a test: when a lock held with it
/// becomes free, a release freed it, not expiry.
pub const LONG_TTL: Duration = Duration::from_secs(30);

/// A lease the watchdog renews every 500 ms, for tests that show renewals
/// keep it: a test holding it past one TTL sees two renewals or more, and each
/// renewal has a second to be answered before the lease's validity ends, more
/// than a loaded CI machine stalls a task (300 ms leases left 200 ms, which
/// a busy run missed).
pub const RENEWED_TTL: Duration = Duration::from_millis(1500);

/// How long a test holds a [`RENEWED_TTL`] lease to see it renewed: past one
/// TTL, so without renewals it would have ended.
pub const PAST_ONE_TTL: Duration = Duration::from_millis(1700);

/// Options of a [`RENEWED_TTL`] lease, renewed by the watchdog.
pub fn renewed() -> LockOptions {
    LockOptions::new().ttl(RENEWED_TTL)
}

/// Options with [`LONG_TTL`] and no waiting.
pub fn long() -> LockOptions {
    LockOptions::new().ttl(LONG_TTL)
}

/// Options with [`LONG_TTL`] that wait up to `wait` for a busy lock.
pub fn waiting(wait: Duration) -> LockOptions {
    long().wait(wait)
}

/// Options of a lease of `ttl` that is never renewed.
pub fn fixed_lease(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl).renew(false)
}
