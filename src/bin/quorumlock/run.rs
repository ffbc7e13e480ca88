//! `quorumlock run`: a command under the lock.

use std::ffi::{OsStr, OsString};
use std::process::ExitStatus;

use quorumlock::{AutoExtend, LeaseEnd, LockConfig, LockError, LockGuard};
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::args::{GlobalArgs, RunArgs};
use crate::duration::{format_duration, millis};
use crate::exit::{command_status_code, CliError, Kind};
use crate::nodes::{node_urls, AnyLock};
use crate::output::Output;
use crate::signal::{in_terminal_foreground, terminal_generated, OnLost, Signal};

/// Takes the lock, runs the command under it, releases it; returns the exit code.
pub async fn run(global: &GlobalArgs, args: &RunArgs, out: Output) -> Result<u8, CliError> {
    // clap requires at least one word of command; checked again rather than indexed.
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(CliError::new(Kind::Usage, "no command given")
            .hint("put the command after --: quorumlock run -r NAME -- COMMAND [ARGS...]"));
    };
    let urls = node_urls(global)?;
    let config = lock_config(global, args)?;
    let node_timeout = config.node_timeout();
    let lock = AnyLock::connect(global, &urls, config).await?;
    // Installed before the wait, so that a signal while waiting ends it cleanly; from then
    // on these signals no longer kill quorumlock, and are passed on to the command.
    let mut signals = Forwarded::install()?;

    let resource = args.resource.as_str();
    match args.wait {
        Some(wait) => out.note(|| {
            format!(
                "waiting up to {} for {resource:?} on {} node(s), quorum {}",
                format_duration(wait),
                urls.len(),
                lock.quorum()
            )
        }),
        None => out.note(|| format!("taking {resource:?} on {} node(s)", urls.len())),
    }
    let acquisition = async {
        match args.wait {
            Some(wait) => lock.acquire_timeout(resource, wait).await,
            None => lock.try_acquire(resource).await,
        }
    };
    let mut guard = tokio::select! {
        acquired = acquisition => acquired.map_err(|error| CliError::from_lock(&error))?,
        signal = signals.recv() => {
            // The dropped attempt unlocks its nodes in the background: give it the time.
            tokio::time::sleep(node_timeout.saturating_mul(2)).await;
            return Err(interrupted(signal));
        }
    };

    let mut extend = AutoExtend::default();
    if let Some(max_hold) = args.max_hold {
        extend = extend.max_hold(max_hold);
    }
    guard
        .auto_extend(extend)
        .map_err(|error| CliError::from_lock(&LockError::Config(error)))?;
    report_acquired(&guard, &lock, out);

    let mut command = command(program, program_args, &guard);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let _ = guard.release().await;
            tokio::time::sleep(node_timeout).await; // as below
            return Err(spawn_error(program, &error));
        }
    };
    let status = supervise(&mut child, &guard, args, &mut signals, out).await;

    // The lease may have ended between the last look and the command's exit.
    let lost = status.lost.or_else(|| guard.lost().ended());
    let released = guard.release().await;
    // The release returns once a quorum deleted the key; the deletes still in flight
    // finish in the background, within one node timeout. Let them, so that no node keeps
    // the key until its TTL after this process exits.
    tokio::time::sleep(node_timeout).await;
    let status = status.exit.map_err(|error| {
        CliError::new(
            Kind::Os,
            format!("could not wait for the command to end: {error}"),
        )
    })?;
    let code = command_status_code(status);
    let outcome = Outcome {
        status,
        code,
        lost,
        released,
        signalled: status_signalled(&status),
        max_hold: args.max_hold,
    };
    outcome.finish(resource, out)
}

