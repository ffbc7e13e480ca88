//! The command line: subcommands, options and their help; the options of `run` and
//! `bench` in files of their own.

mod bench;
pub mod env;
mod run;

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::duration::parse_duration;
use crate::exit;
use crate::node_url::NodeParser;

pub use self::bench::BenchArgs;
pub use self::run::{Orphans, RunArgs};

/// Where the full manual is, for a binary installed without the repository.
pub const MANUAL: &str = "The full manual (docs/cli.md) is built in: `quorumlock manual`.";

/// Text shown at the end of `quorumlock --help`: environment, examples, exit codes.
fn after_help() -> String {
    format!(
        "Environment:
  QUORUMLOCK_NODES            default for --nodes (comma-separated redis:// or rediss:// URLs)
  QUORUMLOCK_KEY_PREFIX       default for --key-prefix
  QUORUMLOCK_CONNECT_TIMEOUT  default for --connect-timeout
  QUORUMLOCK_TLS_CA, QUORUMLOCK_TLS_CERT, QUORUMLOCK_TLS_KEY, QUORUMLOCK_TLS_INSECURE
                              defaults for --tls-ca, --tls-cert, --tls-key, --tls-insecure
  RUST_LOG                    log filter (tracing's env-filter syntax), e.g. quorumlock=debug

Examples:
  export QUORUMLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  quorumlock run -q -r nightly-report -- ./report.sh     # skip quietly if held
  quorumlock run -r deploy -w 10m --ttl 1m -- make deploy
  quorumlock status nightly-report --json
  quorumlock release nightly-report --token 3f9c0b...

{}

{MANUAL}",
        exit::TABLE
    )
}

/// A distributed `flock` on Redis: run a command while holding a lock that a quorum of
/// independent Redis nodes agrees on (the Redlock algorithm).
///
/// `run` does not wait by default: if the lock is held it exits 75 at once (-n); -w
/// DURATION waits for it.
///
/// A lock is a name shared by every machine that uses the same nodes. `run` takes it,
/// keeps it alive while the command runs, and releases it when the command ends; another
/// `run` of the same name meanwhile waits (--wait) or gives up at once with exit code 75.
/// With one node the lock lives on that server alone; with N nodes it needs N/2+1 of them.
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, after_help = after_help())]
pub struct Cli {
    /// Options shared by every subcommand.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every subcommand; they may appear before or after its name.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// The Redis nodes: comma-separated URLs, such as
    /// redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 [env:
    /// QUORUMLOCK_NODES]
    ///
    /// Use 3 or 5 independent masters (not replicas of each other) so the lock survives
    /// the loss of a minority of them; one URL makes a single-server lock. URLs take the
    /// form redis://[[user]:password@]host[:port][/db], rediss:// for TLS, or
    /// redis+unix:///path. Passwords are never printed.
    #[arg(
        long,
        global = true,
        value_name = "URL,...",
        value_delimiter = ',',
        value_parser = NodeParser
    )]
    pub nodes: Vec<String>,

    /// Prepended to the lock name to form the Redis key (none by default, so the key is
    /// the name itself) [env: QUORUMLOCK_KEY_PREFIX]
    #[arg(long, global = true, value_name = "PREFIX")]
    pub key_prefix: Option<String>,

    /// How long one node may take to answer one command [default: 50ms for run, 1s for
    /// status and release]
    ///
    /// A node slower than this counts as failed for that command. For run it may be at most
    /// a tenth of --ttl.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub node_timeout: Option<Duration>,

    /// How long one attempt to connect to a node may take, the check of the server
    /// included [default: 1s] [env: QUORUMLOCK_CONNECT_TIMEOUT]
    ///
    /// A connection is made once per run, so it may take far longer than one command: a TLS
    /// handshake across zones, or a start on a loaded host.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub connect_timeout: Option<Duration>,

    /// The longest lease any client of these nodes takes [default: --ttl plus --lock-delay
    /// for run, 30s for status]
    ///
    /// A node that started less than this (plus its drift allowance) ago abstains, unless
    /// it runs with `appendonly yes` and `appendfsync always`: it may have restarted without
    /// the locks it granted (docs/safety.md, "Restarts"). Set it to the longest --ttl (plus
    /// --lock-delay) of any client of the nodes.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub longest_lease: Option<Duration>,

    /// Let nodes that started recently without a durable append-only file vote at once
    ///
    /// Only where every restart is delayed past the longest lease by other means, or for
    /// nodes started just now for a test: a node that restarted empty can otherwise give a
    /// second client a lock that is still held (docs/safety.md, "Restarts").
    #[arg(long, global = true)]
    pub no_restart_abstention: bool,

    /// Machine-readable output: JSON on stdout for status and release, and JSON lines
    /// (events and errors) on stderr for every command.
    #[arg(long, global = true)]
    pub json: bool,

    /// Say what happens on stderr: the token taken, signals sent, the release; also show
    /// the library's warnings (-v) and debug logs (-vv). RUST_LOG, when set, chooses the
    /// logs instead.
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Nothing on stderr for an expected outcome: the lock held elsewhere, or still held
    /// when --wait ran out, and warnings about failing nodes. Real errors still print.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// TLS settings for rediss:// nodes.
    #[command(flatten)]
    pub tls: TlsArgs,

    /// Which of these the environment gave (see [`env`]), filled in after parsing.
    #[arg(skip)]
    pub from_env: env::FromEnv,
}

