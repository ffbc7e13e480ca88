//! Exit codes, and the error type that carries one: what went wrong, and how to fix it.

use std::fmt;

use quorumlock::{LockError, Tally};

/// `release`: the token does not hold the lock on a quorum (nothing of another owner's was
/// touched).
pub const NOT_HELD: u8 = 1;
/// The command line is wrong: an unknown option, a malformed duration or node URL, a
/// missing argument (sysexits `EX_USAGE`).
pub const USAGE: u8 = 64;
/// Too few nodes answered: they are down, unreachable or too slow (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// `run`: the lock was lost while the command ran; the command was signalled
/// (`EX_SOFTWARE`, reused for this one case).
pub const LOST: u8 = 70;
/// The operating system refused something: a signal handler, a thread (`EX_OSERR`).
pub const OS_ERROR: u8 = 71;
/// The lock is held elsewhere (after waiting, with `--wait`) (`EX_TEMPFAIL`).
pub const HELD: u8 = 75;
/// The configuration is wrong: no nodes, a malformed node URL, settings that do not fit
/// together (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// `run`: the command was found but could not be executed (as in a shell).
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found (as in a shell).
pub const NOT_FOUND: u8 = 127;

/// The exit-code table printed by `--help` and kept in docs/cli.md.
pub const TABLE: &str = "\
Exit codes:
  0        success; for run: the command succeeded
  1..=125  run: the command's own exit status
  128+N    run: the command was killed by signal N (as in a shell), or quorumlock
           got signal N while waiting for the lock
  1        release: the token does not hold the lock on a quorum of nodes
  64       usage error: unknown option, malformed duration, node URL or token,
           missing argument, a QUORUMLOCK_* value that does not parse (the lock is
           not taken)
  69       no quorum: too few nodes answered (down, unreachable or too slow, or
           abstaining after a restart or a clock fault)
  70       run: the lock was lost while the command ran; the command was signalled
  71       operating-system error (signal handler or thread could not be set up)
  75       the lock is held elsewhere (after waiting, with --wait); -E CODE changes it
  78       configuration error: no nodes, a node that is not a usable master,
           settings that do not fit, a name held in another mode (--shared or
           --permits with another K)
  126      run: the command was found but could not be executed
  127      run: the command was not found";

/// What kind of failure ended the program; each maps to one exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// See [`USAGE`].
    Usage,
    /// See [`CONFIG`].
    Config,
    /// See [`HELD`].
    Held,
    /// See [`UNAVAILABLE`].
    Unavailable,
    /// See [`LOST`].
    Lost,
    /// See [`NOT_HELD`].
    NotHeld,
    /// See [`OS_ERROR`].
    Os,
    /// See [`NOT_FOUND`].
    NotFound,
    /// See [`CANNOT_EXECUTE`].
    CannotExecute,
    /// `run` got this signal while waiting for the lock, and gave up: 128 + the signal,
    /// as a shell reports a process killed by it.
    Interrupted(u8),
}

impl Kind {
    /// The process exit code for this kind of failure.
    pub fn code(self) -> u8 {
        match self {
            Kind::Usage => USAGE,
            Kind::Config => CONFIG,
            Kind::Held => HELD,
            Kind::Unavailable => UNAVAILABLE,
            Kind::Lost => LOST,
            Kind::NotHeld => NOT_HELD,
            Kind::Os => OS_ERROR,
            Kind::NotFound => NOT_FOUND,
            Kind::CannotExecute => CANNOT_EXECUTE,
            Kind::Interrupted(signal) => 128u8.saturating_add(signal),
        }
    }

    /// A stable name for JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::Config => "config",
            Kind::Held => "held",
            Kind::Unavailable => "unavailable",
            Kind::Lost => "lost",
            Kind::NotHeld => "not_held",
            Kind::Os => "os",
            Kind::NotFound => "not_found",
            Kind::CannotExecute => "cannot_execute",
            Kind::Interrupted(_) => "interrupted",
        }
    }
}

