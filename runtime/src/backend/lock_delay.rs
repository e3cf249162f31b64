//! How long a server that was promoted, or restarted without its data, grants
//! nothing: the lock-delay each grant and renewal script checks (see
//! `node_delay` in `scripts/prelude.lua`). The delay must outlast every lease
//! such a server may have lost while its holder still believes it valid, so
//! by default it is the longest ttl this manager has asked for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::millis;

/// The lock-delay a manager asks its servers to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum LockDelay {
    /// The longest ttl this manager has asked for so far.
    #[default]
    LongestTtl,
    /// This long, whatever the ttls.
    Fixed(Duration),
    /// None: a failover may let two holders in at once.
    Off,
}

/// The longest ttl one backend has asked for, for [`LockDelay::LongestTtl`].
#[derive(Debug, Default)]
pub(crate) struct LongestTtl(AtomicU64);

impl LockDelay {
    /// The delay in ms to send with a step for a lease of `ttl_ms`, where
    /// `longest` has the longest ttl asked for before; 0 when off.
    pub(crate) fn millis_for(self, ttl_ms: u64, longest: &LongestTtl) -> u64 {
        match self {
            LockDelay::Off => 0,
            LockDelay::Fixed(delay) => millis(delay),
            LockDelay::LongestTtl => longest.0.fetch_max(ttl_ms, Ordering::Relaxed).max(ttl_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_delay_is_the_longest_ttl_asked_for_so_far() {
        let longest = LongestTtl::default();
        let delay = LockDelay::default();
        assert_eq!(delay.millis_for(3_000, &longest), 3_000);
        assert_eq!(delay.millis_for(30_000, &longest), 30_000);
        assert_eq!(
            delay.millis_for(1_000, &longest),
            30_000,
            "a shorter ttl later"
        );
        assert_eq!(LockDelay::Off.millis_for(1_000, &longest), 0);
        let fixed = LockDelay::Fixed(Duration::from_secs(5));
        assert_eq!(fixed.millis_for(30_000, &longest), 5_000);
    }
}
