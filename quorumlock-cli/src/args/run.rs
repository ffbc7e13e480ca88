//! The options of `quorumlock run`, and the help text that ends its `--help`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::duration::{parse_duration, parse_wait};
use crate::exit;
use crate::signal::{parse_on_lost, OnLost};

use super::parse_permits;

/// Text shown at the end of `quorumlock run --help`.
pub const AFTER_HELP: &str = "\
The command sees these environment variables:
  QUORUMLOCK_RESOURCE       the lock name
  QUORUMLOCK_TOKEN          the lock's token (what `quorumlock release --token` takes)
  QUORUMLOCK_FENCING_TOKEN  the fencing token, with --fencing: pass it with every write
                            to the protected resource so it can refuse stale holders

The command runs in a process group of its own (unless --foreground): lost-lock
signals, signals passed on and SIGKILL go to the whole group, its background
processes included, and the lock is released only once the group is gone (--orphans).

Exit codes:
  the command's own status when it ran (128+N when killed by signal N)
  64   usage error           69   no quorum of nodes reachable
  70   lock lost while the command ran (the command was signalled)
  75   lock held elsewhere (after --wait), or the code given with -E
  78   configuration error   126/127  command not executable / not found

The full manual (docs/cli.md) is built in: `quorumlock manual`.";

/// What `run` does when the command exits while processes it started in the background
/// are still running in its process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Orphans {
    /// Keep the lock (extending it) until every process of the group has exited.
    Wait,
    /// Send them SIGTERM, then SIGKILL after --kill-after, and release once they are gone.
    Kill,
    /// Release at once and leave them running, outside the lock (with a warning).
    Leave,
}

/// `quorumlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name: every `run` with the same name and nodes excludes the others.
    #[arg(short, long, value_name = "NAME")]
    pub resource: String,

    /// How long the lock outlives this process if it dies without releasing it. The lock
    /// is extended every third of it while the command runs.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Duration,

    /// If this process dies (or pauses) without releasing the lock, keep the lock closed
    /// to everybody for this long past --ttl, so that a paused holder waking just after
    /// its lease finds nobody else inside. A release (the command ended) frees it at once.
    /// Off by default (docs/safety.md, "Lock-delay").
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lock_delay: Option<Duration>,

    /// Wait up to this long for the lock when it is held elsewhere (or the nodes are
    /// unreachable), retrying as soon as it is released; then exit 75 (69 if no quorum).
    /// A bare number is seconds, as with flock -w. Without it, one attempt is made.
    #[arg(
        short,
        long,
        value_name = "DURATION",
        value_parser = parse_wait,
        conflicts_with = "no_wait"
    )]
    pub wait: Option<Duration>,

    /// Make one attempt, and exit 75 at once if the lock is held elsewhere (the default).
    #[arg(short, long)]
    pub no_wait: bool,

    /// The exit code when the lock is held elsewhere (at once, or when --wait ran out),
    /// instead of 75, so that it cannot be mistaken for a command's own status.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = exit::HELD)]
    pub conflict_exit_code: u8,

    /// Take the lock shared, as flock -s: shared runs of one name run together, and
    /// exclude the runs without it (which take the lock alone, and wait for the shared
    /// runs to end; a waiting one keeps new shared runs out).
    #[arg(short, long, conflicts_with = "permits")]
    pub shared: bool,

    /// Take one of K permits of the name, so that at most K runs of it run at once (a
    /// semaphore: K slots, each a lock of its own, NAME:permit:0 to NAME:permit:K-1).
    /// Every run of the name must give the same K.
    #[arg(long, value_name = "K", value_parser = parse_permits)]
    pub permits: Option<u32>,

    /// Mint a fencing token (a number larger than that of every earlier holder of this
    /// lock) and pass it to the command as QUORUMLOCK_FENCING_TOKEN.
    #[arg(long)]
    pub fencing: bool,

    /// With --fencing, use nodes that keep no append-only file anyway (refused by
    /// default: a node restarted empty forgets its counters, and a later holder could get
    /// an old token).
    #[arg(long, requires = "fencing")]
    pub fencing_on_volatile_nodes: bool,

    /// The signal sent to the command's process group when the lock is lost: a name (TERM,
    /// INT, HUP, KILL, USR1, ...), a number, or "none" to let it finish (quorumlock still
    /// exits 70).
    #[arg(long, default_value = "TERM", value_name = "SIGNAL", value_parser = parse_on_lost)]
    pub on_lost: OnLost,

    /// After --on-lost, a signal passed on or --orphans kill, how long the command's process
    /// group has to exit before it gets SIGKILL.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub kill_after: Duration,

    /// Stop extending the lock after this long in total; the lock then expires, and the
    /// command is treated as having lost it. Guards against a hung command holding the lock
    /// forever.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_hold: Option<Duration>,

    /// When the command exits while processes it started are still running in its
    /// process group: keep the lock until they are gone (wait), stop them (kill), or
    /// release and leave them running (leave).
    #[arg(long, value_enum, default_value_t = Orphans::Wait, value_name = "WHAT")]
    pub orphans: Orphans,

    /// Run the command in quorumlock's own process group rather than one of its own, so
    /// that it can read from the terminal and gets Ctrl-C from it directly; only the
    /// command's own process is then signalled, not its children.
    #[arg(long)]
    pub foreground: bool,

    /// The command to run and its arguments (after --, so its options are not read as
    /// quorumlock's). Everything from the command's first word on is the command's; an
    /// unknown option before it is a usage error, so a mistyped option is never run.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}
