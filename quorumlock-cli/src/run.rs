//! `quorumlock run`: a command under the lock.

use std::ffi::{OsStr, OsString};
use std::process::ExitStatus;
use std::time::Duration;

use quorumlock::{AutoExtend, LeaseEnd, LockConfig, LockError, LockGuard, Redlock};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::args::{GlobalArgs, Orphans, RunArgs};
use crate::duration::{format_duration, millis};
use crate::exit::{command_status_code, CliError, Kind};
use crate::explain;
use crate::guardian::Guardian;
use crate::hold::Hold;
use crate::nodes::{check_urls, node_urls};
use crate::output::{failures, Event, FailureJson, Output, TallyJson};
use crate::signal::{
    adopt_orphans, in_terminal_foreground, terminal_generated, OnLost, Signal, Target,
};

/// How often the command's process group is looked at once the command itself exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How long processes of the group may linger after SIGKILL (a process in uninterruptible
/// sleep dies only when its I/O returns) before the lock is released anyway.
const AFTER_KILL: Duration = Duration::from_secs(1);

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
    let nodes =
        check_urls(global, &urls)?.fencing_on_volatile_nodes(args.fencing_on_volatile_nodes);
    // The wait a user sees includes connecting: a slow node can cost more there than in
    // the acquisition itself.
    let waiting_since = Instant::now();
    let lock = Redlock::connect(nodes, config)
        .await
        .map_err(|error| explain::lock_error(&error, global))?;
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
    let acquisition = Hold::of(args).take(&lock, resource, args.wait);
    let mut guard = tokio::select! {
        acquired = acquisition => acquired.map_err(|error| {
            let explained = explain::lock_error(&error, global);
            // `--wait 0s` makes one attempt, as without it.
            let error = match args.wait.filter(|wait| !wait.is_zero()) {
                Some(wait) => explain::after_wait(&error, wait, explained),
                None => explained,
            };
            if error.kind == Kind::Held {
                error.with_code(args.conflict_exit_code)
            } else {
                error
            }
        })?,
        signal = signals.recv() => {
            // The dropped attempt unlocks its nodes in the background: give it the time.
            tokio::time::sleep(node_timeout.saturating_mul(2)).await;
            return Err(interrupted(signal));
        }
    };
    let acquired_at = Instant::now();

    let mut extend = AutoExtend::default();
    if let Some(max_hold) = args.max_hold {
        extend = extend.max_hold(max_hold);
    }
    guard
        .auto_extend(extend)
        .map_err(|error| explain::config_error(&error, global))?;
    report_acquired(&guard, &lock, acquired_at - waiting_since, out);
    report_degraded(&guard, &lock, out);

    let own_group = !args.foreground;
    if own_group {
        adopt_orphans();
    }
    // Started before the command, so that no instant of the command's life is unguarded
    // but the one between its start and the pid written to the guardian.
    let mut guardian = start_guardian(args, out);
    let mut command = command(program, program_args, &guard, own_group);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let _ = guard.release().await;
            tokio::time::sleep(node_timeout).await; // as below
            return Err(spawn_error(program, &error));
        }
    };
    if let (Some(watching), Some(pid)) = (guardian.as_mut(), child.id()) {
        if let Err(error) = watching.watch(pid, own_group) {
            out.warning(format!(
                "the command's guardian is gone ({error}); if quorumlock is killed, end the \
                 command yourself"
            ));
        }
    }
    let status = supervise(&mut child, &guard, args, &mut signals, out).await;
    // The command was waited for: nothing is left for the guardian to end.
    drop(guardian);

    // The lease may have ended between the last look and the command's exit.
    let lost = status.lost.or_else(|| guard.lost().ended());
    let released = guard.release().await;
    let held = acquired_at.elapsed();
    // The release returns once a quorum deleted the key; the deletes still in flight
    // finish in the background, within one node timeout. Let them, so that no node keeps
    // the key until its TTL after this process exits.
    tokio::time::sleep(node_timeout).await;
    let exit = status.exit.map_err(|error| {
        CliError::new(
            Kind::Os,
            format!("could not wait for the command to end: {error}"),
        )
    })?;
    let code = command_status_code(exit);
    let outcome = Outcome {
        status: exit,
        code,
        lost,
        released,
        signalled: status_signalled(&exit),
        max_hold: args.max_hold,
        command_time: status.command_time,
        held,
    };
    outcome.finish(resource, out)
}

