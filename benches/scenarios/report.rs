//! The results as Markdown: the targets evaluated, a table per scenario and
//! contender, client memory, and the criterion micro-benchmarks.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use quorumlock::LockConfig;

use crate::clients::Contender;
use crate::machine::{loadavg, Machine};
use crate::memory;
use crate::options::Options;
use crate::scenarios::{Load, Nodes, Results, SCENARIOS};
use crate::stats::{self, fmt_rate, fmt_us, Run, Summary};

/// Everything one run measured.
pub struct Report<'a> {
    pub options: &'a Options,
    pub machine: &'a Machine,
    pub results: &'a Results,
    pub memory: Option<&'a memory::MemoryReport>,
    pub micro: Vec<(String, f64)>,
    pub wall: Duration,
}

/// One target of the issue, evaluated.
struct Target {
    what: &'static str,
    goal: &'static str,
    value: Option<f64>,
    met: Option<bool>,
    shown: String,
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

    fn targets(&self) -> Vec<Target> {
        let p50 = |run: &Run| run.quantile_us(0.5);
        let p99 = |run: &Run| run.quantile_us(0.99);
        let ops = |run: &Run| Some(run.ops_per_sec());
        let at_most = |what, goal, value: Option<f64>, limit: f64| Target {
            what,
            goal,
            value,
            met: value.map(|v| v <= limit),
            shown: value.map_or("–".to_owned(), |v| format!("{v:.2}x")),
        };
        let at_least = |what, goal, value: Option<f64>, limit: f64| Target {
            what,
            goal,
            value,
            met: value.map(|v| v >= limit),
            shown: value.map_or("–".to_owned(), |v| format!("{v:.2}x")),
        };
        let ours = |id| Summary::of(self.runs(id, Contender::Quorumlock));
        let s4_vs_s1 = match (ours("s4").p50_us, ours("s1").p50_us) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let node_timeout = LockConfig::DEFAULT_NODE_TIMEOUT.as_secs_f64() * 1e6;
        let s5 = ours("s5");
        let s5_p99 = s5.p99_us.filter(|_| s5.completed() && s5.errors == 0);
        vec![
            at_most(
                "1. p50 vs rslock",
                "≤ 0.90x",
                self.ratio("s1", Contender::Rslock, p50),
                0.9,
            ),
            at_most(
                "1. p50 vs floor",
                "≤ 1.15x",
                self.ratio("s1", Contender::Floor, p50),
                1.15,
            ),
            at_least(
                "2. ops/s vs rslock",
                "≥ 1.3x",
                self.ratio("s2", Contender::Rslock, ops),
                1.3,
            ),
            at_least(
                "3. ops/s vs rslock",
                "≥ 10x",
                self.ratio("s3", Contender::Rslock, ops),
                10.0,
            ),
            Target {
                what: "3. reference: 10x rslock's ops/s vs the no-lock ceiling",
                goal: "≤ 1x, or 10x is unreachable",
                value: self.ten_rslock_vs_ceiling(),
                met: None,
                shown: self
                    .ten_rslock_vs_ceiling()
                    .map_or("–".to_owned(), |v| format!("{v:.2}x")),
            },
            at_most(
                "3. wait p99 vs rslock",
                "≤ 0.10x",
                self.ratio("s3", Contender::Rslock, p99),
                0.1,
            ),
            // rslock's p99 swings between runs: most of its acquisitions are the releaser
            // taking the lock straight back, so the starved waits can fall beyond the 99th
            // percentile. The longest wait and the share of the least served client show
            // the starvation itself.
            Target {
                what: "3. reference: longest wait vs rslock's",
                goal: "(no target)",
                value: self.ratio("s3", Contender::Rslock, |run: &Run| run.max_us()),
                met: None,
                shown: self
                    .ratio("s3", Contender::Rslock, |run: &Run| run.max_us())
                    .map_or("–".to_owned(), |v| format!("{v:.3}x")),
            },
            Target {
                what: "3. reference: least / most served client, ours and rslock's",
                goal: "(no target; 1 is fair)",
                value: None,
                met: None,
                shown: self.fair_shares(),
            },
            at_most("4. p50 vs our scenario-1 p50", "≤ 1.3x", s4_vs_s1, 1.3),
            Target {
                what: "5. completes, p99 vs node timeout (50 ms)",
                goal: "< 2x",
                value: s5_p99,
                met: s5_p99.map(|v| v < 2.0 * node_timeout),
                shown: s5_p99.map_or("did not complete".to_owned(), |v| {
                    format!("{} = {:.2}x", fmt_us(Some(v)), v / node_timeout)
                }),
            },
            at_most(
                "6. p50 vs floor (single node)",
                "≤ 1.15x",
                self.ratio("s6", Contender::Floor, p50),
                1.15,
            ),
        ]
    }

    /// Scenario 3: ten times rslock's rate over the no-lock ceiling's, the median of the
    /// per-repetition ratios (the runs of one repetition are back to back).
    fn ten_rslock_vs_ceiling(&self) -> Option<f64> {
        stats::paired_ratio(
            self.runs("s3", Contender::Rslock),
            self.runs("s3", Contender::NoLock),
            |run| Some(run.ops_per_sec()),
        )
        .map(|ratio| 10.0 * ratio)
    }

    /// Scenario 3: the least served client's operations over the most served one's, the
    /// median over the repetitions, for quorumlock and for rslock.
    fn fair_shares(&self) -> String {
        let share = |contender| {
            stats::median(self.runs("s3", contender).iter().map(|run| {
                let (least, most) = run.per_task;
                (most > 0).then(|| least as f64 / most as f64)
            }))
            .map_or("–".to_owned(), |v| format!("{v:.2}"))
        };
        format!(
            "{} and {}",
            share(Contender::Quorumlock),
            share(Contender::Rslock)
        )
    }

    /// What the 10x target of scenario 3 asks, against the ceiling measured in this run.
    fn ceiling_note(&self) -> Option<String> {
        let ceiling = Summary::of(self.runs("s3", Contender::NoLock)).ops_per_sec?;
        let rslock = Summary::of(self.runs("s3", Contender::Rslock)).ops_per_sec?;
        let ratio = self.ten_rslock_vs_ceiling()?;
        Some(format!(
            "Scenario 3's ceiling, measured in this run: one client doing the same GET + SET \
             on node 0 with no lock at all, {}. Ten times rslock's rate, 10 x {} = {}, is \
             {ratio:.2}x that ceiling (median of per-repetition ratios): the 10x target is {} \
             what the counter's two round trips allow without any lock.",
            fmt_rate(Some(ceiling)),
            fmt_rate(Some(rslock)),
            fmt_rate(Some(10.0 * rslock)),
            if ratio > 1.0 { "above" } else { "within" },
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

        let _ = writeln!(
            out,
            "#### Targets (ratios quorumlock / peer, medians of per-repetition ratios)\n"
        );
        let _ = writeln!(out, "| scenario: metric | target | measured | met |");
        let _ = writeln!(out, "|---|---|---|---|");
        for target in self.targets() {
            let met = match target.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "n/a",
            };
            let _ = target.value;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                target.what, target.goal, target.shown, met
            );
        }
        if let Some(note) = self.ceiling_note() {
            let _ = writeln!(out, "\n{note}");
        }

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
