//! How long a lease is certainly ours: its ttl less a safety margin for
//! clock drift and for the body to notice a loss. Every backend and the
//! watchdog count validity with these two functions.

use std::time::Duration;

/// Part of a lease the holder gives up at its end, as a share of the ttl:
/// the client's and the server's clocks may run at rates 1 % apart, and the
/// body needs time to observe the loss and stop (5 %).
const MARGIN_PERCENT: u32 = 6;
/// Fixed part of the safety margin, for tiny ttls.
const MARGIN_FLOOR: Duration = Duration::from_millis(2);

/// The safety margin of a lease of `ttl`: 6 % of it plus 2 ms.
pub(crate) fn safety_margin(ttl: Duration) -> Duration {
    ttl / 100 * MARGIN_PERCENT + MARGIN_FLOOR
}

/// How long after an acquisition or renewal was *sent* the holder treats its
/// lease as certainly valid: the ttl less the [`safety_margin`]. The server
/// keeps the key for the full ttl from when it *ran* the command, which is
/// later, so the holder's view always ends first.
pub(crate) fn validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(safety_margin(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_six_percent_plus_two_ms() {
        assert_eq!(
            safety_margin(Duration::from_secs(1)),
            Duration::from_millis(62)
        );
        assert_eq!(
            validity(Duration::from_secs(30)),
            Duration::from_millis(28_198)
        );
    }

    #[test]
    fn a_tiny_ttl_has_no_validity_rather_than_underflowing() {
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
    }
}
