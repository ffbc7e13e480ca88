//! Durations on the command line, through `humantime`: `30s`, `500ms`, `2m`, `1h30m`,
//! `1.5s`, `2 min`.

use std::time::Duration;

/// Parses a duration with a unit, such as `30s`, `500ms`, `2m`, `1h`, `1h 30m` or `1.5s`.
///
/// A number without a unit is refused, since `--ttl 30` could mean seconds or
/// milliseconds; the error says how to write it (humantime's own message for it names
/// neither).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let input = text.trim();
    if input.is_empty() {
        return Err("empty duration: write it with a unit, such as 30s, 500ms, 2m or 1h".into());
    }
    if is_bare_number(input) {
        return Err(format!(
            "invalid duration {input:?}: {input:?} has no unit \
             (write {input}s for seconds or {input}ms for milliseconds)"
        ));
    }
    humantime::parse_duration(input).map_err(|error| {
        format!("invalid duration {input:?}: {error} (write it like 30s, 500ms, 2m, 1h or 1h30m)")
    })
}

/// Parses `-w`/`--wait`: a duration with a unit, or a bare number of seconds as flock(1)
/// takes it (`-w 5`, `-w 0.5`).
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    let input = text.trim();
    if is_bare_number(input) {
        return Duration::try_from_secs_f64(input.parse::<f64>().map_err(|e| e.to_string())?)
            .map_err(|error| format!("invalid duration {input:?}: {error}"));
    }
    parse_duration(input)
}

/// Digits with at most one decimal point, and at least one digit.
fn is_bare_number(text: &str) -> bool {
    text.bytes().any(|b| b.is_ascii_digit())
        && text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && text.bytes().filter(|&b| b == b'.').count() <= 1
}

/// A duration as a person reads it, to the millisecond below a minute and to the second
/// above: `250ms`, `1s 500ms`, `2m 30s`.
pub fn format_duration(duration: Duration) -> String {
    let rounded = if duration < Duration::from_secs(60) {
        Duration::from_millis(millis(duration))
    } else {
        Duration::from_secs(duration.as_secs())
    };
    humantime::format_duration(rounded).to_string()
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
            ("2 min", Duration::from_secs(120)),
            ("10 seconds", Duration::from_secs(10)),
            (" 10s ", Duration::from_secs(10)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn refuses_bare_numbers_with_a_hint() {
        for text in ["30", "1.5"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("no unit"), "{err}");
            assert!(err.contains(&format!("{text}s")), "{err}");
        }
    }

    #[test]
    fn wait_takes_bare_seconds_as_flock_does() {
        assert_eq!(parse_wait("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_wait("0.5"), Ok(ms(500)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_wait("5x").is_err());
        assert!(parse_wait("-5").is_err());
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for text in ["", "s", "10x", "-5s", "1.2.3s"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("duration"), "{text:?}: {err}");
        }
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(ms(0)), "0s");
        assert_eq!(format_duration(ms(250)), "250ms");
        assert_eq!(format_duration(ms(1000)), "1s");
        assert_eq!(
            format_duration(Duration::from_micros(1_540_400)),
            "1s 540ms"
        );
        assert_eq!(format_duration(Duration::from_millis(150_500)), "2m 30s");
        assert_eq!(format_duration(Duration::from_secs(3661)), "1h 1m 1s");
        for d in [ms(250), ms(1500), Duration::from_secs(150)] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
