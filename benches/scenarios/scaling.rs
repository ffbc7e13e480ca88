//! How the cost grows: scenario 1 on 3, 5, 7 and 9 nodes, scenario 2 with 1, 16, 64 and
//! 256 tasks, and the memory of 1,000 to 100,000 held locks, each against rslock and the
//! floor in the same run; one table and one curve (PNG) per axis.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use quorumlock_testkit::measure::{self, Line};
use quorumlock_testkit::RedisCluster;

use crate::clients::Contender;
use crate::load::run_one;
use crate::memory;
use crate::options::Options;
use crate::scenarios::{smoke_checks, Load, Nodes, Scenario};
use crate::stats::{self, fmt_rate, fmt_us, Run, Summary};

const CONTENDERS: &[Contender] = &[Contender::Quorumlock, Contender::Rslock, Contender::Floor];

/// The node counts of scenario 1's curve.
pub const NODE_COUNTS: [usize; 4] = [3, 5, 7, 9];

const fn cycles(id: &'static str, title: &'static str, tasks: usize) -> Scenario {
    Scenario {
        id,
        title,
        nodes: Nodes::All,
        load: Load::Cycles { tasks },
        window: Duration::from_millis(1_000),
        contenders: CONTENDERS,
    }
}

/// Scenario 1 on each node count, in the order of [`NODE_COUNTS`].
const BY_NODES: [Scenario; 4] = [
    cycles("s1-n3", "1 task, 3 nodes", 1),
    cycles("s1-n5", "1 task, 5 nodes", 1),
    cycles("s1-n7", "1 task, 7 nodes", 1),
    cycles("s1-n9", "1 task, 9 nodes", 1),
];

/// Scenario 2 (5 nodes) with each task count.
const BY_TASKS: [(usize, Scenario); 4] = [
    (1, cycles("s2-t1", "1 task, 5 nodes", 1)),
    (16, cycles("s2-t16", "16 tasks, 5 nodes", 16)),
    (64, cycles("s2-t64", "64 tasks, 5 nodes", 64)),
    (256, cycles("s2-t256", "256 tasks, 5 nodes", 256)),
];

/// One point of a curve: its x value, and each contender's runs there.
pub struct Point {
    pub x: usize,
    /// Node requests per operation (an acquire and a release on every node).
    pub requests_per_op: usize,
    pub runs: Vec<(Contender, Vec<Run>)>,
}

/// What the scaling runs measured.
pub struct Scaling {
    pub by_nodes: Vec<Point>,
    pub by_tasks: Vec<Point>,
    /// `(locks, contender, bytes per held lock)`.
    pub memory: Vec<(usize, Contender, f64)>,
    /// What failed the checks every run must pass (see `smoke_checks`).
    pub failures: Vec<String>,
}

/// Runs every point, each contender in turn (alternating order between repetitions), on
/// `cluster` (at least 9 nodes).
pub async fn run(options: &Options, cluster: &mut RedisCluster) -> Scaling {
    // Three repetitions are enough for a curve, and keep the full run's time in bounds.
    let reps = options.reps.min(3);
    let urls = cluster.urls();
    let mut failures = Vec::new();
    let mut by_nodes = Vec::new();
    for (nodes, scenario) in NODE_COUNTS.iter().zip(&BY_NODES) {
        let runs = run_point(options, cluster, scenario, &urls[..*nodes], reps).await;
        failures.extend(checks(scenario, &runs));
        by_nodes.push(Point {
            x: *nodes,
            requests_per_op: 2 * nodes,
            runs,
        });
    }
    let mut by_tasks = Vec::new();
    for (tasks, scenario) in &BY_TASKS {
        let runs = run_point(options, cluster, scenario, &urls[..5], reps).await;
        failures.extend(checks(scenario, &runs));
        by_tasks.push(Point {
            x: *tasks,
            requests_per_op: 10,
            runs,
        });
    }
    let counts: &[usize] = if options.smoke {
        &[100, 300]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut memory = Vec::new();
    for &locks in counts {
        for &contender in CONTENDERS {
            let bytes = memory::held_per_lock(contender, &urls[..5], locks).await;
            println!(
                "   memory {locks} locks {:<10} {bytes:.0} bytes/lock",
                contender.label()
            );
            memory.push((locks, contender, bytes));
        }
        cluster.flush_all().await.expect("flush the nodes");
    }
    Scaling {
        by_nodes,
        by_tasks,
        memory,
        failures,
    }
}

/// The checks of every run, but for failed operations: at 256 tasks on two shared cores a
/// node's answers can come after the 50 ms node timeout, and a cycle then fails with no
/// quorum, as it should under that overload; the tables count them instead.
fn checks(scenario: &Scenario, runs: &[(Contender, Vec<Run>)]) -> Vec<String> {
    runs.iter()
        .flat_map(|(contender, runs)| runs.iter().map(move |run| (*contender, run)))
        .flat_map(|(contender, run)| smoke_checks(scenario, contender, run))
        .filter(|failure| !failure.ends_with("operations failed"))
        .collect()
}

async fn run_point(
    options: &Options,
    cluster: &mut RedisCluster,
    scenario: &Scenario,
    urls: &[String],
    reps: usize,
) -> Vec<(Contender, Vec<Run>)> {
    let mut runs: Vec<(Contender, Vec<Run>)> = CONTENDERS.iter().map(|&c| (c, vec![])).collect();
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..CONTENDERS.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let run = run_one(options, cluster, scenario, CONTENDERS[i], urls, rep).await;
            println!(
                "   {} rep {rep} {:<10} {:>10} p50 {:>9} cpu/op {:>9}",
                scenario.id,
                CONTENDERS[i].label(),
                fmt_rate(Some(run.ops_per_sec())),
                fmt_us(run.quantile_us(0.5)),
                fmt_us(run.cpu_us_per_op),
            );
            runs[i].1.push(run);
        }
    }
    cluster.flush_all().await.expect("flush the nodes");
    runs
}

