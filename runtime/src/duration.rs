//! Durations written as text, as the attribute takes them (`"250ms"`,
//! `"30s"`, `"1m30s"`) and as `humantime` writes them (`"1m 30s"`,
//! `"2days 3h"`, `"250us"`): the public parser behind settings read from a
//! configuration file.

use std::fmt;
use std::time::Duration;

/// The forms [`parse_duration`] accepts, for error messages.
pub const ACCEPTED_DURATIONS: &str = r#""250ms", "30s", "5m", "1h", "1m30s", or as humantime writes them ("1m 30s", "2days 3h", "250us"); units ns, us, ms, s, m, h, d, w, months, years, largest first"#;

/// Units from largest to smallest: their names and their length in
/// nanoseconds (a month and a year as humantime counts them: 30.44 and
/// 365.25 days).
const UNITS: [(&[&str], u128); 10] = [
    (&["years", "year", "y"], 31_557_600_000_000_000),
    (&["months", "month", "M"], 2_630_016_000_000_000),
    (&["weeks", "week", "w"], 604_800_000_000_000),
    (&["days", "day", "d"], 86_400_000_000_000),
    (&["hours", "hour", "hrs", "hr", "h"], 3_600_000_000_000),
    (&["minutes", "minute", "mins", "min", "m"], 60_000_000_000),
    (&["seconds", "second", "secs", "sec", "s"], 1_000_000_000),
    (
        &["milliseconds", "millisecond", "msecs", "msec", "ms"],
        1_000_000,
    ),
    (
        &["microseconds", "microsecond", "usecs", "usec", "us", "µs"],
        1_000,
    ),
    (&["nanoseconds", "nanosecond", "nsecs", "nsec", "ns"], 1),
];

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationError {
    /// Not a sequence of numbers each followed by a unit.
    Malformed(String),
    /// A unit that is not one of the accepted ones.
    UnknownUnit(String),
    /// Units out of order or repeated, such as `"30s1m"`.
    UnitOrder(String),
    /// Longer than a [`Duration`] holds.
    TooLarge(String),
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Malformed(text) => write!(
                f,
                "`{text}` is not a duration: write numbers each followed by a unit"
            )?,
            DurationError::UnknownUnit(unit) => write!(f, "`{unit}` is not a unit of duration")?,
            DurationError::UnitOrder(text) => write!(
                f,
                "`{text}` is not a duration: units go from largest to smallest, each at most once"
            )?,
            DurationError::TooLarge(text) => write!(f, "`{text}` is too long a duration")?,
        }
        write!(f, "; accepted forms: {ACCEPTED_DURATIONS}")
    }
}

impl std::error::Error for DurationError {}

/// Reads `text` as a duration: numbers each followed by a unit, largest unit
/// first, each unit at most once, with or without spaces between them
/// (`"250ms"`, `"1m30s"`, `"1m 30s"`, `"2days 3h"`). The attribute's forms
/// and what `humantime::format_duration` writes both read back exactly.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    let malformed = || DurationError::Malformed(text.to_owned());
    if trimmed.is_empty() {
        return Err(malformed());
    }
    let mut total: u128 = 0;
    let mut smallest: Option<usize> = None;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let after = rest[digits..].trim_start();
        let letters = after.len() - after.trim_start_matches(char::is_alphabetic).len();
        if digits == 0 || letters == 0 {
            return Err(malformed());
        }
        let name = &after[..letters];
        let unit = UNITS
            .iter()
            .position(|(names, _)| names.contains(&name))
            .ok_or_else(|| DurationError::UnknownUnit(name.to_owned()))?;
        if smallest.is_some_and(|smallest| unit <= smallest) {
            return Err(DurationError::UnitOrder(text.to_owned()));
        }
        smallest = Some(unit);
        let too_large = || DurationError::TooLarge(text.to_owned());
        let amount: u128 = rest[..digits].parse().map_err(|_| too_large())?;
        total = amount
            .checked_mul(UNITS[unit].1)
            .and_then(|nanos| total.checked_add(nanos))
            .ok_or_else(too_large)?;
        rest = after[letters..].trim_start();
    }
    let secs = u64::try_from(total / 1_000_000_000)
        .map_err(|_| DurationError::TooLarge(text.to_owned()))?;
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_forms_read_as_the_attribute_reads_them() {
        for (text, millis) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1m30s", 90_000),
            ("1h2m3s4ms", 3_723_004),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(millis)));
        }
    }

    #[test]
    fn what_humantime_writes_reads_back() {
        let day = 86_400;
        for (text, expected) in [
            ("1m 30s", Duration::from_secs(90)),
            ("2days 3h", Duration::from_secs(2 * day + 3 * 3_600)),
            ("1year", Duration::from_secs(31_557_600)),
            ("1month", Duration::from_secs(2_630_016)),
            ("1s 250ms 7us 3ns", Duration::new(1, 250_007_003)),
            ("30 seconds", Duration::from_secs(30)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn mistakes_are_named_with_the_accepted_forms() {
        for (text, says) in [
            ("", "is not a duration"),
            ("30", "write numbers each followed by a unit"),
            ("ms", "write numbers each followed by a unit"),
            ("30 parsecs", "`parsecs` is not a unit"),
            ("30s1m", "largest to smallest"),
            ("1s1s", "largest to smallest"),
            ("99999999999999999999999999999999999999999h", "too long"),
            ("-1s", "is not a duration"),
        ] {
            let message = parse_duration(text).unwrap_err().to_string();
            assert!(message.contains(says), "{text}: {message}");
            assert!(message.contains(r#""1m30s""#), "{text}: {message}");
        }
    }
}
