//! The run's output: one JSON object a line on stdout (`bench/iceoryx2_compare.py`
//! turns them into the table and the plot). Written by hand: flat objects of numbers
//! and plain strings.

use crate::rounds::Measured;
use crate::stats::percentile_us;
use std::time::Duration;

fn number(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.3}"),
        _ => "null".into(),
    }
}

/// A latency and throughput row.
pub fn round_trip(
    contender: &str,
    receive: &str,
    size: usize,
    subscribers: usize,
    rounds: usize,
    passes: usize,
    m: &Measured,
) {
    println!(
        "{{\"kind\":\"round_trip\",\"contender\":\"{contender}\",\"receive\":\"{receive}\",\"size\":{size},\"subscribers\":{subscribers},\"rounds\":{rounds},\"passes\":{passes},\"p50_us\":{},\"p99_us\":{},\"samples_per_s\":{}}}",
        number(Some(m.p50_us)),
        number(Some(m.p99_us)),
        number(Some(m.samples_per_s)),
    );
}

/// A recovery row: how many of `trials` recovered within `deadline`, and the
/// percentiles of those that did.
pub fn recovery(
    contender: &str,
    cleanup: &str,
    size: usize,
    held: usize,
    deadline: Duration,
    trials: &[Option<Duration>],
) {
    let recovered: Vec<Duration> = trials.iter().flatten().copied().collect();
    println!(
        "{{\"kind\":\"recovery\",\"contender\":\"{contender}\",\"cleanup\":\"{cleanup}\",\"size\":{size},\"held\":{held},\"deadline_ms\":{},\"trials\":{},\"recovered\":{},\"p50_us\":{},\"p99_us\":{}}}",
        deadline.as_millis(),
        trials.len(),
        recovered.len(),
        number(percentile_us(&recovered, 50.0)),
        number(percentile_us(&recovered, 99.0)),
    );
}
