//! The report at the end of a bench run: tables and terminal histograms on stdout, or one
//! JSON document with `--json` (its fields are listed in docs/cli.md).

use serde_json::{json, Value};

use super::figures::{
    fmt_ms, fmt_rate, max_ms, quantile_ms, summary_json, terminal_histogram, CYCLE_QUANTILES,
    SHORT_QUANTILES,
};
use super::probe::NodeProbe;
use super::{Bench, Level};
use crate::duration::{format_duration, millis};
use crate::output::Output;

/// Rows of the terminal histograms, and the width of their bars.
const HISTOGRAM_ROWS: usize = 12;
const HISTOGRAM_WIDTH: usize = 40;

/// Prints the report on stdout.
pub fn print(bench: &Bench, out: Output, exit_code: u8) {
    out.result(&to_json(bench, exit_code), || text(bench));
}

/// The node whose lock round trip (SET NX PX + release) has the highest median; the one
/// that costs a quorum the most when it is among the nodes a round waits for.
pub fn slowest(probes: &[NodeProbe]) -> Option<&NodeProbe> {
    if probes.len() < 2 {
        return None;
    }
    probes
        .iter()
        .filter(|probe| !probe.lock.is_empty())
        .max_by(|a, b| {
            let a = quantile_ms(&a.lock, 0.5).unwrap_or(0.0);
            let b = quantile_ms(&b.lock, 0.5).unwrap_or(0.0);
            a.total_cmp(&b)
        })
}

/// The median over the nodes of their `lock` medians.
fn median_lock_p50(probes: &[NodeProbe]) -> Option<f64> {
    let mut p50s: Vec<f64> = probes
        .iter()
        .filter_map(|probe| quantile_ms(&probe.lock, 0.5))
        .collect();
    p50s.sort_by(f64::total_cmp);
    p50s.get(p50s.len() / 2).copied()
}

/// The nodes that failed requests: they are named whatever their latency.
fn failing(probes: &[NodeProbe]) -> impl Iterator<Item = &NodeProbe> {
    probes
        .iter()
        .filter(|probe| probe.errors + probe.timeouts > 0)
}

