//! The per-run, per-repetition summaries built from the latency histograms (recorded
//! through the testkit's `measure`, as `quorumlock bench` records them), and the tables'
//! number formats.

use std::time::Duration;

use quorumlock_testkit::measure::{self, Histogram};

/// The latency at `quantile` of `hist`, in µs, the unit of the tables; `None` without
/// samples.
pub fn quantile_us(hist: &Histogram<u64>, quantile: f64) -> Option<f64> {
    measure::quantile(hist, quantile).map(|latency| latency.as_secs_f64() * 1e6)
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every operation finished.
    Completed,
    /// An operation did not finish within this long; the run was abandoned there.
    TimedOut(Duration),
}

/// What one run of one contender in one scenario measured.
#[derive(Debug, Clone)]
pub struct Run {
    /// Completed operations (acquire + release cycles).
    pub ops: u64,
    /// Wall time from the first operation to the end of the last.
    pub elapsed: Duration,
    /// Per-operation latency (or wait time, for the contended scenario), in µs.
    pub hist: Histogram<u64>,
    pub outcome: Outcome,
    /// Operations that returned an error (not counted in `ops`).
    pub errors: u64,
    /// Scenario-specific check result (the counter of the contended scenario).
    pub check: Option<Result<String, String>>,
    /// Completed operations of the least and the most served task.
    pub per_task: (u64, u64),
    /// quorumlock only: acquisition rounds per completed acquisition.
    pub rounds_per_acquire: Option<f64>,
    /// quorumlock only, contended runs with a lock per client: the same in steady state,
    /// after each client's acquisition that found the lock contended (a plain attempt
    /// first: the lock cannot know yet), counted per acquisition from the client's metrics.
    pub steady_rounds: Option<f64>,
    /// CPU time of the whole client process (user + system) per completed operation, µs.
    pub cpu_us_per_op: Option<f64>,
    /// CPU time of the nodes' redis-servers together per completed operation, µs: on a
    /// machine whose cores the servers share with the clients, client and server CPU
    /// together bound the rate.
    pub server_cpu_us_per_op: Option<f64>,
    /// quorumlock only: whether the run's lock keys went from the nodes, but for those
    /// the library said it may have left (see `load::keys_left`).
    pub keys_left: Option<Result<String, String>>,
}

impl Run {
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }

    /// The latency at `quantile`, in µs; `None` when nothing completed.
    pub fn quantile_us(&self, quantile: f64) -> Option<f64> {
        quantile_us(&self.hist, quantile)
    }

    pub fn max_us(&self) -> Option<f64> {
        measure::max(&self.hist).map(|latency| latency.as_secs_f64() * 1e6)
    }
}

/// The metrics reported per contender: medians over the repetitions of per-run metrics.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub reps: usize,
    pub ops_per_sec: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub cpu_us_per_op: Option<f64>,
    /// Repetitions that timed out, and the timeout.
    pub timed_out: Option<(usize, Duration)>,
    pub errors: u64,
}

impl Summary {
    pub fn of(runs: &[Run]) -> Summary {
        let completed: Vec<&Run> = runs
            .iter()
            .filter(|run| run.outcome == Outcome::Completed)
            .collect();
        let timed_out = runs
            .iter()
            .filter_map(|run| match run.outcome {
                Outcome::TimedOut(after) => Some(after),
                Outcome::Completed => None,
            })
            .collect::<Vec<_>>();
        Summary {
            reps: runs.len(),
            ops_per_sec: median(completed.iter().map(|run| Some(run.ops_per_sec()))),
            p50_us: median(completed.iter().map(|run| run.quantile_us(0.50))),
            p99_us: median(completed.iter().map(|run| run.quantile_us(0.99))),
            max_us: median(completed.iter().map(|run| run.max_us())),
            cpu_us_per_op: median(completed.iter().map(|run| run.cpu_us_per_op)),
            timed_out: timed_out.first().map(|after| (timed_out.len(), *after)),
            errors: runs.iter().map(|run| run.errors).sum(),
        }
    }

    pub fn completed(&self) -> bool {
        self.timed_out.is_none() && self.ops_per_sec.is_some()
    }
}

/// The median of the values that are present; `None` when none is.
pub fn median(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().flatten().collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The paired ratios `ours / theirs` of one metric, one per repetition in which both runs
/// completed: each repetition's two runs were made back to back, so pairing cancels slow
/// drifts of the machine's load.
pub fn paired_ratios(
    ours: &[Run],
    theirs: &[Run],
    metric: impl Fn(&Run) -> Option<f64>,
) -> Vec<f64> {
    ours.iter()
        .zip(theirs)
        .filter_map(|(a, b)| {
            if a.outcome != Outcome::Completed || b.outcome != Outcome::Completed {
                return None;
            }
            match (metric(a), metric(b)) {
                (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                _ => None,
            }
        })
        .collect()
}

/// The median over repetitions of the paired ratio `ours / theirs` of one metric.
pub fn paired_ratio(
    ours: &[Run],
    theirs: &[Run],
    metric: impl Fn(&Run) -> Option<f64>,
) -> Option<f64> {
    median(paired_ratios(ours, theirs, metric).into_iter().map(Some))
}

/// The least, the median and the largest of per-repetition values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// `None` without values.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let values: Vec<f64> = values.into_iter().collect();
        Some(Spread {
            median: median(values.iter().copied().map(Some))?,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// `0.91x (0.85-0.97)`: the median, then the least and the largest.
    pub fn ratio(self) -> String {
        format!("{:.2}x ({:.2}–{:.2})", self.median, self.min, self.max)
    }

    /// `0.91 (0.85-0.97)`.
    pub fn plain(self) -> String {
        format!("{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

/// All runs' histograms merged, for plots.
pub fn merged(runs: &[Run]) -> Histogram<u64> {
    let mut all = measure::histogram();
    for run in runs {
        measure::merge(&mut all, &run.hist);
    }
    all
}

/// A latency in µs as text: `812 µs`, `12.3 ms`, `1.52 s`.
pub fn fmt_us(us: Option<f64>) -> String {
    match us {
        None => "–".to_owned(),
        Some(us) if us < 1_000.0 => format!("{us:.0} µs"),
        Some(us) if us < 1_000_000.0 => format!("{:.2} ms", us / 1_000.0),
        Some(us) => format!("{:.2} s", us / 1_000_000.0),
    }
}

/// A rate as text: `12,345/s`.
pub fn fmt_rate(rate: Option<f64>) -> String {
    match rate {
        None => "–".to_owned(),
        Some(rate) if rate >= 100.0 => format!("{}/s", thousands(rate.round() as u64)),
        Some(rate) => format!("{rate:.1}/s"),
    }
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// CPU time used by this process so far (user + system), from `/proc/self/stat`; `None`
/// where that file does not exist.
pub fn process_cpu() -> Option<Duration> {
    cpu_of("self")
}

/// CPU time used so far by the processes `pids` together (the nodes' redis-servers);
/// `None` when one of them cannot be read.
pub fn processes_cpu(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|pid| cpu_of(&pid.to_string())).sum()
}

/// User + system CPU time of process `pid` (a number or "self") from `/proc/<pid>/stat`.
fn cpu_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 of `rest`.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel reports in USER_HZ, 100 on every Linux ABI Rust targets.
    Some(Duration::from_millis(ticks * 10))
}
