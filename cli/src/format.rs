//! How durations, times and holders read in text output.

use std::time::{Duration, SystemTime};

use leasehold::Holder;

/// `duration` in at most two units: `850ms`, `12.3s`, `4m05s`, `2h03m`, `3d04h`.
pub fn duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{}ms", duration.as_millis()),
        1..60 => format!("{:.1}s", duration.as_secs_f64()),
        60..3_600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3_600..86_400 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// How long ago `then` was, by this machine's clock; zero when `then` is
/// ahead of it (the holder's clock runs ahead of ours).
pub fn since(then: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or(Duration::ZERO)
}

/// `then` as milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(then: SystemTime) -> u64 {
    then.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// `then` as `HH:MM:SS` UTC.
pub fn clock(then: SystemTime) -> String {
    let secs = unix_ms(then) / 1_000;
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3_600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

/// `manager (pid N on host)`, or `an unnamed holder` for a token that
/// records no identity.
pub fn holder(holder: Option<&Holder>) -> String {
    match holder {
        Some(holder) => format!("{} (pid {} on {})", holder.manager, holder.pid, holder.host),
        None => "an unnamed holder".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_two_units_at_most() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(duration(Duration::from_secs(2 * 3_600 + 180)), "2h03m");
        assert_eq!(
            duration(Duration::from_secs(3 * 86_400 + 4 * 3_600)),
            "3d04h"
        );
    }

    #[test]
    fn a_holder_clock_ahead_of_ours_was_never_in_the_future() {
        let now = SystemTime::now();
        assert_eq!(since(now + Duration::from_secs(5), now), Duration::ZERO);
        assert_eq!(
            since(now - Duration::from_secs(5), now),
            Duration::from_secs(5)
        );
    }
}