/// The lock settings of this run.
fn lock_config(global: &GlobalArgs, args: &RunArgs) -> Result<LockConfig, CliError> {
    let mut builder = LockConfig::builder()
        .ttl(args.ttl)
        .fencing(args.fencing)
        .fencing_on_volatile_nodes(args.fencing_on_volatile_nodes);
    if let Some(node_timeout) = global.node_timeout {
        builder = builder.node_timeout(node_timeout);
    }
    if let Some(connect_timeout) = global.connect_timeout {
        builder = builder.connect_timeout(connect_timeout);
    }
    if let Some(prefix) = &global.key_prefix {
        builder = builder.key_prefix(prefix.clone());
    }
    // --wait bounds the attempts by time, not by count: the deadline is what lets the
    // configuration retry without a count. `--wait 0s` keeps the default retries; its
    // deadline, already past, ends the first attempt.
    if let Some(wait) = args.wait.filter(|wait| !wait.is_zero()) {
        builder = builder.retry_count(u32::MAX).acquire_timeout(wait);
    }
    builder
        .build()
        .map_err(|error| CliError::from_lock(&LockError::Config(error)))
}

/// Says that the lock was taken, with its token.
fn report_acquired(guard: &LockGuard, lock: &AnyLock, out: Output) {
    let event = json!({
        "event": "acquired",
        "resource": guard.resource(),
        "key": guard.key(),
        "token": guard.token().as_str(),
        "fencing_token": guard.fencing_token(),
        "validity_ms": millis(guard.validity()),
        "quorum": lock.quorum(),
    });
    out.event(false, &event, || {
        let fencing = guard
            .fencing_token()
            .map(|token| format!(", fencing token {token}"))
            .unwrap_or_default();
        format!(
            "acquired {:?} (token {}{fencing}), valid for {}; extending it while the command runs",
            guard.resource(),
            guard.token(),
            format_duration(guard.validity())
        )
    });
}

/// The command, with the lock's details in its environment and quorumlock's stdio.
fn command(program: &OsStr, args: &[OsString], guard: &LockGuard) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("QUORUMLOCK_RESOURCE", guard.resource())
        .env("QUORUMLOCK_TOKEN", guard.token().as_str());
    match guard.fencing_token() {
        Some(token) => command.env("QUORUMLOCK_FENCING_TOKEN", token.to_string()),
        None => command.env_remove("QUORUMLOCK_FENCING_TOKEN"),
    };
    command
}

/// Why the command could not be started, as a shell would say it.
fn spawn_error(program: &OsStr, error: &std::io::Error) -> CliError {
    let program = program.to_string_lossy();
    match error.kind() {
        std::io::ErrorKind::NotFound => {
            CliError::new(Kind::NotFound, format!("command not found: {program}"))
                .hint("check its spelling and PATH, or give its full path")
        }
        std::io::ErrorKind::PermissionDenied => CliError::new(
            Kind::CannotExecute,
            format!("cannot execute {program}: permission denied"),
        )
        .hint("make it executable (chmod +x), or run it through its interpreter"),
        _ => CliError::new(
            Kind::CannotExecute,
            format!("cannot execute {program}: {error}"),
        ),
    }
}

/// The error for a signal that ended the wait for the lock.
fn interrupted(signal: Signal) -> CliError {
    CliError::new(
        Kind::Interrupted(u8::try_from(signal.0).unwrap_or(0)),
        format!("interrupted by {signal} while waiting for the lock; the command was not run"),
    )
}

/// How the command's run went.
struct Supervised {
    /// Its exit status, or why it could not be waited for.
    exit: std::io::Result<ExitStatus>,
    /// How the lease ended while it ran, if it did.
    lost: Option<LeaseEnd>,
}