/// A table: columns padded to their widest cell, the first left-aligned, the rest right.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(" ");
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            text.push(' ');
            if i == 0 {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            } else {
                text.push_str(&" ".repeat(pad + 1));
                text.push_str(cell);
            }
        }
        text.trim_end().to_owned()
    };
    let mut text = line(header.to_vec());
    for row in rows {
        text.push('\n');
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

/// The report for people.
pub fn text(bench: &Bench) -> String {
    let args = &bench.args;
    let config = &bench.config;
    let mut text = String::new();
    let shape = if args.contended {
        "contended: all tasks on one resource".to_owned()
    } else {
        "one resource per task".to_owned()
    };
    let length = match args.ops {
        Some(ops) => format!("{ops} cycles per level"),
        None => format!("{} per level", format_duration(args.duration)),
    };
    let rate = args
        .rate
        .map(|rate| format!(", at most {}", fmt_rate(rate)))
        .unwrap_or_default();
    text.push_str(&format!(
        "quorumlock bench: {} node(s), quorum {}, TTL {} (drift allowance {}), node timeout {}, \
         {} queue, {shape}, {length}{rate}\nkeys under {:?}\n",
        bench.nodes,
        bench.quorum,
        format_duration(config.ttl()),
        format_duration(config.drift_allowance()),
        format_duration(config.node_timeout()),
        if config.fair() { "fair" } else { "no" },
        bench.prefix,
    ));

    text.push_str(&format!(
        "\nNodes (direct connection, {} probe rounds: PING, and SET NX PX + release; decided = \
         share of rounds whose quorum this node's grant completed)\n",
        bench.probe_rounds
    ));
    let rows: Vec<Vec<String>> = bench
        .probes
        .iter()
        .map(|probe| {
            let share = 100.0 * probe.decided as f64 / bench.probe_rounds.max(1) as f64;
            vec![
                probe.name.clone(),
                fmt_ms(quantile_ms(&probe.ping, 0.5)),
                fmt_ms(quantile_ms(&probe.ping, 0.99)),
                fmt_ms(max_ms(&probe.ping)),
                fmt_ms(quantile_ms(&probe.lock, 0.5)),
                fmt_ms(quantile_ms(&probe.lock, 0.99)),
                fmt_ms(max_ms(&probe.lock)),
                probe.errors.to_string(),
                probe.timeouts.to_string(),
                format!("{share:.0}%"),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "node", "ping p50", "p99", "max", "lock p50", "p99", "max", "errors", "timeouts",
            "decided",
        ],
        &rows,
    ));
    text.push('\n');
    if let Some(slow) = slowest(&bench.probes) {
        // Against the median node, so that a "slowest" within noise reads as such.
        let slow_p50 = quantile_ms(&slow.lock, 0.5).unwrap_or(0.0);
        let median = median_lock_p50(&bench.probes).unwrap_or(slow_p50);
        text.push_str(&format!(
            "  slowest node: {} (lock p50 {}, {:.1}x the median node's {}; ping p50 {})\n",
            slow.name,
            fmt_ms(Some(slow_p50)),
            slow_p50 / median.max(1e-9),
            fmt_ms(Some(median)),
            fmt_ms(quantile_ms(&slow.ping, 0.5)),
        ));
    }
    for probe in failing(&bench.probes) {
        text.push_str(&format!(
            "  failing node: {}: {} error(s), {} timeout(s); last: {}\n",
            probe.name,
            probe.errors,
            probe.timeouts,
            probe.last_error.as_deref().unwrap_or("-"),
        ));
    }

    text.push_str(
        "\nAcquire + release cycles (attempts = lock rounds per acquisition; validity lost = \
         TTL - validity returned)\n",
    );
    let mut header = vec![
        "tasks", "cycles", "cycles/s", "p50", "p90", "p99", "p99.9", "max", "attempts", "lost p50",
        "lost max", "failed",
    ];
    if args.contended {
        header.extend(["wait p50", "wait p99", "wait max", "least/most served"]);
    }
    let rows: Vec<Vec<String>> = bench
        .levels
        .iter()
        .map(|level| {
            let mut row = vec![
                level.concurrency.to_string(),
                level.ops.to_string(),
                fmt_rate(ops_per_sec(level)),
                fmt_ms(quantile_ms(&level.cycle, 0.5)),
                fmt_ms(quantile_ms(&level.cycle, 0.9)),
                fmt_ms(quantile_ms(&level.cycle, 0.99)),
                fmt_ms(quantile_ms(&level.cycle, 0.999)),
                fmt_ms(max_ms(&level.cycle)),
                attempts(level).map_or("-".to_owned(), |a| format!("{a:.2}")),
                fmt_ms(quantile_ms(&level.validity_lost, 0.5)),
                fmt_ms(max_ms(&level.validity_lost)),
                failures(level).to_string(),
            ];
            if args.contended {
                let (least, most) = served(level);
                row.extend([
                    fmt_ms(quantile_ms(&level.acquire, 0.5)),
                    fmt_ms(quantile_ms(&level.acquire, 0.99)),
                    fmt_ms(max_ms(&level.acquire)),
                    format!("{least}/{most}"),
                ]);
            }
            row
        })
        .collect();
    text.push_str(&table(&header, &rows));
    text.push('\n');
    for level in &bench.levels {
        if failures(level) > 0 || level.metrics.node_errors + level.metrics.node_timeouts > 0 {
            let kinds: Vec<String> = level
                .errors
                .iter()
                .map(|(kind, count)| format!("{count} {kind}"))
                .collect();
            text.push_str(&format!(
                "  {} task(s): {} failed cycle(s){}, {} node error(s) and {} node timeout(s) \
                 in lock rounds{}\n",
                level.concurrency,
                failures(level),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", kinds.join(", "))
                },
                level.metrics.node_errors,
                level.metrics.node_timeouts,
                level
                    .last_error
                    .as_deref()
                    .map(|error| format!("; last: {error}"))
                    .unwrap_or_default(),
            ));
        }
    }

    for level in &bench.levels {
        text.push_str(&format!(
            "\nCycle latency, {} task(s) ({} cycles)\n",
            level.concurrency,
            level.cycle.len()
        ));
        for line in terminal_histogram(&level.cycle, HISTOGRAM_ROWS, HISTOGRAM_WIDTH) {
            text.push_str(&line);
            text.push('\n');
        }
    }

    let cleanup = &bench.cleanup;
    text.push_str(&format!(
        "\nClean-up: {} key(s) of this run deleted at the end; {}",
        cleanup.deleted,
        if cleanup.remaining.is_empty() && cleanup.unchecked.is_empty() {
            "none left on any node".to_owned()
        } else {
            format!(
                "{} node(s) not clean (see the warnings below)",
                cleanup.remaining.len() + cleanup.unchecked.len()
            )
        }
    ));
    if let Some(signal) = bench.interrupted {
        text.push_str(&format!(
            "\nInterrupted by {signal}: the last level is partial"
        ));
    }
    text
}

