//! Percentiles of timings (nearest rank), in microseconds.

use std::time::Duration;

/// The `p`-th percentile (0..=100) of `samples` by nearest rank, in µs; `None` when
/// there are none.
pub fn percentile_us(samples: &[Duration], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Some(sorted[index].as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let us: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile_us(&us, 50.0), Some(50.0));
        assert_eq!(percentile_us(&us, 99.0), Some(99.0));
        assert_eq!(percentile_us(&us[..1], 99.0), Some(1.0));
        assert_eq!(percentile_us(&[], 50.0), None);
    }
}