/// Waits for the command to end; meanwhile signals it when the lock is lost (then kills it
/// after the grace period), and passes on the signals quorumlock gets.
async fn supervise(
    child: &mut tokio::process::Child,
    guard: &LockGuard,
    args: &RunArgs,
    signals: &mut Forwarded,
    out: Output,
) -> Supervised {
    // The pid stays valid until `wait` reaps the child, and the loop ends right then.
    let pid = child.id();
    let lost = guard.lost();
    let mut lost_end = None;
    let mut kill_at: Option<Instant> = None;
    let send = |signal: Signal, why: &str| {
        let Some(pid) = pid else { return };
        match signal.send(pid) {
            Ok(()) => {
                let event = json!({"event": "signal", "signal": signal.to_string(), "pid": pid, "why": why});
                out.event(false, &event, || {
                    format!("sent {signal} to the command (pid {pid}): {why}")
                });
            }
            Err(error) => {
                let event = json!({"event": "warning", "message": format!("could not send {signal} to pid {pid}: {error}")});
                out.event(true, &event, || {
                    format!("warning: could not send {signal} to the command (pid {pid}): {error}")
                });
            }
        }
    };
    loop {
        tokio::select! {
            exit = child.wait() => return Supervised { exit, lost: lost_end },
            end = lost.wait(), if lost_end.is_none() => {
                let action = match args.on_lost {
                    OnLost::Signal(signal) => format!("sending {signal} to the command"),
                    OnLost::Nothing => "letting the command finish (--on-lost none)".to_owned(),
                };
                let event = json!({
                    "event": "lost",
                    "resource": args.resource,
                    "reason": end.to_string(),
                    "on_lost": match args.on_lost {
                        OnLost::Signal(signal) => Some(signal.to_string()),
                        OnLost::Nothing => None,
                    },
                });
                out.event(true, &event, || {
                    format!("lock {:?} lost while the command ran ({end}); {action}", args.resource)
                });
                if let OnLost::Signal(signal) = args.on_lost {
                    send(signal, "the lock was lost");
                    if signal != Signal::KILL {
                        // Checked like every deadline: a --kill-after too large to
                        // represent means never escalating to KILL, not a panic.
                        kill_at = Instant::now().checked_add(args.kill_after);
                    }
                }
                lost_end = Some(end);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                kill_at = None;
                send(Signal::KILL, "still running after --kill-after");
            }
            signal = signals.recv() => {
                if terminal_generated(signal) && in_terminal_foreground() {
                    out.note(|| format!("got {signal}; the terminal sent it to the command too"));
                } else {
                    send(signal, "passed on from quorumlock");
                }
            }
        }
    }
}

/// Sleeps until `at`, or forever when there is no such instant.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The signal that killed the command, if one did.
fn status_signalled(status: &ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(status)
}

/// Everything known once the command ended and the lock was released.
struct Outcome {
    /// How the command ended.
    status: ExitStatus,
    /// Its exit code, as a shell reports it.
    code: u8,
    /// How the lease ended while the command ran, if it did.
    lost: Option<LeaseEnd>,
    /// What the final release said.
    released: Result<(), LockError>,
    /// The signal that killed the command, if one did.
    signalled: Option<i32>,
    /// `--max-hold`, which lets the lease expire on purpose.
    max_hold: Option<std::time::Duration>,
}

impl Outcome {
    /// Reports the end of the run and picks the exit code: the command's, unless the lock
    /// was lost while it ran.
    fn finish(self, resource: &str, out: Output) -> Result<u8, CliError> {
        let command = describe(&self.status);
        let lost_reason = match (&self.lost, &self.released) {
            (Some(end), _) => Some(format!(
                "lock {resource:?} was lost while the command ran ({end})"
            )),
            // A quorum answered, and the token was no longer there: it expired or was
            // taken over before the command ended, unnoticed in between.
            (None, Err(error @ LockError::NotHeld { .. })) => Some(format!(
                "the lock was no longer held when the command ended: {error}"
            )),
            _ => None,
        };
        let release_error = match &self.released {
            Err(error) if lost_reason.is_none() => Some(error.to_string()),
            _ => None,
        };
        let exit_code = if lost_reason.is_some() {
            Kind::Lost.code()
        } else {
            self.code
        };
        let event = json!({
            "event": "exit",
            "resource": resource,
            "exit_code": exit_code,
            "command_status": self.status.code(),
            "command_signal": self.signalled,
            "lost": lost_reason.is_some(),
            "released": self.released.is_ok(),
            "release_error": release_error,
        });
        if let Some(error) = &release_error {
            let warning =
                json!({"event": "warning", "message": format!("release not confirmed: {error}")});
            out.event(true, &warning, || {
                format!(
                    "warning: the release was not confirmed ({error}); \
                     the lock expires by itself within --ttl"
                )
            });
        }
        out.event(false, &event, || match (&lost_reason, &self.released) {
            (Some(_), _) => format!("the command {command}; exiting with {exit_code} (lock lost)"),
            (None, Ok(())) => format!("the command {command}; released {resource:?}"),
            (None, Err(_)) => format!("the command {command}"),
        });
        match lost_reason {
            Some(reason) => Err(CliError::new(
                Kind::Lost,
                format!("{reason}; the command {command}"),
            )
            .hint(match (self.max_hold, &self.lost) {
                (Some(max_hold), Some(LeaseEnd::Expired)) => format!(
                    "the lock was held for --max-hold ({}) and left to expire: raise \
                     --max-hold if the command needs longer",
                    format_duration(max_hold)
                ),
                _ => "the key expired or was deleted under the command (extensions not \
                      confirmed in time, a release by an operator, a node restarted without \
                      persistence): check that a quorum of nodes is up and reachable, or \
                      raise --ttl to give extensions more time; use --fencing so the \
                      protected resource can refuse stale writes"
                    .to_owned(),
            })),
            None => Ok(exit_code),
        }
    }
}

