//! How long a busy answer tells the client to wait (`Retry-After`): about
//! as long as this layer's recent holds took, or a fixed time; never longer
//! than the holder's remaining lease.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// What `Retry-After` says on a `429` ([`OnBusy::TooManyRequests`](crate::OnBusy)),
/// in whole seconds rounded up (at least 1). Never more than the holder's
/// remaining lease: after it, the lock is free unless the holder renewed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfter {
    /// The longest of the last holds this layer saw complete, from the lock
    /// taken to the response ready (the default). A holder of the same key
    /// likely runs the same handler, so it is likely done by then. Before
    /// any hold has completed, and under [`Hold::UntilBodyEnds`](crate::Hold)
    /// (whose holds end with bodies the layer does not time), the holder's
    /// remaining lease.
    #[default]
    RecentHolds,
    /// This long.
    Fixed(Duration),
}

/// How many completed holds [`RecentHolds`] remembers.
const REMEMBERED: usize = 32;

/// The durations of the last [`REMEMBERED`] holds that completed.
#[derive(Debug, Default)]
pub(crate) struct RecentHolds(Mutex<Remembered>);

#[derive(Debug, Default)]
struct Remembered {
    holds: [Duration; REMEMBERED],
    /// How many holds were recorded, ever; the next goes at this modulo
    /// [`REMEMBERED`].
    recorded: usize,
}

impl RecentHolds {
    /// Remembers a hold that lasted `hold`, forgetting the oldest.
    pub(crate) fn record(&self, hold: Duration) {
        let mut remembered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let next = remembered.recorded % REMEMBERED;
        remembered.holds[next] = hold;
        remembered.recorded = remembered.recorded.wrapping_add(1);
    }

    /// The longest remembered hold; `None` before the first.
    fn longest(&self) -> Option<Duration> {
        let remembered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = remembered.recorded.min(REMEMBERED);
        remembered.holds[..kept].iter().max().copied()
    }
}

impl RetryAfter {
    /// How long to tell the client, given the holder's `remaining` lease
    /// (`None`: unknown, or the holder let go) and this layer's `holds`.
    pub(crate) fn of(self, remaining: Option<Duration>, holds: &RecentHolds) -> Option<Duration> {
        let remaining = remaining?;
        let wanted = match self {
            RetryAfter::RecentHolds => holds.longest(),
            RetryAfter::Fixed(wait) => Some(wait),
        };
        Some(wanted.map_or(remaining, |wanted| wanted.min(remaining)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{RecentHolds, RetryAfter};

    #[test]
    fn recent_holds_bound_the_wait_by_their_longest_and_the_lease() {
        let holds = RecentHolds::default();
        let lease = Some(Duration::from_secs(20));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), lease);
        holds.record(Duration::from_millis(20));
        holds.record(Duration::from_millis(300));
        holds.record(Duration::from_millis(40));
        let longest = Some(Duration::from_millis(300));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), longest);
        let short = Some(Duration::from_millis(100));
        assert_eq!(RetryAfter::RecentHolds.of(short, &holds), short);
        assert_eq!(RetryAfter::RecentHolds.of(None, &holds), None);
        // The 300 ms hold is forgotten once 32 later ones were recorded.
        for _ in 0..32 {
            holds.record(Duration::from_millis(10));
        }
        let quick = Some(Duration::from_millis(10));
        assert_eq!(RetryAfter::RecentHolds.of(lease, &holds), quick);
    }
}
