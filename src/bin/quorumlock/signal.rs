//! Signals: the `--on-lost` setting, and sending a signal to the command.

use std::fmt;

/// The signals `--on-lost` accepts by name, with their numbers on this platform.
const NAMES: &[(&str, libc::c_int)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ABRT", libc::SIGABRT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
];

/// A Unix signal, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub libc::c_int);

impl Signal {
    /// `SIGTERM`.
    pub const TERM: Signal = Signal(libc::SIGTERM);
    /// `SIGKILL`.
    pub const KILL: Signal = Signal(libc::SIGKILL);

    /// Sends this signal to the process `pid`.
    pub fn send(self, pid: u32) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. The pid is
        // that of our own child, which has not been reaped yet (the caller stops signalling
        // once its wait returned), so it cannot name a recycled process.
        let result = unsafe { libc::kill(pid, self.0) };
        if result == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match NAMES.iter().find(|(_, number)| *number == self.0) {
            Some((name, _)) => write!(f, "SIG{name}"),
            None => write!(f, "signal {}", self.0),
        }
    }
}

/// Whether this process is in the foreground process group of its terminal, so that the
/// signals a terminal generates (`SIGINT` for Ctrl-C, `SIGQUIT`) reach the
/// command too, which shares the group; passing them on would deliver them twice.
pub fn in_terminal_foreground() -> bool {
    [libc::STDIN_FILENO, libc::STDERR_FILENO, libc::STDOUT_FILENO]
        .into_iter()
        .any(|fd| {
            // SAFETY: isatty, tcgetpgrp and getpgrp take plain integers, touch no memory of
            // ours, and only report errors through their return values.
            unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() }
        })
}

/// Whether a terminal generates `signal` for its foreground process group.
pub fn terminal_generated(signal: Signal) -> bool {
    signal.0 == libc::SIGINT || signal.0 == libc::SIGQUIT
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
    if let Ok(number) = text.parse::<libc::c_int>() {
        return if (1..=64).contains(&number) {
            Ok(Signal(number))
        } else {
            Err(format!("{number} is not a signal number (1 to 64)"))
        };
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    NAMES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, number)| Signal(*number))
        .ok_or_else(|| {
            let names: Vec<&str> = NAMES.iter().map(|(name, _)| *name).collect();
            format!(
                "unknown signal {text:?}: use one of {}, a signal number, or none",
                names.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_numbers_and_none() {
        assert_eq!(parse_on_lost("TERM"), Ok(OnLost::Signal(Signal::TERM)));
        assert_eq!(parse_on_lost("sigterm"), Ok(OnLost::Signal(Signal::TERM)));
        assert_eq!(parse_on_lost("Kill"), Ok(OnLost::Signal(Signal::KILL)));
        assert_eq!(
            parse_on_lost("SIGUSR1"),
            Ok(OnLost::Signal(Signal(libc::SIGUSR1)))
        );
        assert_eq!(parse_on_lost("2"), Ok(OnLost::Signal(Signal(2))));
        assert_eq!(parse_on_lost("none"), Ok(OnLost::Nothing));
        assert!(parse_on_lost("0").unwrap_err().contains("1 to 64"));
        let err = parse_on_lost("TREM").unwrap_err();
        assert!(err.contains("TERM") && err.contains("none"), "{err}");
    }

    #[test]
    fn displays_conventional_names() {
        assert_eq!(Signal::TERM.to_string(), "SIGTERM");
        assert_eq!(Signal(40).to_string(), "signal 40");
    }

    #[test]
    fn sends_signals_to_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        Signal::TERM.send(child.id()).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGTERM)
        );
    }
}
