//! Signals to a node's process: `SIGSTOP` and `SIGCONT` for freezing and thawing, and
//! waiting until the kernel shows the process in its new state.

#[cfg(target_os = "linux")]
use std::time::{Duration, Instant};

use crate::error::{Result, TestkitError};

/// The signals the harness sends to a node's process.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Signal {
    /// `SIGSTOP`: the process is suspended (frozen).
    Stop,
    /// `SIGCONT`: it resumes (thawed).
    Cont,
    /// `SIGQUIT`: a PostgreSQL server's immediate shutdown (it ends its backends and exits).
    Quit,
}

/// Sends `signal` to the process `pid`.
#[cfg(unix)]
pub(crate) fn send_signal(pid: u32, signal: Signal) -> Result<()> {
    let (number, name) = match signal {
        Signal::Stop => (libc::SIGSTOP, "SIGSTOP"),
        Signal::Cont => (libc::SIGCONT, "SIGCONT"),
        Signal::Quit => (libc::SIGQUIT, "SIGQUIT"),
    };
    let raw_pid = libc::pid_t::try_from(pid).map_err(|_| TestkitError::Signal {
        signal: name,
        pid,
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: kill(2) has no memory-safety preconditions; the pid belongs to a
    // child we have not reaped yet, so it cannot have been recycled.
    let rc = unsafe { libc::kill(raw_pid, number) };
    if rc == 0 {
        Ok(())
    } else {
        Err(TestkitError::Signal {
            signal: name,
            pid,
            source: std::io::Error::last_os_error(),
        })
    }
}

/// Signals need Unix: elsewhere, freezing and thawing are refused.
#[cfg(not(unix))]
pub(crate) fn send_signal(_pid: u32, signal: Signal) -> Result<()> {
    Err(TestkitError::Unsupported(match signal {
        Signal::Stop => "freezing a node (SIGSTOP)",
        Signal::Cont => "thawing a node (SIGCONT)",
        Signal::Quit => "stopping a PostgreSQL server (SIGQUIT)",
    }))
}

/// Waits (up to 1 s) until the kernel reports the process as stopped or not,
/// so that a test acting right after `freeze`/`thaw` sees the new state.
/// Signal delivery is asynchronous; without this a request sent immediately
/// after `freeze` could still be served. Only Linux exposes this cheaply; on
/// other systems this returns at once.
pub(crate) async fn wait_stopped_state(pid: u32, stopped: bool) {
    #[cfg(target_os = "linux")]
    {
        let deadline = Instant::now() + Duration::from_secs(1);
        let stat_path = format!("/proc/{pid}/stat");
        while Instant::now() < deadline {
            let Ok(stat) = std::fs::read_to_string(&stat_path) else {
                return;
            };
            // Format: "pid (comm) S ..."; comm may contain spaces and parentheses.
            let Some(state) = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
            else {
                return;
            };
            if (state == "T") == stopped {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, stopped);
    }
}
