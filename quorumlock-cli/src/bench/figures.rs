//! The figures the report reads from the latency histograms (recorded through the
//! testkit's `measure`, as the benchmark harness records its own): milliseconds, the JSON
//! summary of a distribution, latencies and rates as text, and terminal histograms.

use std::time::Duration;

use quorumlock_testkit::measure::{self, Histogram};
use serde_json::{json, Value};

/// A latency in milliseconds, the unit of the report.
fn ms(latency: Duration) -> f64 {
    latency.as_secs_f64() * 1_000.0
}

/// The latency at `quantile`, in milliseconds; `None` without samples.
pub fn quantile_ms(hist: &Histogram<u64>, quantile: f64) -> Option<f64> {
    measure::quantile(hist, quantile).map(ms)
}

/// The largest latency, in milliseconds.
pub fn max_ms(hist: &Histogram<u64>) -> Option<f64> {
    measure::max(hist).map(ms)
}

/// The figures of one distribution, for `--json`: sample count and milliseconds.
pub fn summary_json(hist: &Histogram<u64>, quantiles: &[(&str, f64)]) -> Value {
    let mut value = json!({
        "count": hist.len(),
        "mean_ms": measure::mean(hist).map(ms),
        "max_ms": max_ms(hist),
    });
    for (name, quantile) in quantiles {
        value[format!("{name}_ms")] = json!(quantile_ms(hist, *quantile));
    }
    value
}

/// The percentiles reported for the lock cycle.
pub const CYCLE_QUANTILES: &[(&str, f64)] =
    &[("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999)];

/// The percentiles reported for per-node round trips, waits and validity lost.
pub const SHORT_QUANTILES: &[(&str, f64)] = &[("p50", 0.50), ("p99", 0.99)];

/// A latency in milliseconds as text: `0.118ms`, `12.3ms`, `1.52s`, or `-`.
pub fn fmt_ms(ms: Option<f64>) -> String {
    match ms {
        None => "-".to_owned(),
        Some(ms) if ms < 1.0 => format!("{ms:.3}ms"),
        Some(ms) if ms < 100.0 => format!("{ms:.2}ms"),
        Some(ms) if ms < 10_000.0 => format!("{ms:.0}ms"),
        Some(ms) => format!("{:.1}s", ms / 1_000.0),
    }
}

/// A rate as text: `12345/s`, `12.5/s`, and below one a second with two significant
/// digits, `0.5/s`, `0.0001/s`: one decimal made `--rate 0.0001` read "at most 0.0/s".
pub fn fmt_rate(rate: f64) -> String {
    if rate >= 100.0 {
        format!("{rate:.0}/s")
    } else if rate >= 1.0 || rate <= 0.0 {
        format!("{rate:.1}/s")
    } else if rate < 1e-9 {
        format!("{rate:.1e}/s")
    } else {
        // The first significant digit is `-log10(rate)` places after the point.
        let places = (-rate.log10()).ceil() as usize + 1;
        let text = format!("{rate:.places$}");
        format!("{}/s", text.trim_end_matches('0'))
    }
}

/// A terminal histogram of `hist`: log-spaced latency buckets from its minimum to its
/// maximum, each with a bar, its count and its share. Log-spaced because lock latencies
/// span orders of magnitude (a fast path, a retry, a wait behind a holder).
pub fn terminal_histogram(hist: &Histogram<u64>, rows: usize, width: usize) -> Vec<String> {
    if hist.is_empty() {
        return vec!["  (no samples)".to_owned()];
    }
    let low = hist.min().max(1) as f64;
    let high = (hist.max() as f64).max(low + 1.0);
    let rows = rows.max(1);
    let ratio = (high / low).powf(1.0 / rows as f64);
    let mut edges: Vec<u64> = (0..=rows)
        .map(|i| (low * ratio.powi(i as i32)).round() as u64)
        .collect();
    edges.dedup();
    let last = edges.len() - 1;
    let counts: Vec<u64> = edges
        .windows(2)
        .enumerate()
        .map(|(i, edge)| {
            // The last bucket includes the maximum itself.
            let top = if i + 1 == last { edge[1] + 1 } else { edge[1] };
            hist.iter_recorded()
                .filter(|v| v.value_iterated_to() >= edge[0] && v.value_iterated_to() < top)
                .map(|v| v.count_at_value())
                .sum()
        })
        .collect();
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    let total = hist.len().max(1) as f64;
    edges
        .windows(2)
        .zip(&counts)
        .map(|(edge, &count)| {
            let bar = (count as f64 / most as f64 * width as f64).round() as usize;
            let bar = if count > 0 { bar.max(1) } else { 0 };
            format!(
                "  {:>9} .. {:<9} {:<width$} {count:>8} {:>5.1}%",
                fmt_ms(Some(edge[0] as f64 / 1_000.0)),
                fmt_ms(Some(edge[1] as f64 / 1_000.0)),
                "#".repeat(bar),
                100.0 * count as f64 / total,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use quorumlock_testkit::measure::{histogram, record};

    #[test]
    fn small_rates_keep_their_digits() {
        assert_eq!(fmt_rate(12_345.4), "12345/s");
        assert_eq!(fmt_rate(12.5), "12.5/s");
        assert_eq!(fmt_rate(0.5), "0.5/s");
        assert_eq!(fmt_rate(0.25), "0.25/s");
        assert_eq!(fmt_rate(0.0001), "0.0001/s");
        assert_eq!(fmt_rate(0.000123), "0.00012/s");
        assert_eq!(fmt_rate(0.0), "0.0/s");
        assert_eq!(fmt_rate(1e-12), "1.0e-12/s");
    }

    #[test]
    fn quantiles_are_in_milliseconds() {
        let mut hist = histogram();
        for ms in 1..=100 {
            record(&mut hist, Duration::from_millis(ms));
        }
        let p50 = quantile_ms(&hist, 0.5).unwrap();
        assert!((49.9..=50.1).contains(&p50), "{p50}");
        assert!((99.9..=100.1).contains(&max_ms(&hist).unwrap()));
        assert_eq!(quantile_ms(&histogram(), 0.5), None);
    }

    #[test]
    fn the_terminal_histogram_counts_every_sample() {
        let mut hist = histogram();
        for us in [100, 120, 150, 900, 5_000, 5_000, 40_000] {
            record(&mut hist, Duration::from_micros(us));
        }
        let lines = terminal_histogram(&hist, 8, 20);
        let total: u64 = lines
            .iter()
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields[fields.len() - 2].parse::<u64>().unwrap()
            })
            .sum();
        assert_eq!(total, 7, "{lines:#?}");
        assert!(lines.iter().any(|line| line.contains('#')));
    }

    #[test]
    fn latencies_read_well() {
        assert_eq!(fmt_ms(Some(0.1184)), "0.118ms");
        assert_eq!(fmt_ms(Some(12.34)), "12.34ms");
        assert_eq!(fmt_ms(Some(1520.0)), "1520ms");
        assert_eq!(fmt_ms(Some(15_200.0)), "15.2s");
        assert_eq!(fmt_ms(None), "-");
        assert_eq!(fmt_rate(12_345.4), "12345/s");
        assert_eq!(fmt_rate(2.5), "2.5/s");
    }
}
