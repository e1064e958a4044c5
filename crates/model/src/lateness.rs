//! Lateness statistics: delivered_at − due_at per delivery, as percentiles.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Lateness {
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

/// Nearest-rank percentile of sorted values (`q` in 0..=100).
pub fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Lateness {
    /// From per-delivery lateness in milliseconds (any order).
    pub fn from_millis(mut values: Vec<i64>) -> Self {
        values.sort_unstable();
        Lateness {
            p50: percentile(&values, 50.0),
            p90: percentile(&values, 90.0),
            p99: percentile(&values, 99.0),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l = Lateness::from_millis((1..=100).rev().collect());
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50, 90, 99, 100));
        assert_eq!(Lateness::from_millis(vec![]), Lateness::default());
        assert_eq!(Lateness::from_millis(vec![7]).p99, 7);
    }
}