/// The lock settings of this run.
fn lock_config(global: &GlobalArgs, args: &RunArgs) -> Result<LockConfig, CliError> {
    let mut builder = LockConfig::builder().ttl(args.ttl).fencing(args.fencing);
    if let Some(node_timeout) = global.node_timeout {
        builder = builder.node_timeout(node_timeout);
    }
    if let Some(prefix) = &global.key_prefix {
        builder = builder.key_prefix(prefix.clone());
    }
    if let Some(delay) = args.lock_delay {
        builder = builder.lock_delay(delay);
    }
    // --wait bounds the attempts by time, not by count: the deadline is what lets the
    // configuration retry without a count. `--wait 0s` keeps the default retries; its
    // deadline, already past, ends the first attempt.
    if let Some(wait) = args.wait.filter(|wait| !wait.is_zero()) {
        builder = builder.retry_count(u32::MAX).acquire_timeout(wait);
    }
    builder
        .build()
        .map_err(|error| explain::config_error(&error, global))
}

/// Says that the lock was taken, with its token.
fn report_acquired(guard: &LockGuard, lock: &Redlock, waited: Duration, out: Output) {
    let event = Event::Acquired {
        resource: guard.resource().to_owned(),
        key: guard.key().to_owned(),
        token: guard.token().as_str().to_owned(),
        fencing_token: guard.fencing_token(),
        validity_ms: millis(guard.validity()),
        quorum: lock.quorum(),
        waited_ms: millis(waited),
        tally: TallyJson::from(guard.tally()),
    };
    out.event(false, &event, || {
        let fencing = guard
            .fencing_token()
            .map(|token| format!(", fencing token {token}"))
            .unwrap_or_default();
        format!(
            "acquired {:?} (token {}{fencing}) after {}, valid for {}; extending it while \
             the command runs",
            guard.resource(),
            guard.token(),
            format_duration(waited),
            format_duration(guard.validity())
        )
    });
}

/// Warns, in one line, when the quorum was reached with nodes failing, or with members
/// whose server cannot serve the lock (a replica, a database it does not have: see
/// [`NodeMetrics::excluded`](quorumlock::NodeMetrics::excluded)): the lock holds, but
/// fewer further failures would lose it, which an operator wants to hear before they
/// happen.
fn report_degraded(guard: &LockGuard, lock: &Redlock, out: Output) {
    let tally = guard.tally();
    let mut failed = failures(tally);
    for node in lock.node_metrics() {
        if let Some(reason) = node.excluded {
            if !failed.iter().any(|failure| failure.node == node.node) {
                failed.push(FailureJson {
                    node: node.node,
                    error: format!("refused: {reason}"),
                });
            }
        }
    }
    if failed.is_empty() {
        return;
    }
    let text = failed
        .iter()
        .map(|failure| format!("{} failed: {}", failure.node, failure.error))
        .collect::<Vec<_>>()
        .join("; ");
    let event = Event::Degraded {
        resource: guard.resource().to_owned(),
        granted: tally.granted,
        nodes: tally.nodes,
        quorum: tally.quorum,
        failed,
    };
    out.degraded(&event, || {
        format!(
            "warning: acquired {:?} on {} of {} nodes (quorum {}); {text}",
            guard.resource(),
            tally.granted,
            tally.nodes,
            tally.quorum,
        )
    });
}

/// The guardian that ends the command if this process is killed (see [`guardian`]), unless
/// `--on-lost none` lets the command run on without the lock; a guardian that cannot be
/// started is a warning, not a reason to refuse the run.
fn start_guardian(args: &RunArgs, out: Output) -> Option<Guardian> {
    let OnLost::Signal(signal) = args.on_lost else {
        return None;
    };
    match Guardian::start(args.kill_after, signal, out) {
        Ok(guardian) => Some(guardian),
        Err(error) => {
            out.warning(format!(
                "could not start the command's guardian ({error}); if quorumlock is killed, \
                 end the command yourself"
            ));
            None
        }
    }
}

