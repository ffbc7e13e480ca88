//! PNG plots: latency by percentile from histograms, and values over a logarithmic x axis,
//! both in one frame (size, margins, fonts, colours, legend) so that the plots of every
//! tool read alike.

use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::font::{register_font, FontNotFound, FAMILY};

/// One line of a [`percentile_plot`]: a label and the latencies it draws.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// The legend's text; the sample count is added to it.
    pub label: &'a str,
    /// The latencies, from [`histogram`](super::histogram).
    pub hist: &'a Histogram<u64>,
}

/// One line of a [`line_plot`]: a label and its points.
#[derive(Debug, Clone)]
pub struct Line {
    /// The legend's text.
    pub label: String,
    /// `(x, y)` points, in the order they are joined.
    pub points: Vec<(f64, f64)>,
}

/// Why a plot was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// No font for the text (see [`register_font`]).
    #[error(transparent)]
    Font(#[from] FontNotFound),
    /// No series had a sample, or no line a point.
    #[error("nothing to plot")]
    Empty,
    /// Drawing the picture or writing the file failed.
    #[error("{}: {message}", path.display())]
    Draw {
        /// The file that was to be written.
        path: PathBuf,
        /// What plotters said.
        message: String,
    },
}

/// The picture's size, in pixels.
const SIZE: (u32, u32) = (1000, 560);

/// The lines' colours, in order: the first three are the benchmark harness's contenders
/// (blue quorumlock, red rslock, green the floor).
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// The last point of the percentile axis: 99.999 %, beyond which no run here has the
/// samples to say anything.
const MAX_NINES: f64 = 5.0;

/// Draws one line per series into `path` (a PNG): the latency in milliseconds (a
/// logarithmic axis, `y_desc` its name) at each percentile, the x axis at
/// `-log10(1 - q)`, so that 90 %, 99 %, 99.9 %, ... are evenly spaced and the tail gets
/// room. Each line goes as far into the tail as its sample count supports; one of fewer
/// than three points is marked as well. Series without samples are left out.
pub fn percentile_plot(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series<'_>],
) -> Result<(), PlotError> {
    let lines: Vec<Line> = series
        .iter()
        .filter(|series| !series.hist.is_empty())
        .map(|series| Line {
            label: format!("{} (n={})", series.label, series.hist.len()),
            points: percentile_points(series.hist),
        })
        .collect();
    let points = || lines.iter().flat_map(|line| line.points.iter());
    if points().next().is_none() {
        return Err(PlotError::Empty);
    }
    let x_max = points().map(|p| p.0).fold(2.0, f64::max).ceil();
    let y_min = points()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(0.001);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max);
    let frame = Frame {
        title,
        x_desc: "percentile",
        y_desc,
        // One label per nine: 0 %, 90 %, 99 %, ...
        x_labels: Some(x_max as usize + 1),
        x_label: &percentile_label,
        y_label: &|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        },
        legend: SeriesLabelPosition::UpperLeft,
        marks: Marks::WhenSparse,
    };
    let y_range = (y_min / 1.5)..(y_max * 1.5).max(y_min * 2.0);
    draw(path, frame, 0.0..x_max, y_range.log_scale(), &lines)
}

/// Draws `lines` into `path` (a PNG): `y` (from 0, linear) over `x` (logarithmic, for
/// counts such as nodes, tasks or locks that grow by factors), every point marked.
/// Lines without points are left out.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
) -> Result<(), PlotError> {
    let points = || lines.iter().flat_map(|line| line.points.iter());
    if points().next().is_none() {
        return Err(PlotError::Empty);
    }
    let x_lo = points().map(|p| p.0).fold(f64::INFINITY, f64::min).max(1.0);
    let x_hi = points().map(|p| p.0).fold(0.0, f64::max).max(x_lo * 2.0);
    let y_hi = points().map(|p| p.1).fold(0.0, f64::max) * 1.15;
    let whole = |value: &f64| format!("{value:.0}");
    let frame = Frame {
        title,
        x_desc,
        y_desc,
        x_labels: None,
        x_label: &whole,
        y_label: &whole,
        legend: SeriesLabelPosition::UpperRight,
        marks: Marks::Always,
    };
    let x_range = (x_lo / 1.2..x_hi * 1.2).log_scale();
    draw(path, frame, x_range, 0.0..y_hi.max(1.0), lines)
}

/// `x = -log10(1 - q)` as a percentile: 0 is 0 %, 1 is 90 %, 2 is 99 %, 3 is 99.9 %.
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
/// the sample count supports (`log10` of it: 1,000 samples reach 99.9 %).
fn percentile_points(hist: &Histogram<u64>) -> Vec<(f64, f64)> {
    let x_max = (hist.len() as f64).log10().clamp(0.0, MAX_NINES);
    let mut points: Vec<(f64, f64)> = (0..=(MAX_NINES * 100.0) as u32)
        .map(|i| f64::from(i) / 100.0)
        .take_while(|x| *x <= x_max)
        .map(|x| {
            let q = 1.0 - 10f64.powf(-x);
            (x, hist.value_at_quantile(q) as f64 / 1_000.0)
        })
        .collect();
    // The last percentile a line reaches, `1 - 1/n`, is the next-to-largest sample: the
    // largest (the 100th percentile, beyond any point of the axis) ends the line at the
    // same place, as HdrHistogram's plots draw it, so that the line's top is the maximum
    // the report's table prints.
    let max = hist.max() as f64 / 1_000.0;
    if let Some(&(x, y)) = points.last() {
        if max > y {
            points.push((x, max));
        }
    }
    points
}

