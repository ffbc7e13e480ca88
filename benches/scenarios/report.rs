//! The results as Markdown: the targets evaluated, a table per scenario and
//! contender, client memory, and the criterion micro-benchmarks.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::clients::Contender;
use crate::machine::{loadavg, Machine};
use crate::memory;
use crate::options::Options;
use crate::physical::Physical;
use crate::scenarios::{Load, Nodes, Results, SCENARIOS};
use crate::stats::{self, fmt_rate, fmt_us, Run, Summary};

mod profiles;
mod targets;

pub use profiles::ProfileRun;

/// Everything one run measured.
pub struct Report<'a> {
    pub options: &'a Options,
    pub machine: &'a Machine,
    pub results: &'a Results,
    pub memory: Option<&'a memory::MemoryReport>,
    /// The loopback round trips of this run, when measured.
    pub physical: Option<&'a Physical>,
    /// The scenarios again in each delayed network profile.
    pub profiles: &'a [ProfileRun],
    pub micro: Vec<(String, f64)>,
    pub wall: Duration,
}

impl Report<'_> {
    fn runs(&self, id: &str, contender: Contender) -> &[Run] {
        self.results
            .iter()
            .find(|((sid, c), _)| *sid == id && *c == contender)
            .map_or(&[], |(_, runs)| runs.as_slice())
    }

    fn ratio(&self, id: &str, theirs: Contender, metric: fn(&Run) -> Option<f64>) -> Option<f64> {
        stats::paired_ratio(
            self.runs(id, Contender::Quorumlock),
            self.runs(id, theirs),
            metric,
        )
    }

    /// The per-repetition ratios of `metric`, ours over `theirs`: least, median, largest.
    fn spread(
        &self,
        id: &str,
        theirs: Contender,
        metric: fn(&Run) -> Option<f64>,
    ) -> Option<stats::Spread> {
        stats::Spread::of(stats::paired_ratios(
            self.runs(id, Contender::Quorumlock),
            self.runs(id, theirs),
            metric,
        ))
    }

    /// The results as Markdown: the targets, the per-scenario table, memory and micro.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let o = self.options;
        let _ = writeln!(
            out,
            "Run: {} ({} repetition(s), windows x{}), total wall time {:.0} s.  ",
            if o.smoke { "smoke" } else { "full" },
            o.reps,
            o.scale,
            self.wall.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "{}; load average at the end {}.\n",
            self.machine.describe(),
            loadavg()
        );

        self.write_targets(&mut out);
        self.write_profiles(&mut out);

        let _ = writeln!(
            out,
            "\n#### Per scenario (medians over repetitions; ratio columns: quorumlock / that row)\n"
        );
        let _ = writeln!(
            out,
            "| scenario | contender | ops/s | p50 | p99 | max | client CPU/op | ours/this ops/s | ours/this p50 | ours/this p99 | ours/this CPU/op | notes |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for scenario in SCENARIOS {
            for &contender in scenario.contenders {
                let runs = self.runs(scenario.id, contender);
                if runs.is_empty() {
                    continue;
                }
                let summary = Summary::of(runs);
                let ratio = |metric: fn(&Run) -> Option<f64>| {
                    if contender == Contender::Quorumlock {
                        return "".to_owned();
                    }
                    self.ratio(scenario.id, contender, metric)
                        .map_or("–".to_owned(), |r| format!("{r:.2}x"))
                };
                let mut notes = Vec::new();
                if let Some((count, after)) = summary.timed_out {
                    notes.push(format!(
                        "**did not complete within {after:?}** in {count} of {} repetitions",
                        summary.reps
                    ));
                }
                if contender == Contender::NoLock {
                    notes.push(
                        "reference, not a lock: one client, GET + SET of the counter with no \
                         lock, the ceiling of the locked rate"
                            .to_owned(),
                    );
                } else if let Load::Contended { .. } = scenario.load {
                    let least = stats::median(runs.iter().map(|run| Some(run.per_task.0 as f64)));
                    let most = stats::median(runs.iter().map(|run| Some(run.per_task.1 as f64)));
                    if let (Some(least), Some(most)) = (least, most) {
                        notes.push(format!(
                            "ops of the least / most served client: {least:.0} / {most:.0}"
                        ));
                    }
                    if let Some(rounds) =
                        stats::median(runs.iter().map(|run| run.rounds_per_acquire))
                    {
                        notes.push(format!("{rounds:.2} rounds per acquisition"));
                    }
                }
                if let Some(server) = stats::median(runs.iter().map(|run| run.server_cpu_us_per_op))
                {
                    let total = summary.cpu_us_per_op.map_or(String::new(), |client| {
                        format!(", {} with the client's", fmt_us(Some(client + server)))
                    });
                    notes.push(format!("servers' CPU/op {}{total}", fmt_us(Some(server))));
                }
                if summary.errors > 0 {
                    notes.push(format!("{} errors", summary.errors));
                }
                if let Some(check) = runs.iter().filter_map(|run| run.check.as_ref()).next_back() {
                    let all_ok = runs.iter().all(|run| !matches!(run.check, Some(Err(_))));
                    notes.push(match (all_ok, check) {
                        (true, _) => "counter exact in every repetition".to_owned(),
                        (false, Err(err)) => format!("**{err}**"),
                        (false, Ok(_)) => "**counter wrong in some repetition**".to_owned(),
                    });
                }
                if runs.iter().any(|run| run.keys_left.is_some()) {
                    let failed = runs.iter().find_map(|run| match &run.keys_left {
                        Some(Err(err)) => Some(err.clone()),
                        _ => None,
                    });
                    notes.push(failed.map_or(
                        "no lock key left but by dropped unlocks, in every repetition".to_owned(),
                        |err| format!("**{err}**"),
                    ));
                }
                let name = match (scenario.nodes, contender) {
                    (Nodes::Single, Contender::Quorumlock) => "quorumlock (RedisLock)",
                    (Nodes::Single, Contender::Floor) => "floor (1 node)",
                    (Nodes::Single, Contender::Rslock) => "rslock (1 node)",
                    (_, Contender::NoLock) => "no lock (ceiling)",
                    (_, Contender::QuorumlockUnfair) => "quorumlock, fair(false)",
                    (_, c) => c.label(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    scenario
                        .title
                        .split_once(' ')
                        .map_or(scenario.title, |(n, _)| n.trim_end_matches('.')),
                    name,
                    fmt_rate(summary.ops_per_sec),
                    fmt_us(summary.p50_us),
                    fmt_us(summary.p99_us),
                    fmt_us(summary.max_us),
                    fmt_us(summary.cpu_us_per_op),
                    ratio(|run| Some(run.ops_per_sec())),
                    ratio(|run| run.quantile_us(0.5)),
                    ratio(|run| run.quantile_us(0.99)),
                    ratio(|run| run.cpu_us_per_op),
                    notes.join("; "),
                );
            }
        }
        let _ = writeln!(
            out,
            "\nScenario 3's p50/p99 are the wait for the lock (from calling acquire to holding it); \
             its no-lock row has no wait; the other scenarios' are one acquire+release cycle."
        );

        if let Some(memory) = self.memory {
            let _ = writeln!(out, "\n#### Client memory, {} locks held\n", memory.locks);
            let _ = writeln!(out, "| state | bytes per lock |");
            let _ = writeln!(out, "|---|---|");
            let _ = writeln!(
                out,
                "| guards held, no auto-extension | {:.0} |",
                memory.held_per_lock
            );
            let _ = writeln!(
                out,
                "| guards held and auto-extended (after {:.1} s, {} extensions) | {:.0} |",
                memory.held_for.as_secs_f64(),
                memory.extensions,
                memory.extended_per_lock
            );
            let _ = writeln!(
                out,
                "| peak during acquisition and extension | {:.0} |",
                memory.peak_per_lock
            );
            let _ = writeln!(
                out,
                "\nTTL {:?}; {} locks acquired in {:.2} s (64 in flight); {} lost. Bytes are heap bytes \
                 allocated and still live (a counting global allocator), relative to the client \
                 before the first acquisition.",
                memory.ttl, memory.locks, memory.acquire_secs, memory.lost
            );
        }

        if !self.micro.is_empty() {
            let _ = writeln!(out, "\n#### Micro-benchmarks (criterion, median)\n");
            let _ = writeln!(out, "| benchmark | time |");
            let _ = writeln!(out, "|---|---|");
            for (name, ns) in &self.micro {
                let shown = if *ns < 1_000.0 {
                    format!("{ns:.1} ns")
                } else {
                    fmt_us(Some(ns / 1_000.0))
                };
                let _ = writeln!(out, "| {name} | {shown} |");
            }
        }
        out
    }
}

/// Criterion's median estimates, `(benchmark id, ns)`, read from `<dir>/**/new/estimates.json`.
pub fn read_criterion(dir: &Path) -> Vec<(String, f64)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, f64)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name == "new") {
                    let estimates = path.join("estimates.json");
                    if let Some(ns) = std::fs::read_to_string(&estimates)
                        .ok()
                        .and_then(|text| median_estimate(&text))
                    {
                        let id = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
                        out.push((id, ns));
                    }
                } else if path
                    .file_name()
                    .is_some_and(|name| name != "report" && name != "base")
                {
                    walk(&path, root, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `"median":{..."point_estimate":N...}` from criterion's estimates.json.
fn median_estimate(json: &str) -> Option<f64> {
    let rest = &json[json.find("\"median\"")?..];
    let rest = &rest[rest.find("\"point_estimate\"")? + "\"point_estimate\"".len()..];
    let rest = rest.trim_start_matches([':', ' ']);
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}
