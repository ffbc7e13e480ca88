//! Latency histograms: how one is made, recorded into, merged and read.

use std::time::Duration;

use hdrhistogram::Histogram;

/// The lowest and highest latency a histogram holds, in microseconds: 1 µs to 10 minutes.
const LOWEST_US: u64 = 1;
const HIGHEST_US: u64 = 600_000_000;

/// An empty latency histogram: microseconds from 1 µs to 10 minutes, 3 significant digits.
///
/// Every histogram of this module has these bounds, so any two can be [`merge`]d.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, 3).expect("valid histogram bounds")
}

/// Records one latency into `hist`, rounded down to the microsecond; below 1 µs counts as
/// 1 µs, and past 10 minutes as the top (a sample that long is still "slow", not lost).
pub fn record(hist: &mut Histogram<u64>, latency: Duration) {
    let micros = u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .max(LOWEST_US);
    hist.saturating_record(micros);
}

/// Adds every sample of `other` into `into`.
///
/// # Panics
///
/// If `other` holds a value `into` cannot, which histograms from [`histogram`] never do.
pub fn merge(into: &mut Histogram<u64>, other: &Histogram<u64>) {
    into.add(other).expect("histograms of the same bounds");
}

/// The latency at `quantile` (0.5 for the median, 0.99 for p99); `None` without samples.
pub fn quantile(hist: &Histogram<u64>, quantile: f64) -> Option<Duration> {
    (!hist.is_empty()).then(|| Duration::from_micros(hist.value_at_quantile(quantile)))
}

/// The largest latency recorded; `None` without samples.
pub fn max(hist: &Histogram<u64>) -> Option<Duration> {
    (!hist.is_empty()).then(|| Duration::from_micros(hist.max()))
}

/// The mean latency; `None` without samples.
pub fn mean(hist: &Histogram<u64>) -> Option<Duration> {
    (!hist.is_empty()).then(|| Duration::from_secs_f64(hist.mean() / 1e6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_read_back_what_was_recorded() {
        let mut hist = histogram();
        assert_eq!(quantile(&hist, 0.5), None);
        assert_eq!((max(&hist), mean(&hist)), (None, None));
        for ms in 1..=100 {
            record(&mut hist, Duration::from_millis(ms));
        }
        let p50 = quantile(&hist, 0.5).unwrap();
        // 3 significant digits: within 0.1 %.
        assert!(p50.abs_diff(Duration::from_millis(50)) <= Duration::from_micros(50));
        let top = max(&hist).unwrap();
        assert!(top.abs_diff(Duration::from_millis(100)) <= Duration::from_micros(100));
        let average = mean(&hist).unwrap();
        assert!(average.abs_diff(Duration::from_micros(50_500)) <= Duration::from_micros(60));
    }

    #[test]
    fn samples_out_of_range_are_kept_at_the_bounds() {
        let mut hist = histogram();
        record(&mut hist, Duration::from_nanos(10));
        record(&mut hist, Duration::from_secs(3_600));
        assert_eq!(hist.len(), 2);
        assert_eq!(quantile(&hist, 0.0), Some(Duration::from_micros(1)));
        assert!(max(&hist).unwrap() >= Duration::from_secs(599));
    }

    #[test]
    fn merged_histograms_hold_both_sets_of_samples() {
        let (mut a, mut b) = (histogram(), histogram());
        record(&mut a, Duration::from_millis(1));
        record(&mut b, Duration::from_millis(9));
        merge(&mut a, &b);
        assert_eq!(a.len(), 2);
        assert!(max(&a).unwrap() >= Duration::from_millis(9));
    }
}
