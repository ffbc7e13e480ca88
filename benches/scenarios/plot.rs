//! The scenarios' latency-distribution plots (PNG), one per scenario, drawn by the
//! testkit's `measure` (as `quorumlock bench --plot` draws its own). Without a font for
//! their text (`$QUORUMLOCK_FONT`, then `$QUORUMLOCK_BENCH_FONT`, then a system one),
//! plots are skipped with a warning.

use std::path::Path;

use quorumlock_testkit::measure::{self, Histogram, Series};

use crate::clients::Contender;
use crate::scenarios::{Load, Results, SCENARIOS};
use crate::stats;

/// Draws each scenario's latency distributions, one PNG per scenario, into `dir`.
pub fn draw_plots(dir: &Path, results: &Results) {
    if let Err(err) = measure::register_font() {
        eprintln!("plots skipped: {err}");
        return;
    }
    if let Err(err) = std::fs::create_dir_all(dir) {
        eprintln!("plots skipped: {}: {err}", dir.display());
        return;
    }
    for scenario in SCENARIOS {
        let merged: Vec<(Contender, Histogram<u64>)> = scenario
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
                label: contender.label(),
                hist,
            })
            .collect();
        let y_desc = match scenario.load {
            Load::Contended { .. } => "wait for the lock (ms)",
            Load::Cycles { .. } => "acquire + release (ms)",
        };
        let path = dir.join(format!("{}.png", scenario.id));
        match measure::percentile_plot(&path, scenario.title, y_desc, &series) {
            Ok(()) => println!("plot: {}", path.display()),
            Err(err) => eprintln!("plot {} failed: {err}", path.display()),
        }
    }
}
