//! Human-readable durations on the command line: `30s`, `500ms`, `2m`, `1h30m`, `1.5s`.

use std::time::Duration;

/// The units a duration may be written in, longest spelling first so that `ms` is not
/// read as `m` followed by garbage, with their length in nanoseconds.
const UNITS: &[(&str, u128)] = &[
    ("milliseconds", NANOS_PER_MS),
    ("millisecond", NANOS_PER_MS),
    ("seconds", NANOS_PER_S),
    ("minutes", 60 * NANOS_PER_S),
    ("second", NANOS_PER_S),
    ("minute", 60 * NANOS_PER_S),
    ("hours", 3600 * NANOS_PER_S),
    ("hour", 3600 * NANOS_PER_S),
    ("days", 86_400 * NANOS_PER_S),
    ("msec", NANOS_PER_MS),
    ("secs", NANOS_PER_S),
    ("mins", 60 * NANOS_PER_S),
    ("day", 86_400 * NANOS_PER_S),
    ("sec", NANOS_PER_S),
    ("min", 60 * NANOS_PER_S),
    ("hrs", 3600 * NANOS_PER_S),
    ("hr", 3600 * NANOS_PER_S),
    ("ms", NANOS_PER_MS),
    ("s", NANOS_PER_S),
    ("m", 60 * NANOS_PER_S),
    ("h", 3600 * NANOS_PER_S),
    ("d", 86_400 * NANOS_PER_S),
];

/// Nanoseconds in a millisecond.
const NANOS_PER_MS: u128 = 1_000_000;
/// Nanoseconds in a second.
const NANOS_PER_S: u128 = 1_000_000_000;

/// Parses a duration such as `30s`, `500ms`, `2m`, `1h`, `1h30m`, `1.5s` or `2 min`.
///
/// A duration is one or more `<number><unit>` parts (spaces allowed between them and
/// between a number and its unit), added up. Units: `ms`, `s`, `m`, `h`, `d` and their
/// long spellings (`sec`, `min`, `hours`, ...). A number without a unit is refused, since
/// `--ttl 30` could mean seconds or milliseconds; the error says how to write it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let input = text.trim();
    if input.is_empty() {
        return Err("empty duration: write it with a unit, such as 30s, 500ms, 2m or 1h".into());
    }
    let mut rest = input;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(format!(
                "invalid duration {input:?}: expected a number at {rest:?} \
                 (write it like 30s, 500ms, 2m, 1h or 1h30m)"
            ));
        }
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!(
                "invalid duration {input:?}: {number:?} has no unit \
                 (write {number}s for seconds or {number}ms for milliseconds)"
            ));
        }
        let unit_nanos = UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|(_, nanos)| *nanos)
            .ok_or_else(|| {
                format!(
                    "invalid duration {input:?}: unknown unit {unit:?} \
                     (use ms, s, m, h or d)"
                )
            })?;
        let part = scale(number, unit_nanos)
            .map_err(|why| format!("invalid duration {input:?}: {number:?} {why}"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("invalid duration {input:?}: too long"))?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total / NANOS_PER_S)
        .map_err(|_| format!("invalid duration {input:?}: too long"))?;
    // The remainder of a division by 10^9 always fits in u32.
    let nanos = u32::try_from(total % NANOS_PER_S).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// `number` (digits with at most one decimal point) times `unit_nanos`, in nanoseconds.
/// Digits beyond nanosecond precision are dropped.
fn scale(number: &str, unit_nanos: u128) -> Result<u128, &'static str> {
    const NOT_A_NUMBER: &str = "is not a number";
    const TOO_LONG: &str = "is too long";
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(NOT_A_NUMBER);
    }
    // Only ASCII digits are left, so a failed parse is an overflow.
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| TOO_LONG)?
    };
    let mut nanos = whole.checked_mul(unit_nanos).ok_or(TOO_LONG)?;
    let mut place = unit_nanos;
    for digit in fraction.bytes() {
        place /= 10;
        nanos = nanos
            .checked_add(u128::from(digit - b'0') * place)
            .ok_or(TOO_LONG)?;
    }
    Ok(nanos)
}

/// A duration as a person reads it: `250ms`, `1.5s`, `29.7s`, `2m30s`, `1h`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1_000 {
        return format!("{millis}ms");
    }
    if millis < 60_000 {
        let tenths = millis / 100;
        return if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut text = String::new();
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 {
        text.push_str(&format!("{seconds}s"));
    }
    text
}

/// Whole milliseconds, saturating, for JSON output.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_the_usual_forms() {
        for (text, expected) in [
            ("30s", Duration::from_secs(30)),
            ("500ms", ms(500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1d", Duration::from_secs(86_400)),
            ("1h30m", Duration::from_secs(5400)),
            ("1m 30s", Duration::from_secs(90)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("0.25m", Duration::from_secs(15)),
            ("2 min", Duration::from_secs(120)),
            ("10 seconds", Duration::from_secs(10)),
            ("3 hours", Duration::from_secs(3 * 3600)),
            ("1msec", ms(1)),
            (" 10S ", Duration::from_secs(10)),
            ("0s", Duration::ZERO),
            ("1.0000000001s", Duration::from_secs(1)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn refuses_bare_numbers_with_a_hint() {
        let err = parse_duration("30").unwrap_err();
        assert!(err.contains("no unit"), "{err}");
        assert!(err.contains("30s") && err.contains("30ms"), "{err}");
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for (text, reason) in [
            ("", "empty"),
            ("   ", "empty"),
            ("s", "expected a number"),
            ("10x", "unknown unit"),
            ("10 parsecs", "unknown unit"),
            ("1.2.3s", "not a number"),
            (".s", "not a number"),
            ("-5s", "expected a number"),
            ("5s-", "expected a number"),
            ("99999999999999999999999999999999999999d", "too long"),
            ("999999999999999999999999999999999999999999s", "too long"),
            ("999999999999999999999d", "too long"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(reason), "{text:?}: {err}");
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(ms(0)), "0ms");
        assert_eq!(format_duration(ms(250)), "250ms");
        assert_eq!(format_duration(ms(1000)), "1s");
        assert_eq!(format_duration(ms(1540)), "1.5s");
        assert_eq!(format_duration(ms(29_700)), "29.7s");
        assert_eq!(format_duration(Duration::from_secs(150)), "2m30s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_secs(3661)), "1h1m1s");
    }

    #[test]
    fn formatted_durations_parse_back() {
        for d in [
            ms(250),
            ms(1500),
            Duration::from_secs(150),
            Duration::from_secs(3661),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
