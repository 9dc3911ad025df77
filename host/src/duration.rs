//! Go-style durations (`"5ms"`, `"1m30s"`, `"10h"`) as used in plugin manifests and flags.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason}")]
pub struct Error {
    /// The text as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A result whose error is a duration that does not parse.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The longest duration [`parse`] accepts: 100 years (`876000h`).
///
/// Every parsed duration becomes a deadline somewhere (`Instant::now() + d`: a resync period, a
/// shutdown grace, a plugin's timeout in epoch ticks), and one past the clock's range (about
/// 292 billion years, less than `Duration::MAX`) would panic there: `resync: 5124095576030431h`
/// did, found by `fuzz_manifest`. Nothing needs more than this; `never` turns a resync off.
pub const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a Go-style duration: one or more `<number><unit>` pairs such as `"5ms"`, `"1000s"`,
/// `"10h"`, `"1m30s"` or `"1.5s"`. Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`.
/// A bare `"0"` is zero; negative durations, and those longer than [`MAX`], are rejected.
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
    if total_nanos > MAX.as_nanos() {
        return Err(invalid("too large (at most 876000h, 100 years)"));
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| invalid("too large"))?;
    // The remainder is below 10^9, so it always fits a u32.
    let subsec = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// Formats a duration the way [`parse`] reads it back (up to [`MAX`]), exactly: `h`, `m` and `s` for whole
/// seconds (`1m30s`), else in the largest of `ms`, `us` and `ns` that it is a whole number of
/// (`250ms`, `1500us`, `1000001ns`). (It used to cut what was below a millisecond, or below a
/// microsecond under one: `1ns` printed as `0us`, found by `fuzz_duration_format_round_trips`.)
pub fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0".into();
    }
    let nanos = d.as_nanos();
    if !nanos.is_multiple_of(1_000) {
        return format!("{nanos}ns");
    }
    if !nanos.is_multiple_of(1_000_000) {
        return format!("{}us", d.as_micros());
    }
    let ms = d.as_millis();
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

    /// Parse a Go-style duration string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(::serde::de::Error::custom)
    }

    /// Write the duration in its shortest Go-style form.
    pub fn serialize<S: Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*v))
    }
}

/// `#[serde(with = "crate::duration::serde_opt")]` for an `Option<Duration>`; `null`, `""`,
/// `"0"` and `"never"` mean `None`.
pub mod serde_opt {
    use std::time::Duration;

    use ::serde::{Deserialize, Deserializer, Serializer};

