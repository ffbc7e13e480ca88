//! What the CLI tests share: the binary under test, started with none of the caller's
//! settings, and run to completion.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::Command;

/// The `quorumlock` binary built for these tests.
const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// The environment variables `quorumlock` reads its settings from.
const SETTINGS: [&str; 7] = [
    "QUORUMLOCK_NODES",
    "QUORUMLOCK_KEY_PREFIX",
    "QUORUMLOCK_CONNECT_TIMEOUT",
    "QUORUMLOCK_TLS_CA",
    "QUORUMLOCK_TLS_CERT",
    "QUORUMLOCK_TLS_KEY",
    "QUORUMLOCK_TLS_INSECURE",
];

/// `quorumlock` with none of the caller's settings (no nodes: a test gives its own), no
/// standard input, and killed if the test drops it.
pub fn bare() -> Command {
    let mut command = Command::new(BIN);
    for name in SETTINGS {
        command.env_remove(name);
    }
    command.stdin(Stdio::null()).kill_on_drop(true);
    command
}

/// How long one invocation may take before the test fails: far above any run's own
/// timeouts, so that a hang is reported rather than waited out.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Runs to completion (bounded by [`LIMIT`]) and captures the output.
pub async fn output(command: &mut Command) -> Output {
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("quorumlock did not finish in time")
        .expect("quorumlock could not be started")
}

pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
