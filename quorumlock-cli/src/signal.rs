//! Signals and process groups: the `--on-lost` setting, and signalling the command's whole
//! process tree the way timeout(1) does.

use std::io::IsTerminal;
use std::str::FromStr;

use nix::errno::Errno;
pub use nix::sys::signal::Signal;
use nix::sys::signal::{kill, killpg};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Where the signals for the command go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The command's own process group (its pid is the group's id): every process the
    /// command started and that did not leave the group.
    Group(Pid),
    /// The command's process only (`--foreground`: it shares quorumlock's group, which
    /// must not be signalled).
    Process(Pid),
}

impl Target {
    /// The target for the command with process id `pid`.
    pub fn new(pid: u32, own_group: bool) -> Option<Self> {
        let pid = Pid::from_raw(i32::try_from(pid).ok()?);
        Some(if own_group {
            Target::Group(pid)
        } else {
            Target::Process(pid)
        })
    }

    /// Sends `signal`.
    pub fn send(self, signal: Signal) -> nix::Result<()> {
        match self {
            Target::Group(pgid) => killpg(pgid, signal),
            Target::Process(pid) => kill(pid, signal),
        }
    }

    /// The pid or process-group id, as printed.
    pub fn id(self) -> i32 {
        match self {
            Target::Group(pid) | Target::Process(pid) => pid.as_raw(),
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> String {
        match self {
            Target::Group(pgid) => format!("the command's process group {pgid}"),
            Target::Process(pid) => format!("the command (pid {pid})"),
        }
    }

    /// Whether any process of the group is left, once the command itself was reaped.
    /// Reaps the group's processes that ended meanwhile first: as a subreaper, quorumlock
    /// inherits the orphans, and an unreaped one would count as alive.
    pub fn group_alive(self) -> bool {
        let Target::Group(pgid) = self else {
            return false;
        };
        // Only members of the command's group are waited for, so no other child of this
        // process (none is expected) loses its exit status.
        let group = Pid::from_raw(-pgid.as_raw());
        while let Ok(status) = waitpid(group, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        // EPERM: a member changed its credentials (setuid); it is still there.
        matches!(killpg(pgid, None), Ok(()) | Err(Errno::EPERM))
    }
}

/// Makes the orphans of the command (processes whose parent ended first) children of this
/// process rather than of init, so that they can be reaped and seen gone at once, even
/// where PID 1 does not reap (some containers). Linux only; elsewhere init does it.
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    {
        // Not fatal: without it the group is still watched, through init's reaping.
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
}

/// Whether this process is in the foreground process group of its terminal, so that the
/// signals a terminal generates (`SIGINT` for Ctrl-C, `SIGQUIT`) reach a `--foreground`
/// command too, which shares the group; passing them on would deliver them twice.
pub fn in_terminal_foreground() -> bool {
    let group = nix::unistd::getpgrp();
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    (stdin.is_terminal() && nix::unistd::tcgetpgrp(&stdin) == Ok(group))
        || (stdout.is_terminal() && nix::unistd::tcgetpgrp(&stdout) == Ok(group))
        || (stderr.is_terminal() && nix::unistd::tcgetpgrp(&stderr) == Ok(group))
}

/// Whether a terminal generates `signal` for its foreground process group.
pub fn terminal_generated(signal: Signal) -> bool {
    matches!(signal, Signal::SIGINT | Signal::SIGQUIT)
}

/// What `run` does to the command when the lock is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Send this signal, then `SIGKILL` if the command is still running after the grace
    /// period.
    Signal(Signal),
    /// Leave the command running; `run` still exits with the lost-lock code when it ends.
    Nothing,
}

/// Parses `--on-lost`: a signal name (`TERM`, `SIGTERM`, `int`, ...), a signal number, or
/// `none`.
pub fn parse_on_lost(text: &str) -> Result<OnLost, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("none") {
        return Ok(OnLost::Nothing);
    }
    parse_signal(trimmed).map(OnLost::Signal)
}

/// Parses a signal name, with or without `SIG`, in any case, or a number.
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    if let Ok(number) = text.parse::<i32>() {
        return Signal::try_from(number)
            .map_err(|_| format!("{number} is not a signal number on this system"));
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&name).map_err(|_| {
        format!(
            "unknown signal {text:?}: use a name such as TERM, INT, HUP, KILL or USR1, \
             a signal number, or none"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_numbers_and_none() {
        assert_eq!(parse_on_lost("TERM"), Ok(OnLost::Signal(Signal::SIGTERM)));
        assert_eq!(
            parse_on_lost("sigterm"),
            Ok(OnLost::Signal(Signal::SIGTERM))
        );
        assert_eq!(parse_on_lost("Kill"), Ok(OnLost::Signal(Signal::SIGKILL)));
        assert_eq!(
            parse_on_lost("SIGUSR1"),
            Ok(OnLost::Signal(Signal::SIGUSR1))
        );
        assert_eq!(parse_on_lost("2"), Ok(OnLost::Signal(Signal::SIGINT)));
        assert_eq!(parse_on_lost("none"), Ok(OnLost::Nothing));
        assert!(parse_on_lost("0").unwrap_err().contains("not a signal"));
        let err = parse_on_lost("TREM").unwrap_err();
        assert!(err.contains("TERM") && err.contains("none"), "{err}");
    }

    #[test]
    fn signals_a_whole_group_and_sees_it_gone() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let target = Target::new(child.id(), true).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        target.send(Signal::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        let start = std::time::Instant::now();
        while target.group_alive() {
            assert!(start.elapsed().as_secs() < 5, "the group outlived SIGKILL");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
