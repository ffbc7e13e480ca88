//! What the program says, and where: human lines or JSON lines on stderr, results on
//! stdout. `run` never writes to stdout, which belongs to the command.
//!
//! The JSON events are `Serialize` structs, so their schema is what docs/cli.md lists and
//! cannot drift field by field.

use std::io::Write;
use std::time::SystemTime;

use quorumlock::Tally;
use serde::Serialize;
use serde_json::Value;

use crate::exit::{CliError, Kind};

/// How to report: JSON or text, and how much.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// JSON instead of text.
    pub json: bool,
    /// Report progress, not only results and problems.
    pub verbose: bool,
    /// Say nothing about expected outcomes (a lock held elsewhere) and degraded nodes.
    pub quiet: bool,
}

/// One JSON line of `--json` on stderr: the event, stamped with the time it was written.
#[derive(Debug, Serialize)]
struct Line<'a> {
    /// RFC 3339, UTC, milliseconds: `2026-12-01T08:40:08.123Z`.
    time: String,
    #[serde(flatten)]
    event: &'a Event,
}

/// The events of `--json`, tagged by `"event"`.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// `run` took the lock.
    Acquired {
        resource: String,
        key: String,
        token: String,
        fencing_token: Option<u64>,
        validity_ms: u64,
        quorum: usize,
        /// From the start of the first attempt to the lock taken.
        waited_ms: u64,
        /// The winning round's count of nodes.
        tally: TallyJson,
    },
    /// A quorum was reached while some nodes failed: the lock holds, with less margin.
    Degraded {
        resource: String,
        granted: usize,
        nodes: usize,
        quorum: usize,
        failed: Vec<FailureJson>,
    },
    /// The lock was lost while the command ran.
    Lost {
        resource: String,
        reason: String,
        on_lost: Option<String>,
        /// How long the lock had been held.
        held_ms: u64,
    },
    /// A signal was sent to the command's process group (or to the command alone, with
    /// `--foreground`).
    Signal {
        signal: String,
        /// The command's pid, which is also its process group's id.
        pid: i32,
        /// Whether the whole process group was signalled.
        group: bool,
        why: String,
    },
    /// The command exited, and processes it started still run in its group.
    Orphans {
        resource: String,
        /// `wait`, `kill` or `leave` (`--orphans`).
        action: String,
    },
    /// Something worth knowing that does not change the exit code.
    Warning { message: String },
    /// `run` is about to exit.
    Exit {
        resource: String,
        exit_code: u8,
        command_status: Option<i32>,
        command_signal: Option<i32>,
        lost: bool,
        released: bool,
        release_error: Option<String>,
        /// From the command's start to its exit (its own process).
        command_ms: u64,
        /// From the lock taken to its release.
        held_ms: u64,
    },
    /// `bench` checked the nodes and is about to create its first key.
    BenchStarted {
        key_prefix: String,
        nodes: usize,
        quorum: usize,
    },
    /// `bench` could not remove or check its keys on a node.
    #[serde(rename = "warning")]
    NodeWarning {
        node: String,
        message: String,
        /// The keys of the run still there, when they could be listed.
        #[serde(skip_serializing_if = "Option::is_none")]
        keys: Option<Vec<String>>,
    },
    /// The error that ends the program.
    Error {
        kind: &'static str,
        exit_code: u8,
        message: String,
        hint: Option<String>,
        /// The count of nodes behind a lock error, when it has one.
        tally: Option<TallyJson>,
    },
}

/// A [`Tally`] as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct TallyJson {
    pub nodes: usize,
    pub quorum: usize,
    pub granted: usize,
    pub refused: Vec<String>,
    pub failed: Vec<FailureJson>,
}

/// One failed node.
#[derive(Debug, Clone, Serialize)]
pub struct FailureJson {
    pub node: String,
    pub error: String,
}

