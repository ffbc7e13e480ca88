//! Numbers as Redis reads and writes them: strict integers, scores, and doubles printed with
//! C's `%.17g` (how Redis 7.0 writes a Lua number passed to a command, and a score).

/// An integer argument as Redis's `string2ll` accepts it: an optional `-`, then `0` alone or
/// digits without a leading zero; no `+`, no spaces, no overflow.
pub(super) fn parse_integer(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = digits == "0" && digits.len() == text.len()
        || digits.starts_with(|c: char| ('1'..='9').contains(&c));
    if !canonical || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A score as Redis reads one: a decimal or `inf`, never NaN.
pub(super) fn parse_score(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.starts_with(char::is_whitespace) {
        return None;
    }
    text.parse::<f64>().ok().filter(|value| !value.is_nan())
}

/// `value` as C's `printf("%.17g")` writes it: 17 significant digits, trailing zeros
/// dropped, in exponent form (`1e+20`) below 1e-4 or from 1e17 on.
pub(super) fn format_g17(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // The exponent is that of the value rounded to 17 digits, as %g decides it.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("Rust's exponent format has an exponent");
    let exponent: i32 = exponent.parse().expect("the exponent is a number");
    if !(-4..17).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        let magnitude = exponent.unsigned_abs();
        format!("{}e{sign}{magnitude:02}", trim_fraction(mantissa))
    } else {
        let decimals = usize::try_from(16 - exponent).expect("the exponent is below 17");
        trim_fraction(&format!("{value:.decimals$}")).to_owned()
    }
}

/// A Lua number as Redis replies it: truncated toward zero, and, out of range (or NaN),
/// the value the C cast gives on x86-64, `i64::MIN`.
pub(super) fn lua_number_to_integer(value: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if value.is_nan() || !(-LIMIT..LIMIT).contains(&value) {
        i64::MIN
    } else {
        value.trunc() as i64
    }
}

/// Drops trailing zeros of a fraction, and the point if nothing is left after it.
fn trim_fraction(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g17_writes_what_redis_stores_for_a_lua_number() {
        // Each pair was read back from redis-server 7.0 after `SET n <number>` in a script.
        let cases = [
            (1.5, "1.5"),
            (1e20, "1e+20"),
            (0.1, "0.10000000000000001"),
            (-0.0, "-0"),
            (1e-5, "1.0000000000000001e-05"),
            (123_456.789, "123456.789"),
            (12_345_678_901_234_567_890.0, "1.2345678901234567e+19"),
            (1_796_121_222_786.0, "1796121222786"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (f64::INFINITY, "inf"),
        ];
        for (value, text) in cases {
            assert_eq!(format_g17(value), text, "{value}");
        }
    }

    #[test]
    fn integers_are_strict_and_scores_are_never_nan() {
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"-12"), Some(-12));
        for refused in [
            &b"01"[..],
            b"+1",
            b" 1",
            b"-0",
            b"1.0",
            b"",
            b"-",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_integer(refused), None, "{refused:?}");
        }
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b" 1"), None);
        assert_eq!(lua_number_to_integer(-3.9), -3);
        assert_eq!(lua_number_to_integer(1e300), i64::MIN);
    }
}
