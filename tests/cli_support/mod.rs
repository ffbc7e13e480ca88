//! What the CLI tests share: the binary under test, and running it to completion.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::Output;
use std::time::Duration;

use tokio::process::Command;

/// The `quorumlock` binary built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

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