impl Point {
    fn runs(&self, contender: Contender) -> &[Run] {
        self.runs
            .iter()
            .find(|(c, _)| *c == contender)
            .map_or(&[], |(_, runs)| runs.as_slice())
    }

    fn ratio(&self, theirs: Contender, metric: fn(&Run) -> Option<f64>) -> Option<f64> {
        stats::paired_ratio(self.runs(Contender::Quorumlock), self.runs(theirs), metric)
    }
}

impl Scaling {
    /// The tables, as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (title, axis, points) in [
            (
                "Scenario 1 by node count (1 task, acquire + release)",
                "nodes",
                &self.by_nodes,
            ),
            (
                "Scenario 2 by task count (5 nodes, distinct resources)",
                "tasks",
                &self.by_tasks,
            ),
        ] {
            let _ = writeln!(out, "\n#### {title}\n");
            let _ = writeln!(
                out,
                "| {axis} | quorumlock ops/s | rslock ops/s | floor ops/s | ours/rslock ops/s | ours/rslock p50 | ours/floor p50 | CPU per node request: ours / rslock / floor | quorumlock's failed cycles |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
            for point in points.iter() {
                let summary = |c| Summary::of(point.runs(c));
                let per_request = |c| {
                    summary(c)
                        .cpu_us_per_op
                        .map(|cpu| cpu / point.requests_per_op as f64)
                };
                let ratio =
                    |value: Option<f64>| value.map_or("–".to_owned(), |v| format!("{v:.2}x"));
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} |",
                    point.x,
                    fmt_rate(summary(Contender::Quorumlock).ops_per_sec),
                    fmt_rate(summary(Contender::Rslock).ops_per_sec),
                    fmt_rate(summary(Contender::Floor).ops_per_sec),
                    ratio(point.ratio(Contender::Rslock, |r| Some(r.ops_per_sec()))),
                    ratio(point.ratio(Contender::Rslock, |r| r.quantile_us(0.5))),
                    ratio(point.ratio(Contender::Floor, |r| r.quantile_us(0.5))),
                    fmt_us(per_request(Contender::Quorumlock)),
                    fmt_us(per_request(Contender::Rslock)),
                    fmt_us(per_request(Contender::Floor)),
                    summary(Contender::Quorumlock).errors,
                );
            }
        }
        let _ = writeln!(
            out,
            "\n#### Memory per held lock (heap bytes, no auto-extension)\n"
        );
        let _ = writeln!(out, "| locks held | quorumlock | rslock | floor |");
        let _ = writeln!(out, "|---|---|---|---|");
        let mut counts: Vec<usize> = self.memory.iter().map(|m| m.0).collect();
        counts.dedup();
        for locks in counts {
            let bytes = |c| {
                self.memory
                    .iter()
                    .find(|m| m.0 == locks && m.1 == c)
                    .map_or("–".to_owned(), |m| format!("{:.0}", m.2))
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                stats::thousands(locks as u64),
                bytes(Contender::Quorumlock),
                bytes(Contender::Rslock),
                bytes(Contender::Floor)
            );
        }
        let _ = writeln!(
            out,
            "\nCPU per node request: the whole client process's CPU time per operation over the \
             node requests of an operation (an acquire and a release on each node), medians of \
             up to three repetitions."
        );
        out
    }

    /// One PNG per curve in `dir`: ops/s by node count and by task count, and bytes per
    /// held lock by lock count.
    pub fn draw(&self, dir: &Path) {
        let ops = |point: &Point, c| Summary::of(point.runs(c)).ops_per_sec;
        let curves = [
            (
                "scaling-nodes.png",
                "Scenario 1: ops/s by node count",
                "nodes",
                &self.by_nodes,
            ),
            (
                "scaling-tasks.png",
                "Scenario 2: ops/s by task count",
                "tasks",
                &self.by_tasks,
            ),
        ];
        for (file, title, x_desc, points) in curves {
            let lines: Vec<Line> = CONTENDERS
                .iter()
                .map(|&c| Line {
                    label: c.label().to_owned(),
                    points: points
                        .iter()
                        .filter_map(|p| ops(p, c).map(|v| (p.x as f64, v)))
                        .collect(),
                })
                .collect();
            report(
                measure::line_plot(&dir.join(file), title, x_desc, "ops/s", &lines),
                dir,
                file,
            );
        }
        let lines: Vec<Line> = CONTENDERS
            .iter()
            .map(|&c| Line {
                label: c.label().to_owned(),
                points: self
                    .memory
                    .iter()
                    .filter(|m| m.1 == c)
                    .map(|m| (m.0 as f64, m.2))
                    .collect(),
            })
            .collect();
        let file = "scaling-memory.png";
        let title = "Memory per held lock by locks held";
        report(
            measure::line_plot(
                &dir.join(file),
                title,
                "locks held",
                "bytes per lock",
                &lines,
            ),
            dir,
            file,
        );
    }
}

fn report(result: Result<(), measure::PlotError>, dir: &Path, file: &str) {
    match result {
        Ok(()) => println!("plot: {}", dir.join(file).display()),
        Err(err) => eprintln!("plot {file} failed: {err}"),
    }
}