/// The command, with the lock's details in its environment and quorumlock's stdio; in a
/// process group of its own unless `own_group` is false.
fn command(
    program: &OsStr,
    args: &[OsString],
    guard: &LockGuard,
    own_group: bool,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("QUORUMLOCK_RESOURCE", guard.resource())
        .env("QUORUMLOCK_TOKEN", guard.token().as_str());
    match guard.fencing_token() {
        Some(token) => command.env("QUORUMLOCK_FENCING_TOKEN", token.to_string()),
        None => command.env_remove("QUORUMLOCK_FENCING_TOKEN"),
    };
    if own_group {
        // Its pid becomes the group's id: one killpg then reaches every process the
        // command starts, as timeout(1) does it.
        command.process_group(0);
    }
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
        Kind::Interrupted(u8::try_from(signal as i32).unwrap_or(0)),
        format!(
            "interrupted by {} while waiting for the lock; the command was not run",
            signal.as_str()
        ),
    )
}

/// How the command's run went.
struct Supervised {
    /// Its exit status, or why it could not be waited for.
    exit: std::io::Result<ExitStatus>,
    /// How the lease ended while it ran, if it did.
    lost: Option<LeaseEnd>,
    /// From its start to its own exit.
    command_time: Duration,
}

/// Waits for the command and then for the rest of its process group (see `--orphans`);
/// meanwhile signals the group when the lock is lost (then kills it after the grace
/// period), and passes on the signals quorumlock gets.
async fn supervise(
    child: &mut tokio::process::Child,
    guard: &LockGuard,
    args: &RunArgs,
    signals: &mut Forwarded,
    out: Output,
) -> Supervised {
    let started = Instant::now();
    // The pid names the command until `wait` reaps it; as a group id it stays valid while
    // any process of the group is left, which is looked at before each signal below.
    let target = child
        .id()
        .and_then(|pid| Target::new(pid, !args.foreground));
    let lost = guard.lost();
    let mut lost_end = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    let mut exit: Option<(std::io::Result<ExitStatus>, Duration)> = None;
    let send = |signal: Signal, why: &str| {
        let Some(target) = target else { return };
        match target.send(signal) {
            Ok(()) => {
                let event = Event::Signal {
                    signal: signal.as_str().to_owned(),
                    pid: target.id(),
                    group: matches!(target, Target::Group(_)),
                    why: why.to_owned(),
                };
                out.event(false, &event, || {
                    format!("sent {} to {}: {why}", signal.as_str(), target.describe())
                });
            }
            // The last process of the group ended since it was looked at.
            Err(nix::errno::Errno::ESRCH) => {}
            Err(error) => {
                out.warning(format!(
                    "could not send {} to {}: {error}",
                    signal.as_str(),
                    target.describe()
                ));
            }
        }
    };
    // Arms the escalation to SIGKILL after a signal meant to stop the group, or notes that
    // SIGKILL itself was sent.
    let escalate =
        |signal: Signal, kill_at: &mut Option<Instant>, killed_at: &mut Option<Instant>| {
            if signal == Signal::SIGKILL {
                *killed_at = Some(Instant::now());
                *kill_at = None;
            } else if kill_at.is_none() && killed_at.is_none() {
                // Checked like every deadline: a --kill-after too large to represent means
                // never escalating to KILL, not a panic.
                *kill_at = Instant::now().checked_add(args.kill_after);
            }
        };
    let mut orphans_seen = false;
    loop {
        if exit.is_some() {
            if !target.is_some_and(Target::group_alive) {
                break;
            }
            if !orphans_seen {
                orphans_seen = true;
                let action = match args.orphans {
                    Orphans::Wait => "wait",
                    Orphans::Kill => "kill",
                    Orphans::Leave => "leave",
                };
                let event = Event::Orphans {
                    resource: args.resource.clone(),
                    action: action.to_owned(),
                };
                let always = args.orphans == Orphans::Leave;
                let stopping = kill_at.is_some() || killed_at.is_some();
                out.event(always, &event, || match args.orphans {
                    // They were already told to stop: the lock is kept no longer than that.
                    Orphans::Wait if stopping => "the command exited; processes it started \
                                                  still run in its group: keeping the lock \
                                                  until they end, SIGKILL after --kill-after"
                        .to_owned(),
                    Orphans::Wait => "the command exited; processes it started still run in \
                                      its group: keeping the lock until they end (--orphans)"
                        .to_owned(),
                    Orphans::Kill => "the command exited; stopping the processes it started \
                                      (--orphans kill)"
                        .to_owned(),
                    Orphans::Leave => "warning: the command exited; processes it started \
                                       still run, and are left running without the lock \
                                       (--orphans leave)"
                        .to_owned(),
                });
                match args.orphans {
                    Orphans::Wait => {}
                    Orphans::Kill => {
                        send(Signal::SIGTERM, "the command exited (--orphans kill)");
                        escalate(Signal::SIGTERM, &mut kill_at, &mut killed_at);
                    }
                    Orphans::Leave => break,
                }
            }
            if killed_at.is_some_and(|at| at.elapsed() >= AFTER_KILL) {
                out.warning(format!(
                    "processes of the command's group were still there {} after SIGKILL; \
                     releasing the lock anyway",
                    format_duration(AFTER_KILL)
                ));
                break;
            }
        }
        tokio::select! {
            status = child.wait(), if exit.is_none() => {
                exit = Some((status, started.elapsed()));
            }
            () = tokio::time::sleep(GROUP_POLL), if exit.is_some() => {}
            end = lost.wait(), if lost_end.is_none() => {
                let action = match args.on_lost {
                    OnLost::Signal(signal) => format!("sending {} to the command", signal.as_str()),
                    OnLost::Nothing => "letting the command finish (--on-lost none)".to_owned(),
                };
                let event = Event::Lost {
                    resource: args.resource.clone(),
                    reason: end.to_string(),
                    on_lost: match args.on_lost {
                        OnLost::Signal(signal) => Some(signal.as_str().to_owned()),
                        OnLost::Nothing => None,
                    },
                    held_ms: millis(guard.acquired_at().elapsed()),
                };
                out.event(true, &event, || {
                    format!("lock {:?} lost while the command ran ({end}); {action}", args.resource)
                });
                if let OnLost::Signal(signal) = args.on_lost {
                    send(signal, "the lock was lost");
                    escalate(signal, &mut kill_at, &mut killed_at);
                }
                lost_end = Some(end);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                send(Signal::SIGKILL, "still running after --kill-after");
                escalate(Signal::SIGKILL, &mut kill_at, &mut killed_at);
            }
            signal = signals.recv() => {
                if args.foreground && terminal_generated(signal) && in_terminal_foreground() {
                    out.note(|| {
                        format!("got {}; the terminal sent it to the command too", signal.as_str())
                    });
                } else {
                    send(signal, "passed on from quorumlock");
                    // As timeout(1) does: a signal passed on is meant to stop the command,
                    // and the lock is not kept past --kill-after for one that ignores it.
                    escalate(signal, &mut kill_at, &mut killed_at);
                }
            }
        }
    }
    let (exit, command_time) = exit.unwrap_or_else(|| {
        (
            Err(std::io::Error::other("the command was not waited for")),
            started.elapsed(),
        )
    });
    Supervised {
        exit,
        lost: lost_end,
        command_time,
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
    /// From the command's start to its own exit.
    command_time: Duration,
    /// From the lock taken to its release.
    held: Duration,
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
        let event = Event::Exit {
            resource: resource.to_owned(),
            exit_code,
            command_status: self.status.code(),
            command_signal: self.signalled,
            lost: lost_reason.is_some(),
            released: self.released.is_ok(),
            release_error: release_error.clone(),
            command_ms: millis(self.command_time),
            held_ms: millis(self.held),
        };
        if let Some(error) = &release_error {
            let warning = Event::Warning {
                message: format!("release not confirmed: {error}"),
            };
            out.event(true, &warning, || {
                format!(
                    "warning: the release was not confirmed ({error}); \
                     the lock expires by itself within --ttl"
                )
            });
        }
        let held = format_duration(self.held);
        out.event(false, &event, || match (&lost_reason, &self.released) {
            (Some(_), _) => format!("the command {command}; exiting with {exit_code} (lock lost)"),
            (None, Ok(())) => format!("the command {command}; released {resource:?}, held {held}"),
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
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("was killed by {}", signal.as_str()),
            Err(_) => format!("was killed by signal {signal}"),
        },
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
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
            Some(()) = self.quit.recv() => Signal::SIGQUIT,
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
        assert_eq!(interrupted(Signal::SIGTERM).code(), 128 + 15);
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
            command_time: Duration::ZERO,
            held: Duration::ZERO,
        }
    }

    #[test]
    fn the_exit_code_is_the_commands_unless_the_lock_was_lost() {
        let quiet = Output {
            json: true,
            verbose: false,
            quiet: true,
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
