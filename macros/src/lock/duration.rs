//! Durations written as text, such as `"250ms"`, `"30s"` or `"1m30s"`, read
//! at compile time.

use std::fmt;

/// The forms a duration may take, for error messages.
pub(crate) const ACCEPTED_FORMS: &str = r#""250ms", "30s", "5m", "1h", "1m30s""#;

/// Units from largest to smallest, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Why a duration did not parse.
#[derive(Debug, PartialEq)]
pub(crate) enum DurationError {
    /// Not a sequence of number + unit.
    Malformed,
    /// Units out of order or repeated, such as `"30s1m"` or `"1s1s"`.
    UnitOrder,
    /// More milliseconds than fit in a `u64`.
    TooLarge,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DurationError::Malformed => {
                "write numbers each followed by a unit (`ms`, `s`, `m` or `h`)"
            }
            DurationError::UnitOrder => {
                "units must go from largest to smallest (`h`, `m`, `s`, `ms`), each at most once"
            }
            DurationError::TooLarge => "the duration is too large",
        })
    }
}

/// Parses a sequence of number + unit (`ms`, `s`, `m`, `h`), largest unit
/// first, into milliseconds.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Malformed);
    }
    let mut total: u64 = 0;
    // Index in `UNITS` of the smallest unit read so far.
    let mut last_unit: Option<usize> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let after_digits = &rest[digits..];
        let letters = after_digits.len()
            - after_digits
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        if digits == 0 || letters == 0 {
            return Err(DurationError::Malformed);
        }
        let unit = UNITS
            .iter()
            .position(|(name, _)| *name == &after_digits[..letters])
            .ok_or(DurationError::Malformed)?;
        if last_unit.is_some_and(|last| unit <= last) {
            return Err(DurationError::UnitOrder);
        }
        last_unit = Some(unit);
        let amount = rest[..digits]
            .parse::<u64>()
            .map_err(|_| DurationError::TooLarge)?;
        total = amount
            .checked_mul(UNITS[unit].1)
            .and_then(|millis| total.checked_add(millis))
            .ok_or(DurationError::TooLarge)?;
        rest = &after_digits[letters..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_units() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("30s"), Ok(30_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
    }

    #[test]
    fn combined_units() {
        assert_eq!(parse_millis("1m30s"), Ok(90_000));
        assert_eq!(parse_millis("1h2m3s4ms"), Ok(3_723_004));
        assert_eq!(parse_millis("2h500ms"), Ok(7_200_500));
    }

    #[test]
    fn zero_is_a_duration() {
        assert_eq!(parse_millis("0s"), Ok(0));
        assert_eq!(parse_millis("0ms"), Ok(0));
    }

    #[test]
    fn leading_zeros_and_large_numbers() {
        assert_eq!(parse_millis("007s"), Ok(7_000));
        assert_eq!(parse_millis("90s"), Ok(90_000));
        assert_eq!(parse_millis("1500ms"), Ok(1_500));
    }

    #[test]
    fn malformed_durations() {
        for text in [
            "", "30", "s", "ms", "30x", "30 s", " 30s", "30s ", "1.5s", "-1s", "30S", "30sec",
            "1m30", "m30s", "30s,", "٣s",
        ] {
            assert_eq!(
                parse_millis(text),
                Err(DurationError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn units_must_decrease() {
        for text in ["30s1m", "1s1s", "1ms1s", "1m1h", "1h1m1m"] {
            assert_eq!(
                parse_millis(text),
                Err(DurationError::UnitOrder),
                "{text:?}"
            );
        }
    }

    #[test]
    fn overflow_is_reported() {
        assert_eq!(
            parse_millis("99999999999999999999ms"),
            Err(DurationError::TooLarge)
        );
        assert_eq!(
            parse_millis("18446744073709551615h"),
            Err(DurationError::TooLarge)
        );
        assert_eq!(
            parse_millis("5124095576031h"),
            Err(DurationError::TooLarge),
            "product overflows"
        );
        assert_eq!(
            parse_millis("5124095576030h2000s"),
            Err(DurationError::TooLarge),
            "sum overflows"
        );
    }

    #[test]
    fn messages_name_the_rules() {
        assert!(DurationError::Malformed.to_string().contains("`ms`"));
        assert!(DurationError::UnitOrder
            .to_string()
            .contains("largest to smallest"));
    }
}