/// How rediss:// nodes are verified and how quorumlock authenticates to them
/// (docs/operations.md, "TLS").
#[derive(Debug, Default, Args)]
#[command(next_help_heading = "TLS (rediss:// nodes)")]
pub struct TlsArgs {
    /// Trust the CA certificates in FILE (PEM) instead of the public roots: for servers
    /// whose certificates come from a private CA [env: QUORUMLOCK_TLS_CA]
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Present the client certificate in FILE (PEM), for servers that require one
    /// (tls-auth-clients yes); needs --tls-key [env: QUORUMLOCK_TLS_CERT]
    // Whether it has its key is checked once the environment is read (see `env`): either
    // may come from there.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// The private key (PEM) of --tls-cert [env: QUORUMLOCK_TLS_KEY]
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Do not verify the servers' certificates or host names. For development only: anyone
    /// on the network path could impersonate the nodes. QUORUMLOCK_TLS_INSECURE takes
    /// 1/0, true/false, yes/no, on/off [env: QUORUMLOCK_TLS_INSECURE]
    #[arg(long, global = true)]
    pub tls_insecure: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lock; release it when the command ends. Does not
    /// wait by default: exits 75 at once if the lock is held (-w DURATION waits).
    ///
    /// The lock is extended in the background while the command runs (every third of
    /// --ttl), so the command may run far longer than the TTL; if the process running
    /// quorumlock dies, the lock expires after at most --ttl. If the lock is lost while
    /// the command runs (the nodes could not confirm an extension in time, or its key
    /// was deleted), the command's process group gets --on-lost, then SIGKILL after
    /// --kill-after, and quorumlock exits with code 70. SIGTERM, SIGINT, SIGHUP and SIGQUIT
    /// sent to quorumlock are passed on to the group (then SIGKILL after --kill-after), and
    /// the lock is released once the group is gone.
    /// Standard input, output and error are the command's: quorumlock itself writes only
    /// to stderr.
    #[command(after_help = run::AFTER_HELP)]
    Run(RunArgs),

    /// Show the lock on each node: the token stored, the time left, and whether a quorum
    /// of nodes agrees on a holder.
    ///
    /// The verdict is "held" (one token on a quorum of nodes), "free" (no node that
    /// answered has the key, and too few failed for a holder to hide among them), "split"
    /// (keys on some nodes but no token on a quorum: an acquisition, release or expiry in
    /// progress, or a node that lost its keys), or "unknown" (too many nodes failed to
    /// tell; exit code 69).
    Status(StatusArgs),

    /// Release a lock by its token, on every node (for operators).
    ///
    /// Deletes the key on each node only where it still holds this token
    /// (compare-and-delete), so another owner's lock is never touched. Use it when the
    /// holder died and the lock should not wait for its TTL. The token is in the holder's
    /// QUORUMLOCK_TOKEN, its --verbose or --json output, or `quorumlock status`. Exit
    /// code 0 when it was deleted on a quorum, 1 when the token does not hold the lock on
    /// a quorum (expired, released, or another owner's), 69 when too many nodes failed to
    /// tell.
    Release(ReleaseArgs),

    /// Measure what a lock costs on these nodes: per-node round trips, acquire + release
    /// latency, throughput, attempts and validity lost per acquisition.
    ///
    /// Every key it creates is under a prefix unique to the run (printed at the start),
    /// and is removed when it ends or is interrupted; no other key is read or written. It
    /// refuses to start when a key it would use already exists (unless --force), and when a
    /// node does not answer at the start. Use --rate to cap the load on a production
    /// deployment. See docs/cli.md, "quorumlock bench".
    #[command(after_help = bench::AFTER_HELP)]
    Bench(BenchArgs),
    /// Print the full manual (docs/cli.md, built into the binary) on stdout.
    Manual,
}

/// `quorumlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock's name.
    #[arg(value_name = "NAME")]
    pub resource: String,

    /// Also show who holds each of the K permits of the name (as taken by
    /// `run --permits K`).
    #[arg(long, value_name = "K", value_parser = parse_permits)]
    pub permits: Option<u32>,
}

