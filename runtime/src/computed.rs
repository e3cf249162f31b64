//! Attribute settings written as expressions (`ttl = self.config.ttl`,
//! `permits = limits::PAYMENTS`): each call computes them before the lock is
//! taken, and [`Computed`] checks their values as the attribute checks a
//! literal at compile time, so that a bad value from configuration is an
//! `InvalidOptions` error of that call, never a panic.

use std::time::Duration;

use crate::{LockError, LockOptions};

/// [`LockOptions`] being given the settings a call computed, or the error of
/// the first one that cannot be used. Not a stable API: the
/// `#[distributed_lock]` expansion builds it.
#[derive(Debug)]
pub struct Computed(Result<LockOptions, LockError>);

impl Computed {
    /// Starts from `options`, which hold the settings written as literals.
    pub fn new(options: LockOptions) -> Self {
        Computed(Ok(options))
    }

    /// `ttl = expr`: at least 1 ms (longer than 365 days fails when
    /// acquiring, as for [`LockOptions::ttl`]).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.set(
            positive("ttl", ttl, "the lease would expire before the body runs"),
            LockOptions::ttl,
        )
    }

    /// `wait = expr`: any duration; zero means one attempt.
    pub fn wait(self, wait: Duration) -> Self {
        self.set(Ok(wait), LockOptions::wait)
    }

    /// `hold_at_least = expr`: above zero (leave the option out to release
    /// at once); longer than 365 days fails when acquiring.
    pub fn hold_at_least(self, hold: Duration) -> Self {
        let hold = positive(
            "hold_at_least",
            hold,
            "leave the option out to release at once",
        );
        self.set(hold, LockOptions::hold_at_least)
    }

    /// `min_replicas = expr` with `replica_timeout = expr` if written: at
    /// least one replica and a timeout of at least 1 ms (one not shorter
    /// than the ttl fails when acquiring).
    pub fn min_replicas(self, replicas: u32, timeout: Option<Duration>) -> Self {
        let requirement = match (replicas, timeout) {
            (0, _) => Err(invalid(
                "`min_replicas` is 0: write at least 1, or leave the option out",
            )),
            (_, Some(timeout)) => positive(
                "replica_timeout",
                timeout,
                "Redis `WAIT` with 0 would block forever",
            )
            .map(Some),
            (_, None) => Ok(None),
        };
        self.set(requirement, |options, timeout| match timeout {
            Some(timeout) => options.min_replicas(replicas, timeout),
            None => options.min_replicas_default_timeout(replicas),
        })
    }

    /// The options, or the error of the first setting that cannot be used.
    pub fn finish(self) -> Result<LockOptions, LockError> {
        self.0
    }

    /// Applies `value` with `setter` unless it or an earlier setting is an error.
    fn set<T>(
        self,
        value: Result<T, LockError>,
        setter: impl FnOnce(LockOptions, T) -> LockOptions,
    ) -> Self {
        Computed(self.0.and_then(|options| Ok(setter(options, value?))))
    }
}

/// `permits = expr`: at least 1.
pub fn permits(permits: u32) -> Result<u32, LockError> {
    match permits {
        0 => Err(invalid(
            "`permits` is 0: a semaphore of 0 permits admits nobody; write at least 1",
        )),
        permits => Ok(permits),
    }
}

/// What a call returns when a setting it computed cannot be used: the
/// error, converted to the function's error type (here, so that the
/// expansion has no conversion that a lint could call useless).
pub fn refused<T, E: From<LockError>>(error: LockError) -> Result<T, E> {
    Err(error.into())
}

/// `value` if it is at least 1 ms, else the error that says why it must be.
fn positive(option: &str, value: Duration, why: &str) -> Result<Duration, LockError> {
    if value < Duration::from_millis(1) {
        return Err(invalid(&format!(
            "`{option}` is {value:?}, it must be at least 1ms: {why}"
        )));
    }
    Ok(value)
}

/// The error of a computed setting.
fn invalid(message: &str) -> LockError {
    LockError::InvalidOptions(format!(
        "#[distributed_lock] setting computed by this call: {message}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<LockOptions, LockError>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn values_in_range_reach_the_options() {
        let options = Computed::new(LockOptions::new())
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO)
            .hold_at_least(Duration::from_secs(60))
            .min_replicas(1, None)
            .finish()
            .expect("accepted");
        let expected = LockOptions::new()
            .ttl(Duration::from_secs(5))
            .hold_at_least(Duration::from_secs(60))
            .min_replicas_default_timeout(1);
        assert_eq!(options, expected);
    }

    #[test]
    fn zero_where_a_literal_would_not_compile_is_invalid() {
        let zero = Duration::ZERO;
        let start = || Computed::new(LockOptions::new());
        assert!(message(start().ttl(zero).finish()).contains("`ttl` is 0ns"));
        assert!(message(start().hold_at_least(zero).finish()).contains("`hold_at_least` is 0ns"));
        assert!(message(start().min_replicas(0, None).finish()).contains("`min_replicas` is 0"));
        assert!(message(start().min_replicas(1, Some(zero)).finish()).contains("`replica_timeout`"));
        assert!(matches!(permits(0), Err(LockError::InvalidOptions(_))));
        assert_eq!(permits(3).ok(), Some(3));
    }

    #[test]
    fn sub_millisecond_ttl_is_invalid() {
        let ttl = Duration::from_micros(999);
        assert!(message(Computed::new(LockOptions::new()).ttl(ttl).finish()).contains("999"));
    }

    #[test]
    fn the_first_error_is_kept() {
        let result = Computed::new(LockOptions::new())
            .ttl(Duration::ZERO)
            .hold_at_least(Duration::ZERO)
            .finish();
        assert!(message(result).contains("`ttl`"));
    }
}
