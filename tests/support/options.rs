//! The lock options the tests use again and again.

use std::time::Duration;

use leasehold::LockOptions;

/// A TTL so long that it cannot run out during a test: when a lock held with it
/// becomes free, a release freed it, not expiry.
pub const LONG_TTL: Duration = Duration::from_secs(30);

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
