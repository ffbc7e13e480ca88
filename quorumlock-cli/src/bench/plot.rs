//! `--plot FILE.png`: the cycle-latency distribution of each level, by percentile, as the
//! benchmark harness draws it (benches/scenarios/plot.rs), with plotters' bitmap backend.
//!
//! Text needs a TrueType font, registered at run time: `$QUORUMLOCK_FONT`, or a common
//! system font (Debian's fonts-dejavu-core). It is looked for before the run starts, so a
//! missing font is a configuration error, not a lost benchmark.

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::exit::{CliError, Kind};

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers a font for the plot's text.
pub fn init_font() -> Result<(), CliError> {
    let from_env = std::env::var("QUORUMLOCK_FONT").ok();
    let candidates = from_env
        .iter()
        .map(String::as_str)
        .chain(FONT_CANDIDATES.iter().copied());
    for path in candidates {
        if let Ok(bytes) = std::fs::read(path) {
            // plotters keeps a reference for the life of the program.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    Err(
        CliError::new(Kind::Config, "--plot needs a TrueType font, and none was found")
            .hint("install one (Debian: apt-get install fonts-dejavu-core), or point QUORUMLOCK_FONT at a .ttf file"),
    )
}

/// Checks before the run that the plot can be written where asked.
pub fn check_path(path: &Path) -> Result<(), CliError> {
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if parent.is_dir() {
        Ok(())
    } else {
        Err(CliError::new(
            Kind::Config,
            format!(
                "--plot {}: no directory {}",
                path.display(),
                parent.display()
            ),
        ))
    }
}

const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// `x = -log10(1 - q)`: 1 is p90, 2 is p99, 3 is p99.9, so the tail gets room.
fn percentile_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    if *x < 0.5 {
        format!("{q:.0}%")
    } else {
        let decimals = (x.round() as usize).saturating_sub(2);
        format!("{q:.decimals$}%")
    }
}

/// The latency (ms) at evenly spaced points of the percentile axis, up to the last point
/// the sample count supports.
fn points(hist: &Histogram<u64>) -> Vec<(f64, f64)> {
    let x_max = (hist.len() as f64).log10().clamp(0.0, 5.0);
    (0..=500)
        .map(|i| f64::from(i) / 100.0)
        .take_while(|x| *x <= x_max)
        .map(|x| {
            let q = 1.0 - 10f64.powf(-x);
            (x, hist.value_at_quantile(q) as f64 / 1_000.0)
        })
        .collect()
}

/// Draws one line per `(label, histogram)` into `path`.
pub fn draw(path: &Path, title: &str, series: &[(String, &Histogram<u64>)]) -> Result<(), String> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|(_, hist)| !hist.is_empty())
        .map(|(label, hist)| (format!("{label} (n={})", hist.len()), points(hist)))
        .collect();
    if lines.is_empty() {
        return Err("no cycle completed: nothing to plot".to_owned());
    }
    let all = lines.iter().flat_map(|(_, points)| points.iter());
    let x_max = all.clone().map(|p| p.0).fold(2.0f64, f64::max).ceil();
    let y_min = all
        .clone()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(0.001);
    let y_max = all.map(|p| p.1).fold(0.0f64, f64::max);
    let (y_lo, y_hi) = (y_min / 1.5, (y_max * 1.5).max(y_min * 2.0));

    let failed = |error: &dyn std::fmt::Display| format!("{}: {error}", path.display());
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .margin_right(40)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, (y_lo..y_hi).log_scale())
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("acquire + release (ms)")
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
        .map_err(|e| failed(&e))?;
    for (i, (label, points)) in lines.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        if points.len() < 3 {
            // Too few samples for a line: mark them.
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 6, color.filled())))
                .map_err(|e| failed(&e))?;
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(3)))
            .map_err(|e| failed(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}
