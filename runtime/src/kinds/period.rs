//! Jobs run at most once per period, whatever the instances' clocks and
//! phases: the period's start goes into the key, and the lock on that key
//! stays until one period after the period's end (a holder that crashes
//! keeps it that long too), so a fleet whose timers fire at different
//! moments of the period finds it held and skips.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{LockError, LockManager, LockOptions};

/// The longest period: half the longest lease, as a period's key is kept
/// for two periods.
const MAX_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600 / 2);

impl LockManager {
    /// Runs `body` at most once per `period` of `key` across every instance:
    /// under the lock on `key@START`, `START` the period's start in Unix
    /// seconds (periods are aligned to the Unix epoch by this machine's
    /// clock: `"1h"` runs on the hour), taken with one attempt. The lock is
    /// held while `body` runs and, renewed or not, until one period after
    /// the period's end (an instance whose clock runs behind by up to a
    /// period still finds it), so an instance that fires later in the same
    /// period, however late, skips: `Ok(None)`, logged at debug with the
    /// period. The options' ttl and `hold_at_least` are raised to that end
    /// if shorter. `InvalidOptions` for a period under one second, not in
    /// whole seconds, or over half a year.
    pub async fn try_once_per_period<F: Future>(
        &self,
        key: &str,
        period: Duration,
        options: LockOptions,
        body: F,
    ) -> Result<Option<F::Output>, LockError> {
        let (period_key, options) = in_period(key, period, options, SystemTime::now())?;
        let ran = self.try_with_lock(&period_key, options, body).await?;
        if ran.is_none() {
            tracing::debug!(
                key,
                period_key,
                ?period,
                "this period already ran or runs elsewhere: skipped"
            );
        }
        Ok(ran)
    }
}

/// The key of `key`'s period at `now`, and `options` raised to keep it
/// until one period past that period's end.
fn in_period(
    key: &str,
    period: Duration,
    options: LockOptions,
    now: SystemTime,
) -> Result<(String, LockOptions), LockError> {
    if period < Duration::from_secs(1) || period.subsec_nanos() != 0 || period > MAX_PERIOD {
        return Err(LockError::InvalidOptions(format!(
            "period {period:?} must be whole seconds, at least 1 s and at most half a year (its key is kept two periods)"
        )));
    }
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, length) = (since_epoch.as_secs(), period.as_secs());
    let start = secs - secs % length;
    let kept_until = Duration::from_secs(start + 2 * length);
    let left = kept_until.saturating_sub(since_epoch);
    let ttl = options.ttl.max(left);
    let hold = options.hold_at_least.unwrap_or_default().max(left);
    let options = options.ttl(ttl).hold_at_least(hold);
    Ok((format!("{key}@{start}"), options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_the_periods_start_and_is_kept_a_period_past_its_end() {
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        let hour = Duration::from_secs(3_600);
        let (key, options) = in_period("job", hour, LockOptions::new(), at(7_200 + 600)).unwrap();
        assert_eq!(key, "job@7200");
        assert_eq!(options.ttl, Duration::from_secs(2 * 3_600 - 600));
        assert_eq!(
            options.hold_at_least,
            Some(Duration::from_secs(2 * 3_600 - 600))
        );
        let (later, _) = in_period("job", hour, LockOptions::new(), at(7_200 + 3_599)).unwrap();
        assert_eq!(later, key);
        let (next, _) = in_period("job", hour, LockOptions::new(), at(10_800)).unwrap();
        assert_eq!(next, "job@10800");
    }

    #[test]
    fn odd_periods_are_refused() {
        for period in [
            Duration::ZERO,
            Duration::from_millis(500),
            Duration::from_millis(1_500),
            MAX_PERIOD + Duration::from_secs(1),
        ] {
            let refused = in_period("job", period, LockOptions::new(), SystemTime::now());
            assert!(
                matches!(refused, Err(LockError::InvalidOptions(_))),
                "{period:?}"
            );
        }
    }
}
