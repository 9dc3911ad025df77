//! Kubernetes timestamps: RFC 3339 as the API server writes them (`2026-01-02T03:04:05Z`: UTC,
//! whole seconds, `Z`: `metav1.Time`), with microseconds (`2026-01-02T03:04:05.123456Z`:
//! `metav1.MicroTime`, as Events, Leases and managed fields carry them), as seconds or
//! microseconds since the Unix epoch, and the current time.
//!
//! The current time is the host's: in the component, WASI's wall clock (`std::time::SystemTime`
//! works in `wasm32-wasip2`), which the host records with a reconcile and `wasmloop replay`
//! serves back, nanoseconds and all; natively, the installed backend's clock — the `testing`
//! fake's settable one ([`FakeCache::set_time`](crate::testing::FakeCache::set_time),
//! `converge` moves it to the next requeue) — else the system clock.
//!
//! ```
//! use wasmloop_sdk::time;
//! let t = time::parse("2026-12-01T00:28:39Z").unwrap();
//! assert_eq!(time::format(t + 60), "2026-12-01T00:29:39Z");
//! // Fractions and offsets are read (metav1.MicroTime, other writers), UTC is written.
//! assert_eq!(time::parse("2026-12-01T01:28:39.5+01:00"), Some(t));
//! // Microseconds, kept.
//! let us = time::parse_micros("2026-12-01T00:28:39.000250Z").unwrap();
//! assert_eq!(us, t * 1_000_000 + 250);
//! assert_eq!(time::format_micros(us + 1_000_000), "2026-12-01T00:28:40.000250Z");
//! ```

/// Microseconds in a second.
const MICROS: i64 = 1_000_000;

/// Seconds since the epoch of an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`,
/// the fraction dropped); `None` if it is malformed.
pub fn parse(ts: &str) -> Option<i64> {
    parse_micros(ts).map(|us| us.div_euclid(MICROS))
}

/// Microseconds since the epoch of an RFC 3339 timestamp, the fraction kept to the microsecond
/// (digits past the sixth dropped); `None` if it is malformed.
pub fn parse_micros(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (digits(ts, 0..4)?, digits(ts, 5..7)?, digits(ts, 8..10)?);
    let (h, mi, s) = (digits(ts, 11..13)?, digits(ts, 14..16)?, digits(ts, 17..19)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &ts[19..];
    let mut micros = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let after = frac.trim_start_matches(|c: char| c.is_ascii_digit());
        let digits = &frac[..frac.len() - after.len()];
        if digits.is_empty() {
            return None; // a dot without digits
        }
        micros = digits.bytes().chain(std::iter::repeat(b'0')).take(6).fold(0, |n, d| n * 10 + i64::from(d - b'0'));
        rest = after;
    }
    let offset = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (digits(rest, 1..3)?, digits(rest, 4..6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = oh * 3600 + om * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    Some((days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset) * MICROS + micros)
}

/// A timestamp as the API server writes it: UTC, whole seconds, `Z`.
pub fn format(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A `metav1.MicroTime`: UTC, six fractional digits, `Z`.
pub fn format_micros(micros: i64) -> String {
    let secs = format(micros.div_euclid(MICROS));
    format!("{}.{:06}Z", &secs[..secs.len() - 1], micros.rem_euclid(MICROS))
}

/// Now, in seconds since the epoch (see the module docs for whose clock).
pub fn now() -> i64 {
    now_micros().div_euclid(MICROS)
}

/// Now, in microseconds since the epoch.
pub fn now_micros() -> i64 {
    crate::sys::now_micros()
}

/// Now, formatted as the API server writes timestamps (`metav1.Time`).
pub fn now_rfc3339() -> String {
    format(now())
}

/// Now as a `metav1.MicroTime` (`2026-01-02T03:04:05.123456Z`).
pub fn now_micros_rfc3339() -> String {
    format_micros(now_micros())
}

/// The system's wall clock in microseconds since the epoch (0 before it).
pub(crate) fn system_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The ASCII decimal digits at `range` of `s`.
fn digits(s: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = s.get(range)?;
    if !part.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse("2026-12-01T00:28:39Z"), Some(1_796_084_919));
        assert_eq!(parse("2026-12-01T00:28:39.123456Z"), Some(1_796_084_919));
        assert_eq!(format(1_796_084_919), "2026-12-01T00:28:39Z");
        assert_eq!(format(parse("2024-02-29T23:59:59Z").unwrap()), "2024-02-29T23:59:59Z");
        assert_eq!(format(-1), "1969-12-31T23:59:59Z");
        for secs in [0, 951_782_400, 4_102_444_800, 253_402_300_799] {
            assert_eq!(parse(&format(secs)), Some(secs), "{secs}");
        }
    }

    #[test]
    fn offsets_are_read_as_utc() {
        assert_eq!(parse("2026-12-01T01:28:39+01:00"), Some(1_796_084_919));
        assert_eq!(parse("2026-11-30T19:58:39.5-04:30"), Some(1_796_084_919));
        assert_eq!(parse("2026-12-01t00:28:39z"), Some(1_796_084_919));
    }

    #[test]
    fn malformed_timestamps_are_none() {
        for bad in [
            "garbage",
            "2026-12-01 00:28:39Z",
            "2026-12-01T00:28:39",
            "2026-12-01T00:28:39.Z",
            "2026-12-01T00:28:39+0100",
            "2026-12-01T00:28:39+24:00",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "+026-12-01T00:28:39Z",
            "2026-12-01T00:28:39Zjunk",
            "2026-12-01T00:28:3éZ",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn now_is_after_2024() {
        assert!(now() > 1_704_067_200);
        assert!(parse(&now_rfc3339()).is_some());
        assert!(parse_micros(&now_micros_rfc3339()).is_some());
    }

    #[test]
    fn micro_time_keeps_microseconds() {
        assert_eq!(parse_micros("2026-12-01T00:28:39.123456Z"), Some(1_796_084_919_123_456));
        assert_eq!(parse_micros("2026-12-01T00:28:39.5Z"), Some(1_796_084_919_500_000));
        assert_eq!(parse_micros("2026-12-01T00:28:39.123456789Z"), Some(1_796_084_919_123_456), "nanoseconds cut");
        assert_eq!(parse_micros("2026-12-01T01:28:39.000001+01:00"), Some(1_796_084_919_000_001));
        assert_eq!(format_micros(1_796_084_919_000_001), "2026-12-01T00:28:39.000001Z");
        assert_eq!(format_micros(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(parse("1969-12-31T23:59:59.999999Z"), Some(-1), "seconds round down");
        for us in [0, 1, 999_999, 1_796_084_919_123_456, -1_000_001] {
            assert_eq!(parse_micros(&format_micros(us)), Some(us), "{us}");
        }
    }
}
