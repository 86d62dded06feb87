//! Paired bootstrap intervals for the difference between two systems on the same questions.
//!
//! Each resample draws as many questions as there are, with replacement, from one seeded
//! generator, and takes the mean of the per-question differences `a − b`; the interval is the
//! 2.5th and 97.5th percentiles of those means (percentile bootstrap, Efron & Tibshirani 1993,
//! ch. 13). Pairing matters: both systems answer the same questions, so the question-to-question
//! spread cancels out of the difference.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Resamples drawn for every interval of a report.
pub const RESAMPLES: usize = 2000;
/// Seed of the resampling.
pub const SEED: u64 = 20_261_206;

/// The mean difference of two paired samples and its 95% percentile-bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Mean of `a − b` over the questions.
    pub diff: f64,
    /// 2.5th percentile of the resampled means.
    pub low: f64,
    /// 97.5th percentile of the resampled means.
    pub high: f64,
}

/// The paired difference `a − b` (same questions, same order) with its interval; `None` when the
/// samples are empty or of different lengths.
pub fn paired(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    if a.is_empty() || a.len() != b.len() || resamples == 0 {
        return None;
    }
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let n = d.len();
    let mean = d.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..resamples).map(|_| (0..n).map(|_| d[rng.random_range(0..n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * resamples as f64).floor() as usize).min(resamples - 1)];
    Some(Interval { diff: mean, low: at(0.025), high: at(0.975) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_systems_differ_by_nothing() {
        let a = [0.0, 0.5, 1.0, 1.0];
        assert_eq!(paired(&a, &a, 200, 1), Some(Interval { diff: 0.0, low: 0.0, high: 0.0 }));
    }

    /// A system better by 0.25 on every question: every resample's mean is 0.25.
    #[test]
    fn a_constant_difference_has_a_point_interval() {
        let b = [0.0, 0.25, 0.5, 0.75];
        let a = b.map(|x| x + 0.25);
        let i = paired(&a, &b, 200, 1).unwrap();
        assert!((i.diff - 0.25).abs() < 1e-12 && (i.low - 0.25).abs() < 1e-12 && (i.high - 0.25).abs() < 1e-12, "{i:?}");
    }

    /// One question of four better by 1: the mean difference is 1/4, and a resample's mean is
    /// k/4 for k of the 4 draws landing on it, so the interval lies in {0, 1/4, 1/2, 3/4, 1} and
    /// brackets 1/4; P(k = 0) = (3/4)^4 = 0.32 > 0.025, so the low end is 0.
    #[test]
    fn one_better_question_gives_an_interval_from_zero() {
        let (a, b) = ([1.0, 0.0, 0.0, 0.0], [0.0; 4]);
        let i = paired(&a, &b, 4000, 7).unwrap();
        assert_eq!(i.diff, 0.25);
        assert_eq!(i.low, 0.0);
        assert!([0.5, 0.75].contains(&i.high), "{i:?}");
    }

    #[test]
    fn mismatched_samples_have_no_interval() {
        assert_eq!(paired(&[1.0], &[1.0, 0.0], 10, 1), None);
        assert_eq!(paired(&[], &[], 10, 1), None);
    }
}
