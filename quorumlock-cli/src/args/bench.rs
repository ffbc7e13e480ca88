//! The options of `quorumlock bench`, their limits and the help text that ends its
//! `--help`.

use std::time::Duration;

use clap::Args;

use crate::duration::parse_duration;

/// The most concurrent tasks one level may have: far above what one client process
/// should run against a lock, low enough that a typo (`--concurrency 100000`) is refused.
pub const MAX_CONCURRENCY: i64 = 10_000;

/// Text shown at the end of `quorumlock bench --help`.
pub const AFTER_HELP: &str = "\
Examples:
  quorumlock bench --nodes redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3
  quorumlock bench --concurrency 1,16,64 --duration 5s --plot latency.png
  quorumlock bench --contended --concurrency 8 --ops 2000 --rate 200 --json

Exit codes:
  0    the run completed (nodes that failed meanwhile are named in the report)
  64   usage error: malformed option, --concurrency 0, --rate 0
  69   a node did not answer at the start, or no acquisition succeeded at some level
  71   operating-system error (signal handler, writing the plot)
  78   configuration error: no nodes, malformed URL, keys of this run already exist
       (pass --force), --ttl and --node-timeout that do not fit, no font for --plot
  130  interrupted by Ctrl-C (143 for SIGTERM): the keys were removed, and the report
       covers what ran";

/// Parses `--rate`: a positive number of operations per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text.trim().parse().map_err(|_| {
        format!("invalid rate {text:?}: expected operations per second, such as 100 or 0.5")
    })?;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(format!(
            "invalid rate {text:?}: it must be above 0 (leave --rate out for no cap)"
        ))
    }
}

/// `quorumlock bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Concurrent tasks, or a comma-separated sweep (one row each): 1,16,64.
    #[arg(
        long,
        default_value = "1",
        value_delimiter = ',',
        value_name = "N,...",
        value_parser = clap::value_parser!(u32).range(1..=MAX_CONCURRENCY)
    )]
    pub concurrency: Vec<u32>,

    /// All tasks take one resource, so each waits for the others (reports wait time and
    /// how evenly the tasks were served); otherwise each task has its own.
    #[arg(long)]
    pub contended: bool,

    /// How long each concurrency level runs.
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        value_parser = parse_duration,
        conflicts_with = "ops"
    )]
    pub duration: Duration,

    /// Run this many acquire + release cycles per concurrency level instead of --duration.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: Option<u64>,

    /// At most this many cycles per second, all tasks together (decimals allowed).
    #[arg(long, value_name = "OPS", value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// The TTL of every lock taken.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Duration,

    /// Waiters of a contended lock queue on the nodes, first come first served (the
    /// library's default).
    #[arg(long, overrides_with = "no_fair")]
    pub fair: bool,

    /// Waiters race for each release instead of queueing.
    #[arg(long, overrides_with = "fair")]
    pub no_fair: bool,

    /// Draw the latency distribution of each level into this PNG file.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<std::path::PathBuf>,

    /// Names the run in the key prefix instead of a random id (letters, digits, - and _).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Run even when keys this run would use already exist; they are left alone.
    #[arg(long)]
    pub force: bool,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `quorumlock bench` alone, without the global options.
    #[derive(Debug, Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Bench::try_parse_from(["bench"].iter().chain(args)).map(|bench| bench.args)
    }

    #[test]
    fn the_command_line_takes_sweeps_and_the_last_fairness_flag() {
        let args = parse(&["--concurrency", "1,16,64", "--no-fair"]).unwrap();
        assert_eq!(args.concurrency, [1, 16, 64]);
        assert!(args.no_fair);
        assert_eq!(args.duration, Duration::from_secs(10));
        assert_eq!(args.ttl, Duration::from_secs(10));
        assert!(!parse(&["--no-fair", "--fair"]).unwrap().no_fair);
        assert!(parse(&["--fair", "--no-fair"]).unwrap().no_fair);
        assert_eq!(parse(&[]).unwrap().concurrency, [1]);
        let conflict = parse(&["--duration", "1s", "--ops", "5"]).unwrap_err();
        assert_eq!(conflict.kind(), clap::error::ErrorKind::ArgumentConflict);
        let zero = parse(&["--concurrency", "0"]).unwrap_err();
        assert_eq!(zero.kind(), clap::error::ErrorKind::ValueValidation);
    }

    #[test]
    fn rates_must_be_positive() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        for bad in ["0", "-1", "abc", "inf", "NaN", ""] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}
