//! `--plot FILE.png`: the cycle-latency distribution of each level, by percentile, drawn
//! by the testkit's `measure` as the benchmark harness draws its own.
//!
//! Text needs a TrueType font, registered at run time (`measure::register_font`:
//! `$QUORUMLOCK_FONT`, `$QUORUMLOCK_BENCH_FONT`, then the usual system fonts). It is looked
//! for before the run starts, so a missing font is a configuration error, not a lost
//! benchmark.

use std::path::Path;

use quorumlock_testkit::measure::{self, PlotError, Series};

use super::Bench;
use crate::exit::{CliError, Kind};

/// Checks before the run that the plot can be drawn and written where asked.
pub fn check(path: &Path) -> Result<(), CliError> {
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(CliError::new(
            Kind::Config,
            format!(
                "--plot {}: no directory {}",
                path.display(),
                parent.display()
            ),
        ));
    }
    measure::register_font().map(drop).map_err(|_| {
        CliError::new(
            Kind::Config,
            "--plot needs a TrueType font, and none was found",
        )
        .hint(
            "install one (Debian: apt-get install fonts-dejavu-core), or point \
             QUORUMLOCK_FONT at a .ttf file",
        )
    })
}

/// Draws the cycle latency of every level of `bench` into `path`.
pub fn draw(path: &Path, bench: &Bench) -> Result<(), CliError> {
    let labels: Vec<String> = bench
        .levels
        .iter()
        .map(|level| format!("{} task(s)", level.concurrency))
        .collect();
    let series: Vec<Series<'_>> = labels
        .iter()
        .zip(&bench.levels)
        .map(|(label, level)| Series {
            label,
            hist: &level.cycle,
        })
        .collect();
    let title = format!(
        "quorumlock bench: acquire + release on {} node(s){}",
        bench.nodes,
        if bench.args.contended {
            ", contended"
        } else {
            ""
        }
    );
    measure::percentile_plot(path, &title, "acquire + release (ms)", &series).map_err(|error| {
        let reason = match error {
            PlotError::Empty => "no cycle completed: nothing to plot".to_owned(),
            other => other.to_string(),
        };
        CliError::new(Kind::Os, format!("could not draw the plot: {reason}"))
    })
}