impl From<&Tally> for TallyJson {
    fn from(tally: &Tally) -> Self {
        TallyJson {
            nodes: tally.nodes,
            quorum: tally.quorum,
            granted: tally.granted,
            refused: tally.refused.clone(),
            failed: failures(tally),
        }
    }
}

/// The failed nodes of `tally`.
pub fn failures(tally: &Tally) -> Vec<FailureJson> {
    tally
        .failures
        .iter()
        .map(|failure| FailureJson {
            node: failure.node.clone(),
            error: failure.error.to_string(),
        })
        .collect()
}

impl Output {
    /// An event of `run` (or a problem of any command): one JSON line on stderr with
    /// `--json`; otherwise `text` on stderr when `always` or in verbose mode.
    pub fn event(&self, always: bool, event: &Event, text: impl FnOnce() -> String) {
        if self.json {
            write_line(&mut std::io::stderr().lock(), &json_line(event));
        } else if always || self.verbose {
            write_line(
                &mut std::io::stderr().lock(),
                &format!("quorumlock: {}", text()),
            );
        }
    }

    /// A warning that does not change the exit code: an [`Event::Warning`], always shown.
    pub fn warning(&self, message: String) {
        self.event(
            true,
            &Event::Warning {
                message: message.clone(),
            },
            || format!("warning: {message}"),
        );
    }

    /// A warning about degraded nodes: like an event, but not at all under `--quiet`.
    pub fn degraded(&self, event: &Event, text: impl FnOnce() -> String) {
        if !self.quiet {
            self.event(true, event, text);
        }
    }

    /// A progress note: stderr, text mode with `--verbose` only.
    pub fn note(&self, text: impl FnOnce() -> String) {
        if self.verbose && !self.json {
            write_line(
                &mut std::io::stderr().lock(),
                &format!("quorumlock: {}", text()),
            );
        }
    }

    /// The manual, on stdout as it is.
    pub fn manual(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    /// The result of `status` or `release`: JSON or text on stdout.
    pub fn result(&self, value: &Value, text: impl FnOnce() -> String) {
        let line = if self.json { value.to_string() } else { text() };
        write_line(&mut std::io::stdout().lock(), &line);
    }

    /// The error that ends the program, on stderr; under `--quiet`, nothing for the
    /// expected one, a lock held elsewhere.
    pub fn error(&self, error: &CliError) {
        if self.quiet && error.kind == Kind::Held {
            return;
        }
        let line = if self.json {
            json_line(&error_event(error))
        } else {
            format!("quorumlock: error: {error}")
        };
        write_line(&mut std::io::stderr().lock(), &line);
    }
}

/// `event` as its JSON line, stamped with the current time.
fn json_line(event: &Event) -> String {
    let line = Line {
        time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        event,
    };
    // Plain strings and numbers cannot fail to serialize.
    serde_json::to_string(&line).unwrap_or_default()
}

/// An error as a JSON event.
pub fn error_event(error: &CliError) -> Event {
    Event::Error {
        kind: error.kind.name(),
        exit_code: error.code(),
        message: error.message.clone(),
        hint: error.hint.clone(),
        tally: error.tally.as_deref().map(TallyJson::from),
    }
}

/// Writes one line; a closed stream (a reader that went away) is not worth failing over.
fn write_line(stream: &mut impl Write, line: &str) {
    let _ = writeln!(stream, "{line}");
    let _ = stream.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_as_json_carry_kind_code_hint_and_time() {
        let error = CliError::new(Kind::Config, "no nodes given").hint("pass --nodes");
        let value: Value = serde_json::from_str(&json_line(&error_event(&error))).unwrap();
        assert_eq!(value["event"], "error");
        assert_eq!(value["kind"], "config");
        assert_eq!(value["exit_code"], 78);
        assert_eq!(value["message"], "no nodes given");
        assert_eq!(value["hint"], "pass --nodes");
        assert!(value["tally"].is_null());
        let time = value["time"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(time).is_ok(), "{time}");
    }
}
