//! Measuring latency: histograms, percentiles, and PNG plots of them, for benchmarks and
//! load tools run against the nodes of this crate (the `measure` feature).
//!
//! One way to record and read a latency, shared by every tool that reports one, so that
//! their figures compare: [`histogram`] makes an HdrHistogram of microseconds from 1 µs to
//! 10 minutes at 3 significant digits (a round trip across the world and a wait behind 64
//! holders both fit, at 0.1 % precision), [`record`] adds a [`Duration`](std::time::Duration)
//! to it, and [`quantile`], [`max`] and [`mean`] read it back as durations.
//!
//! [`percentile_plot`] draws latency by percentile, with the tail spread out (90 %, 99 %,
//! 99.9 %, ... evenly spaced) on a logarithmic latency axis; [`line_plot`] draws a value
//! over a logarithmic x axis (throughput by node count, say). Both write PNG files through
//! plotters' bitmap backend, with no system library; their text needs a TrueType font,
//! which [`register_font`] finds at run time: see there for where it looks.
//!
//! ```no_run
//! use std::path::Path;
//! use std::time::{Duration, Instant};
//!
//! use quorumlock_testkit::measure::{self, Series};
//!
//! let mut cycles = measure::histogram();
//! for _ in 0..1_000 {
//!     let started = Instant::now();
//!     // ... one operation ...
//!     measure::record(&mut cycles, started.elapsed());
//! }
//! let p99: Option<Duration> = measure::quantile(&cycles, 0.99);
//! println!("p99 {p99:?}");
//! let series = [Series { label: "1 task", hist: &cycles }];
//! measure::percentile_plot(Path::new("cycles.png"), "One task", "cycle (ms)", &series)?;
//! # Ok::<(), measure::PlotError>(())
//! ```

mod font;
mod latency;
mod plot;

pub use hdrhistogram::Histogram;

pub use self::font::{register_font, FontNotFound, BENCH_FONT_ENV, FONT_ENV, SYSTEM_FONTS};
pub use self::latency::{histogram, max, mean, merge, quantile, record};
pub use self::plot::{line_plot, percentile_plot, Line, PlotError, Series};
