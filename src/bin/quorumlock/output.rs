//! What the program says, and where: human lines or JSON lines on stderr, results on
//! stdout. `run` never writes to stdout, which belongs to the command.

use std::io::Write;

use serde_json::{json, Value};

use crate::exit::CliError;

/// How to report: JSON or text, and how much.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// JSON instead of text.
    pub json: bool,
    /// Report progress, not only results and problems.
    pub verbose: bool,
}

impl Output {
    /// An event of `run` (or a problem of any command): one JSON line on stderr with
    /// `--json`; otherwise `text` on stderr when `always` or in verbose mode.
    pub fn event(&self, always: bool, event: &Value, text: impl FnOnce() -> String) {
        if self.json {
            write_line(&mut std::io::stderr().lock(), &event.to_string());
        } else if always || self.verbose {
            write_line(
                &mut std::io::stderr().lock(),
                &format!("quorumlock: {}", text()),
            );
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

    /// The result of `status` or `release`: JSON or text on stdout.
    pub fn result(&self, value: &Value, text: impl FnOnce() -> String) {
        let line = if self.json { value.to_string() } else { text() };
        write_line(&mut std::io::stdout().lock(), &line);
    }

    /// The error that ends the program, on stderr.
    pub fn error(&self, error: &CliError) {
        let line = if self.json {
            error_json(error).to_string()
        } else {
            format!("quorumlock: error: {error}")
        };
        write_line(&mut std::io::stderr().lock(), &line);
    }
}

/// An error as a JSON event.
pub fn error_json(error: &CliError) -> Value {
    json!({
        "event": "error",
        "kind": error.kind.name(),
        "exit_code": error.code(),
        "message": error.message,
        "hint": error.hint,
    })
}

/// Writes one line; a closed stream (a reader that went away) is not worth failing over.
fn write_line(stream: &mut impl Write, line: &str) {
    let _ = writeln!(stream, "{line}");
    let _ = stream.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Kind;

    #[test]
    fn errors_as_json_carry_kind_code_and_hint() {
        let error = CliError::new(Kind::Config, "no nodes given").hint("pass --nodes");
        let value = error_json(&error);
        assert_eq!(value["event"], "error");
        assert_eq!(value["kind"], "config");
        assert_eq!(value["exit_code"], 78);
        assert_eq!(value["message"], "no nodes given");
        assert_eq!(value["hint"], "pass --nodes");
    }
}