/// Which points of a line get a mark.
#[derive(Clone, Copy)]
enum Marks {
    /// Only a line of fewer than three points, too short to read as a line.
    WhenSparse,
    /// Every point.
    Always,
}

/// What differs between the two kinds of plot: texts, axis labels, legend, marks.
struct Frame<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    /// How many x labels; `None` leaves it to plotters.
    x_labels: Option<usize>,
    x_label: &'a dyn Fn(&f64) -> String,
    y_label: &'a dyn Fn(&f64) -> String,
    legend: SeriesLabelPosition,
    marks: Marks,
}

/// Draws `lines` on the axes `x` and `y` in `frame`, and writes the PNG.
fn draw<X, Y>(path: &Path, frame: Frame<'_>, x: X, y: Y, lines: &[Line]) -> Result<(), PlotError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    register_font()?;
    let failed = |error: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_owned(),
        message: error.to_string(),
    };
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(frame.title, (FAMILY, 22))
        .margin(16)
        .margin_right(40)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(|e| failed(&e))?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .x_label_formatter(frame.x_label)
        .y_label_formatter(frame.y_label)
        .label_style((FAMILY, 16))
        .axis_desc_style((FAMILY, 18));
    if let Some(labels) = frame.x_labels {
        mesh.x_labels(labels);
    }
    mesh.draw().map_err(|e| failed(&e))?;
    // A line's colour follows its place in `lines`, drawn or not, so that a caller's
    // series keep their colours when one of them has nothing to show.
    for (i, line) in lines.iter().enumerate() {
        if line.points.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        let mark = match frame.marks {
            Marks::WhenSparse => (line.points.len() < 3).then_some(6),
            Marks::Always => Some(5),
        };
        if let Some(size) = mark {
            chart
                .draw_series(
                    line.points
                        .iter()
                        .map(|&p| Circle::new(p, size, color.filled())),
                )
                .map_err(|e| failed(&e))?;
        }
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(3),
            ))
            .map_err(|e| failed(&e))?
            .label(&line.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(frame.legend)
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{histogram, record};
    use super::*;

    #[test]
    fn the_percentile_axis_spreads_the_tail() {
        assert_eq!(percentile_label(&0.0), "0%");
        assert_eq!(percentile_label(&1.0), "90%");
        assert_eq!(percentile_label(&2.0), "99%");
        assert_eq!(percentile_label(&3.0), "99.9%");
        assert_eq!(percentile_label(&4.0), "99.99%");
    }

    #[test]
    fn a_line_reaches_as_far_as_its_samples() {
        let mut hist = histogram();
        for us in 1..=1_000 {
            record(&mut hist, Duration::from_micros(us));
        }
        let points = percentile_points(&hist);
        let last = points.last().unwrap();
        assert!((last.0 - 3.0).abs() < 1e-9, "{last:?}");
        // At 99.9 %, the 999th of 1,000 samples: about 1 ms.
        assert!((0.99..=1.01).contains(&last.1), "{last:?}");
        assert!(points.windows(2).all(|pair| pair[0].1 <= pair[1].1));
    }

    #[test]
    fn a_line_ends_at_its_largest_sample() {
        let mut hist = histogram();
        for _ in 0..999 {
            record(&mut hist, Duration::from_millis(1));
        }
        record(&mut hist, Duration::from_millis(50));
        let last = *percentile_points(&hist).last().unwrap();
        let max = super::super::max(&hist).unwrap().as_secs_f64() * 1_000.0;
        assert!((last.1 - max).abs() < 1e-9, "{last:?}, max {max}");
        assert!((49.9..=50.1).contains(&last.1), "{last:?}");
    }

    #[test]
    fn nothing_to_draw_is_an_error_not_an_empty_picture() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.png");
        let empty = histogram();
        let series = [Series {
            label: "none",
            hist: &empty,
        }];
        let plotted = percentile_plot(&path, "empty", "ms", &series);
        assert!(matches!(plotted, Err(PlotError::Empty)), "{plotted:?}");
        let line = Line {
            label: "none".to_owned(),
            points: Vec::new(),
        };
        let plotted = line_plot(&path, "empty", "x", "y", &[line]);
        assert!(matches!(plotted, Err(PlotError::Empty)), "{plotted:?}");
        assert!(!path.exists());
    }

    #[test]
    fn both_plots_write_a_png_when_there_is_a_font() {
        if register_font().is_err() {
            // Nothing to draw text with on this machine: the refusal is all there is.
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut hist = histogram();
        for us in [120, 150, 180, 900, 4_000] {
            record(&mut hist, Duration::from_micros(us));
        }
        let series = [Series {
            label: "1 task",
            hist: &hist,
        }];
        let percentiles = dir.path().join("percentiles.png");
        percentile_plot(&percentiles, "latency", "cycle (ms)", &series).unwrap();
        let line = Line {
            label: "ops/s".to_owned(),
            points: vec![(3.0, 900.0), (5.0, 700.0), (9.0, 400.0)],
        };
        let curve = dir.path().join("curve.png");
        line_plot(&curve, "by nodes", "nodes", "ops/s", &[line]).unwrap();
        for path in [percentiles, curve] {
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        }
    }
}
