//! Medians, percentiles and min–max of repeated measurements: what every table reports.

use serde::{Deserialize, Serialize};

/// A summary of `n` samples (same unit as the samples).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Summary {
    /// Summarise `samples`; fails on an empty set or a non-finite sample (a broken measurement
    /// must not turn into a number in a table).
    pub fn of(samples: &[f64]) -> anyhow::Result<Self> {
        anyhow::ensure!(!samples.is_empty(), "no samples to summarise");
        anyhow::ensure!(samples.iter().all(|s| s.is_finite()), "non-finite sample in {samples:?}");
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Ok(Self {
            n: s.len(),
            median: percentile_sorted(&s, 50.0),
            min: s[0],
            max: s[s.len() - 1],
            p90: percentile_sorted(&s, 90.0),
            p99: percentile_sorted(&s, 99.0),
        })
    }

    /// Every field multiplied by `k` (unit conversion).
    pub fn scaled(self, k: f64) -> Self {
        Self { n: self.n, median: self.median * k, min: self.min * k, max: self.max * k, p90: self.p90 * k, p99: self.p99 * k }
    }
}

/// Percentile by linear interpolation between closest ranks (`p` in 0..=100) of sorted samples.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.len() == 1 {
        return sorted[0];
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (5, 3.0, 1.0, 5.0));
        let s = Summary::of(&[1.0, 2.0]).unwrap();
        assert_eq!(s.median, 1.5);
        let hundred: Vec<f64> = (1..=101).map(f64::from).collect();
        let s = Summary::of(&hundred).unwrap();
        assert_eq!((s.p90, s.p99), (91.0, 100.0));
        assert!(Summary::of(&[]).is_err());
        assert!(Summary::of(&[f64::NAN]).is_err());
    }
}