/// How the command ended, in words.
fn describe(status: &ExitStatus) -> String {
    match (status.code(), status_signalled(status)) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by {}", Signal(signal)),
        (None, None) => format!("ended ({status})"),
    }
}

/// The signals quorumlock passes on to the command.
struct Forwarded {
    /// `SIGTERM`.
    term: tokio::signal::unix::Signal,
    /// `SIGINT`.
    int: tokio::signal::unix::Signal,
    /// `SIGHUP`.
    hup: tokio::signal::unix::Signal,
    /// `SIGQUIT`.
    quit: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// Catches SIGTERM, SIGINT, SIGHUP and SIGQUIT from now on.
    fn install() -> Result<Self, CliError> {
        let catch = |kind: SignalKind| {
            signal(kind).map_err(|error| {
                CliError::new(
                    Kind::Os,
                    format!("could not install a signal handler: {error}"),
                )
            })
        };
        Ok(Forwarded {
            term: catch(SignalKind::terminate())?,
            int: catch(SignalKind::interrupt())?,
            hup: catch(SignalKind::hangup())?,
            quit: catch(SignalKind::quit())?,
        })
    }

    /// The next signal caught.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.term.recv() => Signal::TERM,
            Some(()) = self.int.recv() => Signal(libc::SIGINT),
            Some(()) = self.hup.recv() => Signal(libc::SIGHUP),
            Some(()) = self.quit.recv() => Signal(libc::SIGQUIT),
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn spawn_errors_follow_the_shell() {
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(spawn_error(OsStr::new("nope"), &not_found).code(), 127);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_error(OsStr::new("x"), &denied).code(), 126);
    }

    #[test]
    fn interrupted_waits_exit_like_a_shell() {
        assert_eq!(interrupted(Signal::TERM).code(), 128 + 15);
    }

    #[test]
    fn statuses_are_described() {
        assert_eq!(
            describe(&ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(describe(&ExitStatus::from_raw(15)), "was killed by SIGTERM");
    }

    fn outcome(status: i32, lost: Option<LeaseEnd>, released: Result<(), LockError>) -> Outcome {
        let status = ExitStatus::from_raw(status);
        Outcome {
            status,
            code: command_status_code(status),
            lost,
            released,
            signalled: status_signalled(&status),
            max_hold: None,
        }
    }

    #[test]
    fn the_exit_code_is_the_commands_unless_the_lock_was_lost() {
        let quiet = Output {
            json: true,
            verbose: false,
        };
        assert_eq!(outcome(3 << 8, None, Ok(())).finish("job", quiet), Ok(3));
        let lost = outcome(15, Some(LeaseEnd::Expired), Ok(()))
            .finish("job", quiet)
            .unwrap_err();
        assert_eq!(lost.code(), 70);
        assert!(lost.message.contains("SIGTERM"), "{}", lost.message);
        let not_held = LockError::NotHeld {
            resource: "job".into(),
            tally: Default::default(),
        };
        let err = outcome(0, None, Err(not_held))
            .finish("job", quiet)
            .unwrap_err();
        assert_eq!(err.code(), 70);
        // A release that could not be confirmed leaves the command's status alone.
        let no_quorum = LockError::NoQuorum {
            resource: "job".into(),
            tally: Default::default(),
        };
        assert_eq!(outcome(0, None, Err(no_quorum)).finish("job", quiet), Ok(0));
    }
}