/// The permits a `--permits` value may ask for (of `run` and `status`), checked when the
/// command line is read.
pub fn parse_permits(text: &str) -> Result<u32, String> {
    let max = quorumlock::Semaphore::MAX_PERMITS;
    match text.parse::<u32>() {
        Ok(permits) if (1..=max).contains(&permits) => Ok(permits),
        _ => Err(format!("expected a number of permits from 1 to {max}")),
    }
}

/// `quorumlock release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock's name.
    #[arg(value_name = "NAME")]
    pub resource: String,

    /// The holder's token: only a key holding exactly this token is deleted.
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    pub token: String,
}

/// A `--token` value: the 32 hex digits of a token the library generated, which is every
/// lock's, checked when the command line is read. Anything else could hold no lock, and a
/// release that only says "not held" would hide the typo.
pub fn parse_token(text: &str) -> Result<String, String> {
    let digits = quorumlock::LockToken::RANDOM_BYTES * 2;
    let token = text.trim();
    if token.len() == digits && token.bytes().all(|b| b.is_ascii_hexdigit()) {
        // Tokens are stored in lowercase: one copied in capitals still names its lock.
        return Ok(token.to_ascii_lowercase());
    }
    Err(format!(
        "expected a lock token, {digits} hex digits (as `quorumlock status NAME` shows it, or \
         the holder's QUORUMLOCK_TOKEN)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_double_dash() {
        let cli = Cli::try_parse_from([
            "quorumlock",
            "--nodes",
            "redis://a:1",
            "run",
            "-r",
            "job",
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.resource, "job");
        assert_eq!(run.wait, Some(Duration::from_secs(10)));
        assert_eq!(run.ttl, Duration::from_secs(30));
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
        assert_eq!(cli.global.nodes, ["redis://a:1"]);
    }

    #[test]
    fn global_options_may_follow_the_subcommand() {
        let cli = Cli::try_parse_from(["quorumlock", "status", "job", "--json", "-v"]).unwrap();
        assert!(cli.global.json && cli.global.verbose == 1);
    }

    #[test]
    fn wait_and_no_wait_conflict() {
        let err = Cli::try_parse_from([
            "quorumlock",
            "run",
            "-r",
            "job",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "true",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn malformed_durations_are_usage_errors_that_explain() {
        let err =
            Cli::try_parse_from(["quorumlock", "run", "-r", "j", "--ttl", "30", "--", "true"])
                .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("30s"), "{err}");
    }

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["quorumlock", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(run) => Ok(run),
            _ => panic!("not run"),
        }
    }

    #[test]
    fn flocks_short_flags_are_taken() {
        let run = run_args(&["-r", "j", "-w", "5", "-E", "3", "--", "true"]).unwrap();
        assert_eq!(run.wait, Some(Duration::from_secs(5)));
        assert_eq!(run.conflict_exit_code, 3);
        let run = run_args(&["-r", "j", "-n", "true"]).unwrap();
        assert!(run.no_wait);
        assert_eq!(run.conflict_exit_code, exit::HELD);
        assert_eq!(run.orphans, Orphans::Wait);
        assert!(run_args(&["-r", "j", "-E", "256", "true"]).is_err());
    }

    #[test]
    fn unknown_options_before_the_command_are_errors_not_commands() {
        for typo in ["-x", "--no-wiat", "--wiat=5s"] {
            let err = run_args(&[typo, "-r", "j", "--", "true"]).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{typo}"
            );
        }
        // From the command's first word on, everything is the command's.
        let run = run_args(&["-r", "j", "sh", "-c", "exit 3", "-x"]).unwrap();
        assert_eq!(run.command, ["sh", "-c", "exit 3", "-x"]);
    }

    #[test]
    fn quiet_and_verbose_conflict() {
        let err = Cli::try_parse_from(["quorumlock", "-q", "-v", "status", "j"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let cli = Cli::try_parse_from(["quorumlock", "-vv", "status", "j"]).unwrap();
        assert_eq!(cli.global.verbose, 2);
    }

    #[test]
    fn release_takes_only_a_token_that_could_hold_a_lock() {
        let release = |token: &str| {
            Cli::try_parse_from(["quorumlock", "release", "job", "--token", token]).map(|cli| {
                match cli.command {
                    Command::Release(release) => release.token,
                    _ => panic!("not release"),
                }
            })
        };
        let token = "3f9c0b1e4b5016909bb192b818924c84";
        assert_eq!(release(token).unwrap(), token);
        assert_eq!(release(&token.to_uppercase()).unwrap(), token);
        for bad in [
            "nothex",
            "",
            &token[1..],
            &format!("{token}0"),
            "3f9c0b1e4b5016909bb192b818924czz",
        ] {
            let err = release(bad).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
            assert!(err.to_string().contains("32 hex digits"), "{err}");
        }
    }

    #[test]
    fn help_lists_the_exit_codes() {
        let help = Cli::command().render_help().to_string();
        for code in ["64", "69", "70", "75", "78"] {
            assert!(help.contains(code), "{code} missing from --help");
        }
    }
}