    /// Parse a Go-style duration string; `null`, `""`, `"0"` and `"never"` are `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) if matches!(t.trim(), "" | "0" | "never") => Ok(None),
            Some(t) => super::parse(&t).map(Some).map_err(::serde::de::Error::custom),
        }
    }

    /// Write `Some` in its shortest Go-style form, `None` as `null`.
    pub fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&super::format(*d)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

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

    /// Found by `fuzz_duration_format_round_trips`: what was below a millisecond (or below a
    /// microsecond under one) was cut, so `1ns` printed as `0us` and read back as zero.
    #[test]
    fn format_keeps_sub_millisecond_parts() {
        for (d, text) in [
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1500), "1500ns"),
            (Duration::from_micros(1500), "1500us"),
            (Duration::new(1, 1), "1000000001ns"),
            (Duration::from_millis(1500), "1500ms"),
            (MAX, "876000h"),
        ] {
            assert_eq!(format(d), text);
            assert_eq!(parse(text), Ok(d), "{text}");
        }
    }

    /// Found by `fuzz_manifest`: `resync: 5124095576030431h` parsed, and adding it to the clock
    /// panicked in the controller's resync task. Durations past [`MAX`] are refused.
    #[test]
    fn durations_past_max_are_refused() {
        assert_eq!(parse("876000h"), Ok(MAX));
        for text in ["876000h1ns", "5124095576030431h", "18446744073709551615999999999ns"] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.reason, "too large (at most 876000h, 100 years)", "{text}");
            assert!(Instant::now().checked_add(MAX).is_some());
        }
    }

    /// Number and unit pieces of durations, valid and not.
    fn duration_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let number = prop_oneof![
            4 => "[0-9]{1,4}",
            2 => "[0-9]{1,4}\\.[0-9]{1,9}",
            1 => "[0-9]{0,25}",
            1 => "[0-9]{0,3}\\.[0-9]{0,22}",
            1 => prop::sample::select(&[".", "1.2.3", "-1", "１"][..]).prop_map(str::to_owned),
        ];
        let valid = prop::sample::select(&["ns", "us", "µs", "μs", "ms", "s", "m", "h"][..]);
        let unit = prop_oneof![4 => valid, 1 => prop::sample::select(&["", "x", "sec", " s", "-", "e3", "H"][..])];
        prop_oneof![
            1 => any::<String>(),
            4 => (prop::collection::vec((number, unit), 1..5), prop::sample::select(&["", "", "", " ", "-", "+"][..]))
                .prop_map(|(parts, sign)| format!("{sign}{}", parts.into_iter().map(|(n, u)| format!("{n}{u}")).collect::<String>())),
        ]
    }

    /// `parse` on any text: never panics, a refusal quotes the input and gives a reason. A
    /// duration of whole numbers with units parses to their exact sum (or "too large" past
    /// [`MAX`]).
    #[test]
    fn fuzz_duration_parse() {
        use proptest::prelude::*;
        let number = prop_oneof![0u64..1000, 0u64..1_000_000_000_000, 0u64..10_000_000_000_000_000];
        let whole = prop::collection::vec((number, prop::sample::select(&["ns", "us", "µs", "ms", "s", "m", "h"][..])), 1..5);
        crate::fuzz::run(file!(), "duration-parse", (duration_text(), whole), |(text, parts)| {
            let accepted = match parse(&text) {
                Ok(_) => true,
                Err(e) => {
                    prop_assert_eq!(&e.input, &text);
                    prop_assert!(!e.reason.is_empty());
                    false
                }
            };
            let text: String = parts.iter().map(|(n, u)| format!("{n}{u}")).collect();
            let nanos: u128 = parts
                .iter()
                .map(|(n, u)| {
                    let scale: u128 = match *u {
                        "ns" => 1,
                        "us" | "µs" => 1_000,
                        "ms" => 1_000_000,
                        "s" => 1_000_000_000,
                        "m" => 60_000_000_000,
                        _ => 3_600_000_000_000,
                    };
                    u128::from(*n) * scale
                })
                .sum();
            let expected = u64::try_from(nanos / 1_000_000_000).map(|secs| Duration::new(secs, (nanos % 1_000_000_000) as u32));
            match (parse(&text), expected.ok().filter(|d| *d <= MAX).ok_or(())) {
                (Ok(d), Ok(want)) => prop_assert_eq!(d, want, "{}", text),
                (Err(e), Err(())) => prop_assert!(e.reason.starts_with("too large")),
                (got, want) => prop_assert!(false, "{text:?}: {got:?}, expected {want:?}"),
            }
            Ok(accepted)
        });
    }

    /// `parse(format(d)) == d` for every duration from nanoseconds to [`MAX`]; longer ones are
    /// refused as too large.
    #[test]
    fn fuzz_duration_format_round_trips() {
        use proptest::prelude::*;
        let duration = prop_oneof![
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            (0u64..100_000, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            (0u64..100_000_000).prop_map(Duration::from_millis),
            (0u64..100_000_000).prop_map(Duration::from_micros),
            (0..=MAX.as_secs(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        ];
        crate::fuzz::run(file!(), "duration-format", duration, |d| {
            let text = format(d);
            if d > MAX {
                prop_assert!(parse(&text).is_err_and(|e| e.reason.starts_with("too large")), "{}", text);
                return Ok(false);
            }
            prop_assert_eq!(parse(&text), Ok(d), "{}", text);
            Ok(true)
        });
    }
}
