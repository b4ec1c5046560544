//! Summary statistics of timing samples, as the seeds report them: the Directed Point trimmed
//! mean (sort, drop the first and last 10%, average the middle 80%), plus median, minimum, 99th
//! percentile and maximum.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Mean of the middle 80% of sorted samples.
    pub trim80: f64,
    pub median: f64,
    pub min: f64,
    pub p99: f64,
    pub max: f64,
}

/// The `q`-quantile (0..=1) of sorted samples, by linear interpolation between closest ranks.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty());
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Mean of the middle 80%: with n samples, floor(n/10) are dropped at each end.
pub fn trimmed_mean(sorted: &[f64]) -> f64 {
    let cut = sorted.len() / 10;
    let mid = &sorted[cut..sorted.len() - cut];
    mid.iter().sum::<f64>() / mid.len() as f64
}

/// Summarises samples; NaNs are rejected (a timing is never NaN unless something is broken).
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    Some(Summary {
        n: s.len(),
        trim80: trimmed_mean(&s),
        median: quantile(&s, 0.5),
        min: s[0],
        p99: quantile(&s, 0.99),
        max: s[s.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_samples() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = summarize(&v).unwrap();
        assert_eq!(s.n, 10);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.median, 5.5);
        // Middle 80% of 1..=10 is 2..=9.
        assert_eq!(s.trim80, 5.5);
        assert!((s.p99 - 9.91).abs() < 1e-9, "{}", s.p99);
    }

    #[test]
    fn trimmed_mean_ignores_outliers_the_plain_mean_does_not() {
        let mut v = vec![100.0; 18];
        v.push(0.0);
        v.push(1e9); // a descheduled sample
        let s = summarize(&v).unwrap();
        assert_eq!(s.trim80, 100.0);
        assert_eq!(s.median, 100.0);
        assert_eq!(s.max, 1e9);
        assert_eq!(s.min, 0.0);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean > 1e7);
    }

    #[test]
    fn small_sample_counts() {
        let s = summarize(&[3.0]).unwrap();
        assert_eq!(
            (s.trim80, s.median, s.min, s.p99, s.max),
            (3.0, 3.0, 3.0, 3.0, 3.0)
        );
        let s = summarize(&[4.0, 2.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.trim80, 3.0); // fewer than 10 samples: nothing to trim
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [0.0, 10.0];
        assert_eq!(quantile(&v, 0.25), 2.5);
        assert_eq!(quantile(&v, 0.0), 0.0);
        assert_eq!(quantile(&v, 1.0), 10.0);
    }
}