/// Completed cycles per second of the level.
pub fn ops_per_sec(level: &Level) -> f64 {
    level.ops as f64 / level.elapsed.as_secs_f64().max(1e-9)
}

/// Lock rounds per acquisition that succeeded.
pub fn attempts(level: &Level) -> Option<f64> {
    (level.metrics.acquired > 0)
        .then(|| level.metrics.attempts as f64 / level.metrics.acquired as f64)
}

/// Failed acquisitions and releases.
fn failures(level: &Level) -> u64 {
    level.errors.values().sum()
}

/// Cycles of the least and the most served task.
fn served(level: &Level) -> (u64, u64) {
    let least = level.per_task.iter().copied().min().unwrap_or(0);
    let most = level.per_task.iter().copied().max().unwrap_or(0);
    (least, most)
}

/// The report for scripts (`--json`).
pub fn to_json(bench: &Bench, exit_code: u8) -> Value {
    let args = &bench.args;
    let config = &bench.config;
    let nodes: Vec<Value> = bench
        .probes
        .iter()
        .map(|probe| {
            json!({
                "node": probe.name,
                "ping": summary_json(&probe.ping, SHORT_QUANTILES),
                "lock": summary_json(&probe.lock, SHORT_QUANTILES),
                "errors": probe.errors,
                "timeouts": probe.timeouts,
                "last_error": probe.last_error,
                "quorum_decided": probe.decided,
                "quorum_decided_share": probe.decided as f64 / bench.probe_rounds.max(1) as f64,
            })
        })
        .collect();
    let levels: Vec<Value> = bench
        .levels
        .iter()
        .map(|level| {
            let (least, most) = served(level);
            json!({
                "concurrency": level.concurrency,
                "cycles": level.ops,
                "elapsed_ms": millis(level.elapsed),
                "cycles_per_sec": ops_per_sec(level),
                "cycle": summary_json(&level.cycle, CYCLE_QUANTILES),
                "acquire": summary_json(&level.acquire, CYCLE_QUANTILES),
                "release": summary_json(&level.release, SHORT_QUANTILES),
                "validity_lost": summary_json(&level.validity_lost, SHORT_QUANTILES),
                "attempts_per_acquisition": attempts(level),
                "failed": failures(level),
                "errors": level.errors,
                "last_error": level.last_error,
                "lock_rounds": {
                    "attempts": level.metrics.attempts,
                    "acquired": level.metrics.acquired,
                    "passed": level.metrics.passed,
                    "contended": level.metrics.contended,
                    "no_quorum": level.metrics.no_quorum,
                    "node_errors": level.metrics.node_errors,
                    "node_timeouts": level.metrics.node_timeouts,
                    "reconnects": level.metrics.reconnects,
                },
                "fairness": args.contended.then(|| json!({
                    "least_served": least,
                    "most_served": most,
                })),
            })
        })
        .collect();
    let cleanup = &bench.cleanup;
    json!({
        "key_prefix": bench.prefix,
        "node_count": bench.nodes,
        "quorum": bench.quorum,
        "settings": {
            "ttl_ms": millis(config.ttl()),
            "node_timeout_ms": millis(config.node_timeout()),
            "drift_allowance_ms": config.drift_allowance().as_secs_f64() * 1_000.0,
            "fair": config.fair(),
            "contended": args.contended,
            "concurrency": args.concurrency,
            "duration_ms": args.ops.is_none().then(|| millis(args.duration)),
            "ops": args.ops,
            "rate": args.rate,
        },
        "probe_rounds": bench.probe_rounds,
        "nodes": nodes,
        "slowest_node": slowest(&bench.probes).map(|probe| probe.name.clone()),
        "levels": levels,
        "cleanup": {
            "deleted": cleanup.deleted,
            "clean": cleanup.remaining.is_empty() && cleanup.unchecked.is_empty(),
            "remaining": cleanup.remaining.iter().map(|(node, keys)| json!({"node": node, "keys": keys})).collect::<Vec<_>>(),
            "unchecked": cleanup.unchecked.iter().map(|(node, error)| json!({"node": node, "error": error})).collect::<Vec<_>>(),
        },
        "interrupted": bench.interrupted,
        "exit_code": exit_code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let text = table(
            &["node", "p50"],
            &[
                vec!["redis://a:1".into(), "0.1ms".into()],
                vec!["b".into(), "12.50ms".into()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let ends: Vec<usize> = lines.iter().map(|line| line.len()).collect();
        assert!(ends.iter().all(|&end| end == ends[0]), "{text}");
    }
}