/// A failure of the program: its kind (hence its exit code), what went wrong, and how to
/// fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The kind of failure.
    pub kind: Kind,
    /// What went wrong, in one sentence.
    pub message: String,
    /// What to do about it, when there is something to say.
    pub hint: Option<String>,
    /// The count of nodes behind a lock error, for `--json`.
    pub tally: Option<Box<Tally>>,
    /// An exit code chosen on the command line (`-E` for a lock held elsewhere).
    pub code: Option<u8>,
}

impl CliError {
    /// A failure without a hint.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
            hint: None,
            tally: None,
            code: None,
        }
    }

    /// Adds how to fix it.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Exits with `code` instead of the kind's.
    pub fn with_code(mut self, code: u8) -> Self {
        self.code = Some(code);
        self
    }

    /// The process exit code.
    pub fn code(&self) -> u8 {
        self.code.unwrap_or_else(|| self.kind.code())
    }

    /// Explains a lock error: its exit code, its message, and the hints that do not depend
    /// on how the command line gave its settings (`explain::lock_error` adds those).
    pub fn from_lock(error: &LockError) -> Self {
        let kind = classify(error);
        let hint = match error {
            LockError::Held { .. } => Some(
                "another process holds it: pass --wait DURATION to wait for it, \
                 or see who holds it with `quorumlock status NAME`",
            ),
            LockError::TimedOut { last: None, .. } => Some(
                "no attempt finished within --wait: check that the nodes are reachable, \
                 or raise --wait",
            ),
            LockError::TimedOut { .. } => {
                Some("another process held it the whole time: raise --wait to wait longer")
            }
            LockError::NoQuorum { .. } => Some(
                "check that the nodes named above are running and reachable from here, \
                 or raise --node-timeout if they are slow to answer",
            ),
            LockError::ValidityExhausted { .. } => {
                Some("the nodes answer slowly: raise --ttl, or check the network to them")
            }
            // Which option to change depends on the command line: see `explain`.
            LockError::Config(_) | LockError::InvalidNode { .. } => None,
            LockError::InvalidResource { .. } => Some("give a lock name of 1 to 1024 bytes"),
            LockError::FencingExhausted { .. } => {
                Some("the fencing counter is exhausted: lock another name")
            }
            LockError::ModeMismatch { .. } => Some(
                "every run of one name must take it the same way: all with the same \
                 --permits K, or without --permits; use another name for another lock",
            ),
            _ => None,
        };
        let mut cli = CliError::new(kind, error.to_string());
        cli.tally = tally_of(error).cloned().map(Box::new);
        match hint {
            Some(hint) => cli.hint(hint),
            None => cli,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// The count of nodes a lock error carries, directly or through the last attempt of a
/// wait.
fn tally_of(error: &LockError) -> Option<&Tally> {
    match error {
        LockError::Held { tally, .. }
        | LockError::NoQuorum { tally, .. }
        | LockError::NotHeld { tally, .. }
        | LockError::ModeMismatch { tally, .. } => Some(tally),
        LockError::TimedOut { last, .. } => last.as_deref().and_then(tally_of),
        _ => None,
    }
}

/// Which exit code a lock error leads to.
pub fn classify(error: &LockError) -> Kind {
    match error {
        LockError::Held { .. } => Kind::Held,
        // The wait ended mid-attempt: the attempt before says whether the lock was held or
        // the nodes unreachable; with none, not even one attempt finished in time.
        LockError::TimedOut { last, .. } => last.as_deref().map_or(Kind::Unavailable, classify),
        LockError::NoQuorum { .. }
        | LockError::ValidityExhausted { .. }
        | LockError::FencingExhausted { .. } => Kind::Unavailable,
        LockError::NotHeld { .. } | LockError::Expired { .. } | LockError::Lost { .. } => {
            Kind::Lost
        }
        // Two users of one name disagree on what lock it is: no wait can fix that.
        LockError::Config(_) | LockError::InvalidNode { .. } | LockError::ModeMismatch { .. } => {
            Kind::Config
        }
        LockError::InvalidResource { .. } => Kind::Usage,
        // A guard of another lock instance cannot happen here (one lock per process), and
        // the enum is non-exhaustive: treat anything else as a failure of the nodes.
        _ => Kind::Unavailable,
    }
}

/// The exit code of a command that ended with `status`: its own code, or 128 plus the
/// signal that killed it, as a shell reports it.
pub fn command_status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        // Unix exit statuses are 0..=255; the cast keeps the low byte as the shell does.
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    match status.signal() {
        Some(signal) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(u8::MAX),
        None => u8::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::Duration;

    use quorumlock::{ConfigError, LeaseEnd, NodeError, NodeFailure, Tally};

    fn tally() -> Tally {
        Tally {
            nodes: 3,
            quorum: 2,
            granted: 0,
            refused: vec![],
            failures: vec![NodeFailure {
                node: "redis://127.0.0.1:7001".into(),
                error: NodeError::Connection("refused".into()),
            }],
            held_as: None,
        }
    }

    #[test]
    fn lock_errors_map_to_documented_codes() {
        let resource = || "job".to_owned();
        for (error, code) in [
            (
                LockError::Held {
                    resource: resource(),
                    tally: tally(),
                },
                75,
            ),
            (
                LockError::TimedOut {
                    resource: resource(),
                    waited: Duration::from_secs(1),
                    last: Some(Box::new(LockError::Held {
                        resource: resource(),
                        tally: tally(),
                    })),
                },
                75,
            ),
            (
                LockError::TimedOut {
                    resource: resource(),
                    waited: Duration::from_secs(1),
                    last: None,
                },
                69,
            ),
            (
                LockError::NoQuorum {
                    resource: resource(),
                    tally: tally(),
                },
                69,
            ),
            (
                LockError::ValidityExhausted {
                    resource: resource(),
                    elapsed: Duration::from_secs(1),
                    ttl: Duration::from_secs(1),
                },
                69,
            ),
            (
                LockError::Lost {
                    resource: resource(),
                    end: LeaseEnd::Expired,
                },
                70,
            ),
            (
                LockError::NotHeld {
                    resource: resource(),
                    tally: tally(),
                },
                70,
            ),
            (LockError::Config(ConfigError::ZeroTtl), 78),
            (
                LockError::InvalidNode {
                    node: "x".into(),
                    reason: "bad".into(),
                },
                78,
            ),
            (
                LockError::InvalidResource {
                    resource: String::new(),
                    reason: "the name is empty",
                },
                64,
            ),
        ] {
            let cli = CliError::from_lock(&error);
            assert_eq!(cli.code(), code, "{error}");
            assert_eq!(cli.message, error.to_string());
        }
    }

    #[test]
    fn errors_say_how_to_fix_them() {
        let held = CliError::from_lock(&LockError::Held {
            resource: "job".into(),
            tally: tally(),
        });
        assert!(held.to_string().contains("--wait"), "{held}");
        let no_quorum = CliError::from_lock(&LockError::NoQuorum {
            resource: "job".into(),
            tally: tally(),
        });
        let text = no_quorum.to_string();
        assert!(text.contains("redis://127.0.0.1:7001"), "{text}");
        assert!(text.contains("hint:"), "{text}");
    }

    #[test]
    fn kinds_have_distinct_codes_and_names() {
        let kinds = [
            Kind::Usage,
            Kind::Config,
            Kind::Held,
            Kind::Unavailable,
            Kind::Lost,
            Kind::NotHeld,
            Kind::Os,
            Kind::NotFound,
            Kind::CannotExecute,
            Kind::Interrupted(15),
        ];
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[..i] {
                assert_ne!(a.code(), b.code(), "{a:?} {b:?}");
                assert_ne!(a.name(), b.name(), "{a:?} {b:?}");
            }
            if !matches!(a, Kind::Interrupted(_)) {
                assert!(
                    TABLE.contains(&format!("  {}", a.code())),
                    "{a:?} missing from the table"
                );
            }
        }
    }

    #[test]
    fn command_statuses_follow_the_shell() {
        // Raw wait statuses: exit code in the second byte, signal in the low bits.
        assert_eq!(command_status_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(command_status_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(command_status_code(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(command_status_code(ExitStatus::from_raw(15)), 128 + 15);
        assert_eq!(command_status_code(ExitStatus::from_raw(9)), 128 + 9);
    }
}
