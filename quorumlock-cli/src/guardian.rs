//! The guardian of a `run`: a small process of its own that ends the command when
//! `quorumlock` itself is killed without a chance to (`SIGKILL`, the OOM killer), so that
//! the command never runs on without the lock.
//!
//! flock(1) gets this for free: the command holds the lock's descriptor, and the lock ends
//! with the last process. A lock on Redis ends by its TTL instead, while the command runs
//! on; without the guardian, the next holder's command would run beside it. The guardian
//! is `quorumlock` itself, started before the command as `quorumlock __guardian KILL_AFTER
//! SIGNAL FORMAT` in a session of its own (so that a signal to the terminal's or to `run`'s
//! process group does not reach it), ignoring the signals that end a job. Its standard
//! input is a pipe from `run`, on which it learns the command's pid, and the word `done`
//! once the command has been waited for. End of input without `done` means `run` died: the
//! guardian sends SIGNAL to the command's process group (to its process alone with
//! `--foreground`), then `SIGKILL` after KILL_AFTER if any of it is left.
//!
//! Not `PR_SET_PDEATHSIG` on the command: it fires when the *thread* that started the
//! child ends (a runtime's worker may), and it reaches the child, not the processes the
//! child starts. The pipe closes only when every copy of its write end is gone, that is
//! when `run` is gone, and the group reaches the whole tree.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, SigHandler, Signal};
use nix::unistd::Pid;

use crate::output::Output;

/// The first word of a guardian's command line.
pub const COMMAND: &str = "__guardian";

/// The running guardian of one `run`, from the side of `run`.
pub struct Guardian {
    process: Child,
    orders: ChildStdin,
}

impl Guardian {
    /// Starts the guardian: on the death of this process, it sends `signal` to the command
    /// (then `SIGKILL` after `kill_after`).
    pub fn start(kill_after: Duration, signal: Signal, out: Output) -> std::io::Result<Guardian> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg(COMMAND)
            .arg(kill_after.as_millis().to_string())
            .arg(signal.as_str())
            .arg(if out.json { "json" } else { "text" })
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: `setsid` is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        let mut process = command.spawn()?;
        let orders = process
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the guardian's input was not a pipe"))?;
        Ok(Guardian { process, orders })
    }

    /// Tells the guardian which command to end: the process group `pid` leads when
    /// `group`, else the process alone.
    pub fn watch(&mut self, pid: u32, group: bool) -> std::io::Result<()> {
        writeln!(self.orders, "watch {pid} {}", u8::from(group))
    }
}

impl Drop for Guardian {
    /// `run` ends normally: the command was waited for, so there is nothing to end. Tells
    /// the guardian so (it exits at once) without waiting for it: a guardian that
    /// already exited is reaped here, one still exiting by init.
    fn drop(&mut self) {
        let _ = writeln!(self.orders, "done");
        let _ = self.orders.flush();
        let _ = self.process.try_wait();
    }
}

/// What the guardian was told to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watched {
    pid: i32,
    group: bool,
}

/// The guardian's side: `args` are what follows [`COMMAND`] on its command line. Returns
/// its exit code: 0 when `run` ended normally, 1 when it ended the command, 2 on a bad
/// command line.
pub fn serve(args: &[String]) -> u8 {
    let (Some(kill_after), Some(signal), Some(json)) = (
        args.first()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis),
        args.get(1).and_then(|name| name.parse::<Signal>().ok()),
        match args.get(2).map(String::as_str) {
            Some("json") => Some(true),
            Some("text") => Some(false),
            _ => None,
        },
    ) else {
        eprintln!(
            "quorumlock: {COMMAND} takes KILL_AFTER_MS SIGNAL json|text (it is started by `run`)"
        );
        return 2;
    };
    for ending in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: ignoring a signal installs no handler.
        let _ = unsafe { nix::sys::signal::signal(ending, SigHandler::SigIgn) };
    }
    let mut watched = None;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["done"] => return 0,
            ["watch", pid, group] => {
                watched = pid.parse().ok().map(|pid| Watched {
                    pid,
                    group: *group == "1",
                });
            }
            _ => {}
        }
    }
    // End of input without `done`: `run` is gone.
    let Some(watched) = watched else {
        return 0;
    };
    let out = Output {
        json,
        verbose: false,
        quiet: false,
    };
    out.warning(format!(
        "quorumlock run was killed; its guardian ends the command ({} {}) with {}",
        if watched.group {
            "process group"
        } else {
            "process"
        },
        watched.pid,
        signal.as_str()
    ));
    end(watched, signal, kill_after);
    1
}

/// Sends `signal` to what `watched` names, then `SIGKILL` after `kill_after` if any of it
/// is still there.
fn end(watched: Watched, signal: Signal, kill_after: Duration) {
    let target = if watched.group {
        Pid::from_raw(-watched.pid)
    } else {
        Pid::from_raw(watched.pid)
    };
    if kill(target, signal).is_err() {
        return; // gone already
    }
    let deadline = Instant::now() + kill_after;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        // Signal 0 only asks whether anything of it is left.
        if kill(target, None).is_err() {
            return;
        }
    }
    let _ = kill(target, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_command_line_is_refused() {
        let words = |words: &[&str]| {
            words
                .iter()
                .map(|word| (*word).to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(serve(&[]), 2);
        assert_eq!(serve(&words(&["soon", "SIGTERM", "text"])), 2);
        assert_eq!(serve(&words(&["100", "SIGNOPE", "text"])), 2);
        assert_eq!(serve(&words(&["100", "SIGTERM", "yaml"])), 2);
    }
}
