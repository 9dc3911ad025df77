//! When a CronJob runs: a standard cron expression (five fields, or `@hourly`, `@daily`, ...) as
//! robfig/cron's `ParseStandard` reads it for the tutorial, through `croner`, in UTC; or
//! `@every <duration>` (`@every 1h30m`, `@every 10s`), robfig's constant-delay schedule.

use std::str::FromStr;

use chrono::{DateTime, Utc};

/// A parsed `spec.schedule`.
#[derive(Debug)]
pub enum Schedule {
    /// A cron expression.
    Cron(Box<croner::Cron>),
    /// `@every`: this many seconds after the last run.
    Every(i64),
}

impl Schedule {
    /// Parse a schedule; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(every) = text.strip_prefix("@every ") {
            return every_seconds(every.trim()).map(Schedule::Every);
        }
        croner::Cron::from_str(text).map(|c| Schedule::Cron(Box::new(c))).map_err(|e| e.to_string())
    }

    /// The first run strictly after `t` (seconds since the epoch).
    pub fn next_after(&self, t: i64) -> Option<i64> {
        match self {
            Schedule::Every(secs) => t.checked_add(*secs),
            Schedule::Cron(cron) => {
                let at: DateTime<Utc> = DateTime::from_timestamp(t, 0)?;
                cron.find_next_occurrence(&at, false).ok().map(|n| n.timestamp())
            }
        }
    }
}

/// `1h30m10s`, `90s`, `5m`: whole hours, minutes and seconds, at least one second.
fn every_seconds(text: &str) -> Result<i64, String> {
    let bad = || format!("@every {text:?}: expected a duration such as 30s, 5m or 1h30m");
    let (mut total, mut digits) = (0_i64, String::new());
    for c in text.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'h' | 'm' | 's' if !digits.is_empty() => {
                let n: i64 = digits.parse().map_err(|_| bad())?;
                let unit = match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
                digits.clear();
            }
            _ => return Err(bad()),
        }
    }
    if !digits.is_empty() || total < 1 {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: &str) -> i64 {
        wasmloop_sdk::time::parse(ts).unwrap()
    }

    #[test]
    fn cron_expressions_run_in_utc() {
        let s = Schedule::parse("1 * * * *").unwrap();
        assert_eq!(s.next_after(at("2026-03-01T10:00:30Z")), Some(at("2026-03-01T10:01:00Z")));
        assert_eq!(s.next_after(at("2026-03-01T10:01:00Z")), Some(at("2026-03-01T11:01:00Z")), "strictly after");
        let daily = Schedule::parse("@daily").unwrap();
        assert_eq!(daily.next_after(at("2026-03-01T10:00:00Z")), Some(at("2026-03-02T00:00:00Z")));
        let weekdays = Schedule::parse("30 9 * * 1-5").unwrap();
        assert_eq!(weekdays.next_after(at("2026-03-06T10:00:00Z")), Some(at("2026-03-09T09:30:00Z")), "Friday → Monday");
    }

    #[test]
    fn every_is_a_constant_delay() {
        let s = Schedule::parse("@every 1h30m").unwrap();
        assert_eq!(s.next_after(at("2026-03-01T10:00:00Z")), Some(at("2026-03-01T11:30:00Z")));
        assert!(matches!(Schedule::parse("@every 10s"), Ok(Schedule::Every(10))));
        for bad in ["@every", "@every 0s", "@every 5", "@every 1d", "@every m"] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in ["", "not a schedule", "61 * * * *", "* * * *"] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?}");
        }
    }
}
