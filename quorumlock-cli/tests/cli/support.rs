//! What the CLI tests share: the binary under test, started with none of the caller's
//! settings (or with a cluster's nodes), and run to completion or in the background with
//! its JSON events read.

use std::process::{Output, Stdio};
use std::time::Duration;

use quorumlock_testkit::RedisCluster;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

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

/// `n` local redis-server nodes.
pub async fn cluster(n: usize) -> RedisCluster {
    RedisCluster::start(n).await.expect("redis-server nodes")
}

/// `quorumlock` with the nodes of `cluster` in QUORUMLOCK_NODES and nothing else from the
/// caller's environment that could change its behaviour.
pub fn quorumlock(cluster: &RedisCluster) -> Command {
    let mut command = bare();
    command.env("QUORUMLOCK_NODES", cluster.urls().join(","));
    command
}

/// A well-formed token (32 hex digits, as `release --token` requires) that no lock holds:
/// another owner's, for the releases that must not delete anything.
pub const FOREIGN_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The per-node timeout (`--node-timeout`) of most tests here: well above the 50 ms
/// default, so that a machine loaded by parallel builds does not turn slow answers into
/// failed nodes.
pub const NODE_TIMEOUT: &str = "250ms";

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

/// The JSON lines of a `--json` invocation's stderr.
pub fn events(output: &Output) -> Vec<Value> {
    stderr(output).lines().map(parse).collect()
}

/// The first event called `name`.
pub fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {events:?}"))
}

/// `quorumlock` running in the background, its JSON events read from stderr as they come.
pub struct Background {
    pub child: Child,
    events: Lines<BufReader<ChildStderr>>,
}

impl Background {
    /// Starts `command` with stderr piped for its events; its stdout is discarded.
    pub fn start(command: &mut Command) -> Self {
        Self::with_stdout(command, Stdio::null())
    }

    /// As [`start`](Self::start), with stdout piped for the caller to read from `child`.
    pub fn reading_stdout(command: &mut Command) -> Self {
        Self::with_stdout(command, Stdio::piped())
    }

    fn with_stdout(command: &mut Command, stdout: Stdio) -> Self {
        let mut child = command
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("quorumlock could not be started");
        let stderr = child.stderr.take().expect("piped stderr");
        Background {
            child,
            events: BufReader::new(stderr).lines(),
        }
    }

    /// The next JSON event on its stderr.
    pub async fn next_event(&mut self) -> Value {
        let line = tokio::time::timeout(LIMIT, self.events.next_line())
            .await
            .expect("no event in time")
            .expect("stderr readable")
            .expect("stderr still open");
        parse(&line)
    }

    /// Waits for the `acquired` event of a `run --json` and returns the token.
    pub async fn token(&mut self) -> String {
        let acquired = self.next_event().await;
        assert_eq!(acquired["event"], "acquired", "{acquired}");
        acquired["token"].as_str().expect("token").to_owned()
    }

    /// Sends signal `name` (`TERM`, `INT`, ...) to the process.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
    }

    /// Waits for the end of one started with [`reading_stdout`](Self::reading_stdout);
    /// returns the exit code, the JSON document on stdout and the remaining events.
    pub async fn report(mut self) -> (i32, Value, Vec<Value>) {
        let mut stdout = String::new();
        let mut pipe = self.child.stdout.take().expect("piped stdout");
        tokio::time::timeout(LIMIT, pipe.read_to_string(&mut stdout))
            .await
            .expect("stdout closed in time")
            .expect("stdout readable");
        let (code, events) = self.finish().await;
        (code, parse(&stdout), events)
    }

    /// Waits for the process to end; returns its exit code and its remaining events.
    pub async fn finish(mut self) -> (i32, Vec<Value>) {
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(LIMIT, self.events.next_line())
            .await
            .expect("stderr closed in time")
            .expect("stderr readable")
        {
            rest.push(parse(&line));
        }
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("exited in time")
            .expect("waited");
        (status.code().expect("exited, not killed"), rest)
    }
}

/// One line of JSON, or a failure that shows the line.
pub fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}
