//! Durations as people write them in settings and on command lines: a
//! number with a unit (`10ms`, `1.5s`, `500us`), parsed exactly (no
//! floating point: `0.1s` is 100 000 000 ns) and formatted back in the
//! largest whole unit.
//!
//! Owns: the one duration syntax of ffd (the `FFD_*` variables, the C API,
//! `ffd run`, `ffd sim`, `ffd rendezvous`). Must not: guess a unit: a bare
//! number is an error, because a silent unit is the classic tuning mistake.

use std::time::Duration;

/// The accepted form of every duration, for error messages.
pub const DURATION_FORM: &str = "a number with a unit ns|us|ms|s, e.g. `10ms`";

/// Why a duration did not parse (the `problem` of the library's `ConfigError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("is empty")]
    Empty,
    #[error("has no unit")]
    NoUnit,
    #[error("is not a duration")]
    Malformed,
    #[error("is finer than a nanosecond")]
    SubNanosecond,
    #[error("is too large")]
    TooLarge,
}

/// Parses a duration: a decimal number (optional fraction) and a unit
/// `ns`, `us`/`µs`, `ms` or `s`, optionally separated by spaces.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = (&text[..split], text[split..].trim_start());
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits_ok(int) || !digits_ok(frac) {
        return Err(DurationError::Malformed);
    }
    let scale: u128 = match unit {
        "" => return Err(DurationError::NoUnit),
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(DurationError::Malformed),
    };
    let mut nanos: u128 = 0;
    for b in int.bytes() {
        nanos = nanos
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(b - b'0')))
            .filter(|&n| n <= u128::from(u64::MAX))
            .ok_or(DurationError::TooLarge)?;
    }
    nanos = nanos.checked_mul(scale).ok_or(DurationError::TooLarge)?;
    // The fraction, exactly: every digit must land on a whole nanosecond.
    let mut place = scale;
    for b in frac.bytes() {
        let digit = u128::from(b - b'0');
        if place % 10 != 0 {
            if digit != 0 {
                return Err(DurationError::SubNanosecond);
            }
            continue;
        }
        place /= 10;
        nanos += digit * place;
    }
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| DurationError::TooLarge)
}

/// Formats a duration exactly in the largest whole unit (`1500ms`, `2s`,
/// `250us`); the output parses back with [`parse_duration`].
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (unit, scale) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if nanos != 0 && nanos % scale == 0 {
            return format!("{}{unit}", nanos / scale);
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_exactly() {
        let ok = [
            ("500us", Duration::from_micros(500)),
            ("500µs", Duration::from_micros(500)),
            ("10ms", Duration::from_millis(10)),
            (" 10 ms ", Duration::from_millis(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25ms", Duration::from_micros(250)),
            ("2s", Duration::from_secs(2)),
            (".5s", Duration::from_millis(500)),
            ("7ns", Duration::from_nanos(7)),
            ("1.000000000s", Duration::from_secs(1)),
            ("0s", Duration::ZERO),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        let bad = [
            ("", DurationError::Empty),
            ("10", DurationError::NoUnit),
            ("1.5", DurationError::NoUnit),
            ("10 parsecs", DurationError::Malformed),
            ("-5ms", DurationError::Malformed),
            ("1m", DurationError::Malformed),
            ("ms", DurationError::Malformed),
            (".ms", DurationError::Malformed),
            ("1.2.3s", DurationError::Malformed),
            ("1.5ns", DurationError::SubNanosecond),
            ("0.0000000001s", DurationError::SubNanosecond),
            ("99999999999999999999s", DurationError::TooLarge),
            ("18446744073709551616ns", DurationError::TooLarge),
        ];
        for (text, want) in bad {
            assert_eq!(parse_duration(text), Err(want), "{text}");
        }
    }

    #[test]
    fn durations_format_in_the_largest_whole_unit_and_round_trip() {
        for (d, text) in [
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_micros(250), "250us"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::ZERO, "0ns"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }
}
