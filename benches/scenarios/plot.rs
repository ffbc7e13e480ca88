//! Latency-distribution plots (PNG), one per scenario, drawn with plotters' bitmap backend.
//!
//! Text needs a TrueType font: plotters' `ab_glyph` feature draws with a font registered at
//! run time, read here from the system's DejaVu (Debian's `fonts-dejavu-core`) or from
//! `$QUORUMLOCK_BENCH_FONT`. Without one, plots are skipped with a warning.

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::clients::Contender;
use crate::scenarios::{Load, Results, SCENARIOS};
use crate::stats;

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a font for plot text; false when none could be found.
pub fn init_font() -> bool {
    let from_env = std::env::var("QUORUMLOCK_BENCH_FONT").ok();
    let candidates = from_env
        .iter()
        .map(String::as_str)
        .chain(FONT_CANDIDATES.iter().copied());
    for path in candidates {
        if let Ok(bytes) = std::fs::read(path) {
            // plotters keeps a reference for the life of the program.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// One line of a plot.
pub struct Series<'a> {
    pub label: String,
    pub hist: &'a Histogram<u64>,
}

pub const COLORS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4), // blue: quorumlock
    RGBColor(0xd6, 0x27, 0x28), // red: rslock
    RGBColor(0x2c, 0xa0, 0x2c), // green: floor
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
];

/// `x = -log10(1 - q)`: 0 is the median's left end (0 %), 1 is 90 %, 2 is 99 %, 3 is 99.9 %.
fn percentile_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    if *x < 0.5 {
        format!("{q:.0}%")
    } else {
        let decimals = (x.round() as usize).saturating_sub(2);
        format!("{q:.decimals$}%")
    }
}

/// The latency at evenly spaced points of the percentile axis, up to the last point the
/// sample count supports.
fn points(hist: &Histogram<u64>) -> Vec<(f64, f64)> {
    let count = hist.len() as f64;
    let x_max = count.log10().clamp(0.0, 5.0);
    (0..=500)
        .map(|i| f64::from(i) / 100.0)
        .take_while(|x| *x <= x_max)
        .map(|x| {
            let q = 1.0 - 10f64.powf(-x);
            (x, hist.value_at_quantile(q) as f64 / 1_000.0)
        })
        .collect()
}

/// Draws `series` as latency-by-percentile lines into `path`.
pub fn latency_plot(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series<'_>],
) -> Result<(), String> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|s| !s.hist.is_empty())
        .map(|s| (format!("{} (n={})", s.label, s.hist.len()), points(s.hist)))
        .collect();
    if lines.is_empty() {
        return Err("nothing to plot".to_owned());
    }
    let all = lines.iter().flat_map(|(_, points)| points.iter());
    let x_max = all
        .clone()
        .map(|p| p.0)
        .fold(1.0f64, f64::max)
        .ceil()
        .max(2.0);
    let y_min = all
        .clone()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(0.001);
    let y_max = all.map(|p| p.1).fold(0.0f64, f64::max);
    let (y_lo, y_hi) = (y_min / 1.5, (y_max * 1.5).max(y_min * 2.0));

    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    let draw = |err: &dyn std::fmt::Display| format!("{}: {err}", path.display());
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .margin_right(40)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, (y_lo..y_hi).log_scale())
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc(y_desc)
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&percentile_label)
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (label, points)) in lines.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        if points.len() < 3 {
            // Too few samples for a line (a contender that barely completed): mark them.
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 6, color.filled())))
                .map_err(|e| draw(&e))?;
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(3)))
            .map_err(|e| draw(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight).map_err(|e| draw(&e))
}

/// Draws the legend of `chart` at `position`, and writes the picture of `root`.
pub fn finish<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, CT>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Draws each scenario's latency distributions, one PNG per scenario, into `dir`.
pub fn draw_plots(dir: &Path, results: &Results) {
    if !init_font() {
        eprintln!("plots skipped: no TrueType font found (set QUORUMLOCK_BENCH_FONT)");
        return;
    }
    if let Err(err) = std::fs::create_dir_all(dir) {
        eprintln!("plots skipped: {}: {err}", dir.display());
        return;
    }
    for scenario in SCENARIOS {
        let merged: Vec<(Contender, hdrhistogram::Histogram<u64>)> = scenario
            .contenders
            .iter()
            .filter_map(|&c| {
                results
                    .get(&(scenario.id, c))
                    .map(|runs| (c, stats::merged(runs)))
            })
            // The no-lock reference records no latency.
            .filter(|(_, hist)| !hist.is_empty())
            .collect();
        if merged.is_empty() {
            continue;
        }
        let series: Vec<Series<'_>> = merged
            .iter()
            .map(|(contender, hist)| Series {
                label: contender.label().to_owned(),
                hist,
            })
            .collect();
        let y_desc = match scenario.load {
            Load::Contended { .. } => "wait for the lock (ms)",
            Load::Cycles { .. } => "acquire + release (ms)",
        };
        let path = dir.join(format!("{}.png", scenario.id));
        match latency_plot(&path, scenario.title, y_desc, &series) {
            Ok(()) => println!("plot: {}", path.display()),
            Err(err) => eprintln!("plot {} failed: {err}", path.display()),
        }
    }
}
