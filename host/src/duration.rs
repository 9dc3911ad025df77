//! Go-style durations (`"5ms"`, `"1m30s"`, `"10h"`) as used in plugin manifests and flags.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct Error {
    pub input: String,
    pub reason: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a Go-style duration: one or more `<number><unit>` pairs such as `"5ms"`, `"1000s"`,
/// `"10h"`, `"1m30s"` or `"1.5s"`. Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`.
/// A bare `"0"` is zero; negative durations are rejected.
pub fn parse(input: &str) -> Result<Duration> {
    let invalid = |reason: &str| Error { input: input.to_owned(), reason: reason.to_owned() };
    let text = input.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid("empty"));
    }
    let mut total_nanos: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid("missing unit")),
            _ => return Err(invalid("unknown unit (use ns, us, ms, s, m or h)")),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("missing number"));
        }
        let digits = |s: &str| -> Result<u128> { if s.is_empty() { Ok(0) } else { s.parse::<u128>().map_err(|_| invalid("bad number")) } };
        let mut nanos = digits(whole)?.checked_mul(unit_nanos).ok_or_else(|| invalid("too large"))?;
        // Fraction digits beyond nanosecond precision are dropped.
        let fraction = &fraction[..fraction.len().min(18)];
        let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(18));
        nanos += digits(fraction)?.saturating_mul(unit_nanos) / scale;
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| invalid("too large"))?;
        rest = after;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| invalid("too large"))?;
    // The remainder is below 10^9, so it always fits a u32.
    let subsec = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// Formats a duration the way [`parse`] reads it back (e.g. `1m30s`, `250ms`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return if d.is_zero() { "0".into() } else { format!("{}us", d.as_micros()) };
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    for (v, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if v > 0 {
            out.push_str(&format!("{v}{unit}"));
        }
    }
    out
}

/// `#[serde(with = "crate::duration::serde")]` for a `Duration` written as `"5ms"`.
pub mod serde {
    use std::time::Duration;

    use ::serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(::serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*v))
    }
}

/// `#[serde(with = "crate::duration::serde_opt")]` for an `Option<Duration>`; `null`, `""`,
/// `"0"` and `"never"` mean `None`.
pub mod serde_opt {
    use std::time::Duration;

    use ::serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) if matches!(t.trim(), "" | "0" | "never") => Ok(None),
            Some(t) => super::parse(&t).map(Some).map_err(::serde::de::Error::custom),
        }
    }

    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&super::format(*d)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn parses_go_style_durations() {
        let cases = [
            ("5ms", 5 * MS),
            ("1000s", Duration::from_secs(1000)),
            ("10h", Duration::from_secs(36_000)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", 1500 * MS),
            (".5m", Duration::from_secs(30)),
            ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
            ("250µs", Duration::from_micros(250)),
            ("0", Duration::ZERO),
            (" 2s ", Duration::from_secs(2)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).ok(), Some(expected), "{text}");
        }
        for bad in ["", "5", "ms", "5x", "-5s", "1.2.3s", "5 s", "99999999999999999999999h"] {
            assert!(matches!(parse(bad), Err(Error { .. })), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn format_round_trips() {
        for d in [Duration::from_millis(5), Duration::from_secs(90), Duration::from_secs(36000), Duration::from_millis(1500)] {
            assert_eq!(parse(&format(d)).unwrap(), d, "{}", format(d));
        }
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
    }
}
