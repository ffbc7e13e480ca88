//! The `quorumlock` binary, run as a user would against real redis-server nodes: mutual
//! exclusion between concurrent `run`s, exit codes, lost-lock handling, `status`,
//! `release` and `--help`.
#![cfg(feature = "cli")]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock::testkit::RedisCluster;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// The per-node timeout of the `run`s here: well above the 50 ms default, so that a
/// machine loaded by parallel builds does not turn slow answers into failed nodes (the
/// lost-lock tests, with a 1 s TTL, use 100 ms).
const RUN_NODE_TIMEOUT: &str = "250ms";

/// No single invocation in these tests should come near this.
const LIMIT: Duration = Duration::from_secs(30);

async fn cluster(n: usize) -> RedisCluster {
    RedisCluster::start(n).await.expect("redis-server nodes")
}

/// `quorumlock` with the nodes of `cluster` in QUORUMLOCK_NODES and nothing else from the
/// caller's environment that could change its behaviour.
fn quorumlock(cluster: &RedisCluster) -> Command {
    let mut command = bare();
    command.env("QUORUMLOCK_NODES", cluster.urls().join(","));
    command
}

/// `quorumlock` without nodes.
fn bare() -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("QUORUMLOCK_NODES")
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs to completion (bounded by [`LIMIT`]) and captures the output.
async fn output(command: &mut Command) -> Output {
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("quorumlock did not finish in time")
        .expect("quorumlock could not be started")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON lines of a `--json` run's stderr.
fn events(output: &Output) -> Vec<Value> {
    stderr(output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {events:?}"))
}

/// A `run --json` started in the background, with its stderr events readable as they come.
struct Background {
    child: Child,
    events: Lines<BufReader<ChildStderr>>,
}

impl Background {
    fn start(command: &mut Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
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
    async fn next_event(&mut self) -> Value {
        let line = tokio::time::timeout(LIMIT, self.events.next_line())
            .await
            .expect("no event in time")
            .expect("stderr readable")
            .expect("stderr still open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Waits for the `acquired` event and returns the token.
    async fn token(&mut self) -> String {
        let acquired = self.next_event().await;
        assert_eq!(acquired["event"], "acquired", "{acquired}");
        acquired["token"].as_str().expect("token").to_owned()
    }

    /// Waits for the process to end; returns its exit code and its remaining events.
    async fn finish(mut self) -> (i32, Vec<Value>) {
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(LIMIT, self.events.next_line())
            .await
            .expect("stderr closed in time")
            .expect("stderr readable")
        {
            rest.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")));
        }
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("exited in time")
            .expect("waited");
        (status.code().expect("exited, not killed"), rest)
    }
}

#[tokio::test]
async fn concurrent_runs_of_one_resource_never_overlap() {
    let cluster = cluster(3).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("intervals");
    let script = format!(
        "echo \"start $$ $(date +%s%N)\" >> {log}; sleep 0.3; echo \"end $$ $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let mut command = quorumlock(&cluster);
            command.args([
                "run",
                "--node-timeout",
                RUN_NODE_TIMEOUT,
                "--resource",
                "exclusive",
                "--wait",
                "10s",
                "--",
            ]);
            command.args(["sh", "-c", &script]);
            async move { output(&mut command).await }
        })
        .collect();
    let started = Instant::now();
    let outputs = futures::future::join_all(runs).await;
    for output in &outputs {
        assert_eq!(code(output), 0, "{}", stderr(output));
    }

    // One interval per run, from its start and end lines.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut intervals: HashMap<&str, (u128, u128)> = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [what, pid, nanos] = fields[..] else {
            panic!("bad line {line:?}")
        };
        let nanos: u128 = nanos.parse().unwrap();
        let interval = intervals.entry(pid).or_default();
        match what {
            "start" => interval.0 = nanos,
            "end" => interval.1 = nanos,
            _ => panic!("bad line {line:?}"),
        }
    }
    let mut intervals: Vec<(u128, u128)> = intervals.into_values().collect();
    assert_eq!(intervals.len(), 3, "{text}");
    intervals.sort();
    for pair in intervals.windows(2) {
        let ((_, end), (next_start, _)) = (pair[0], pair[1]);
        assert!(end <= next_start, "critical sections overlap:\n{text}");
    }
    for (start, end) in &intervals {
        assert!(end > start, "{text}");
    }
    // They ran one after the other, and each waited only for the previous one.
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn no_wait_on_a_held_lock_exits_75_and_signals_are_passed_on() {
    let cluster = cluster(3).await;
    let mut holder = Background::start(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "--json",
        "-r",
        "busy",
        "--",
        "sleep",
        "30",
    ]));
    holder.token().await;

    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let second = output(
        quorumlock(&cluster)
            .args([
                "run",
                "--node-timeout",
                RUN_NODE_TIMEOUT,
                "-r",
                "busy",
                "--no-wait",
                "--",
            ])
            .args([OsStr::new("touch"), marker.as_os_str()]),
    )
    .await;
    assert_eq!(code(&second), 75, "{}", stderr(&second));
    assert!(stderr(&second).contains("held by another owner"));
    assert!(stderr(&second).contains("--wait"), "says how to wait");
    assert!(!marker.exists(), "the command must not run");

    // A short --wait on a held lock also ends with 75.
    let waited = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "busy",
        "--wait",
        "500ms",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(code(&waited), 75, "{}", stderr(&waited));

    // SIGTERM to quorumlock reaches the command; the lock is released after it.
    let pid = holder.child.id().expect("running");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (code, events) = holder.finish().await;
    assert_eq!(code, 128 + 15, "{events:?}");
    assert_eq!(event(&events, "exit")["command_signal"], 15);
    assert_eq!(event(&events, "exit")["released"], true);
    for node in cluster.nodes() {
        assert_eq!(node.get("busy").await.unwrap(), None);
    }
}

#[tokio::test]
async fn no_reachable_quorum_exits_69_naming_the_nodes() {
    let mut cluster = cluster(3).await;
    let urls = cluster.urls();
    for i in 0..3 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let result = output(
        quorumlock(&cluster)
            .args(["run", "--node-timeout", RUN_NODE_TIMEOUT, "-r", "job", "--"])
            .args([OsStr::new("touch"), marker.as_os_str()]),
    )
    .await;
    assert_eq!(code(&result), 69, "{}", stderr(&result));
    let text = stderr(&result);
    assert!(text.contains("no quorum"), "{text}");
    assert!(
        urls.iter().any(|url| text.contains(url.as_str())),
        "names a node: {text}"
    );
    assert!(text.contains("hint:"), "{text}");
    assert!(!marker.exists());

    // The same as JSON, and with --wait: it retries until the wait is over, then 69.
    let started = Instant::now();
    let result = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "--json",
        "-r",
        "job",
        "--wait",
        "1s",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(code(&result), 69, "{}", stderr(&result));
    assert!(started.elapsed() >= Duration::from_millis(500));
    let events = events(&result);
    let error = event(&events, "error");
    assert_eq!(error["kind"], "unavailable");
    assert_eq!(error["exit_code"], 69);

    // status cannot tell either.
    let status = output(quorumlock(&cluster).args(["status", "job"])).await;
    assert_eq!(code(&status), 69, "{}", stderr(&status));
    assert!(stdout(&status).contains("unknown"), "{}", stdout(&status));
}

#[tokio::test]
async fn the_commands_status_is_the_exit_code() {
    let cluster = cluster(3).await;
    let result = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "job",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]))
    .await;
    assert_eq!(code(&result), 3, "{}", stderr(&result));

    let result = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "job",
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]))
    .await;
    assert_eq!(code(&result), 128 + 15, "{}", stderr(&result));

    let result = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "job",
        "--",
        "no-such-command-here",
    ]))
    .await;
    assert_eq!(code(&result), 127, "{}", stderr(&result));
    assert!(stderr(&result).contains("command not found"));

    // The command gets the lock's details; stdout is the command's alone.
    let result = output(quorumlock(&cluster).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "job",
        "--fencing",
        // The test nodes keep no append-only file, and none restarts here.
        "--fencing-on-volatile-nodes",
        "-v",
        "--",
        "sh",
        "-c",
        "echo $QUORUMLOCK_RESOURCE $QUORUMLOCK_TOKEN $QUORUMLOCK_FENCING_TOKEN",
    ]))
    .await;
    assert_eq!(code(&result), 0, "{}", stderr(&result));
    let seen: Vec<String> = stdout(&result)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], "job");
    assert!(
        stderr(&result).contains(&format!("token {}", seen[1])),
        "{}",
        stderr(&result)
    );
    assert!(seen[2].parse::<u64>().unwrap() >= 1);

    // Every run released the lock.
    for node in cluster.nodes() {
        assert_eq!(node.get("job").await.unwrap(), None);
    }

    // One node: a single-server lock, same behaviour.
    let result = output(bare().env("QUORUMLOCK_NODES", cluster.node(0).url()).args([
        "run",
        "--node-timeout",
        RUN_NODE_TIMEOUT,
        "-r",
        "solo",
        "--",
        "sh",
        "-c",
        "exit 4",
    ]))
    .await;
    assert_eq!(code(&result), 4, "{}", stderr(&result));
}

/// Starts `run --ttl 1s` of `command`, kills two of the three nodes once it holds the
/// lock, and returns the exit code, the events, and how long after the kill it ended.
async fn lose_the_lock(extra: &[&str], command: &[&str]) -> (i32, Vec<Value>, Duration) {
    let mut cluster = cluster(3).await;
    let mut run = quorumlock(&cluster);
    run.args([
        "run",
        "--node-timeout",
        "100ms",
        "--json",
        "-r",
        "fragile",
        "--ttl",
        "1s",
    ])
    .args(extra)
    .arg("--")
    .args(command);
    let mut holder = Background::start(&mut run);
    holder.token().await;
    cluster.node_mut(0).kill().await.unwrap();
    cluster.node_mut(1).kill().await.unwrap();
    let killed = Instant::now();
    let (code, events) = holder.finish().await;
    (code, events, killed.elapsed())
}

#[tokio::test]
async fn a_lost_lock_signals_the_command_and_exits_70() {
    let (code, events, took) = lose_the_lock(&[], &["sleep", "30"]).await;
    assert_eq!(code, 70, "{events:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let lost = event(&events, "lost");
    assert_eq!(lost["on_lost"], "SIGTERM");
    assert_eq!(event(&events, "signal")["signal"], "SIGTERM");
    let exit = event(&events, "exit");
    assert_eq!(exit["command_signal"], 15, "the command was terminated");
    assert_eq!(exit["lost"], true);
    assert_eq!(event(&events, "error")["kind"], "lost");
}

#[tokio::test]
async fn a_command_that_ignores_the_signal_is_killed_after_the_grace_period() {
    let (code, events, took) = lose_the_lock(
        &["--kill-after", "300ms"],
        &["sh", "-c", "trap '' TERM; exec sleep 30"],
    )
    .await;
    assert_eq!(code, 70, "{events:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let signals: Vec<&Value> = events
        .iter()
        .filter(|event| event["event"] == "signal")
        .map(|event| &event["signal"])
        .collect();
    assert_eq!(signals, ["SIGTERM", "SIGKILL"], "{events:?}");
    assert_eq!(event(&events, "exit")["command_signal"], 9);
}

#[tokio::test]
async fn status_shows_the_holder_and_release_frees_it_by_token() {
    let cluster = cluster(3).await;
    let status = output(quorumlock(&cluster).args(["status", "report"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    assert!(
        stdout(&status).trim_end().ends_with("free"),
        "{}",
        stdout(&status)
    );

    // Another process holds it, extending it every second.
    let mut holder = Background::start(quorumlock(&cluster).args([
        "run", "--json", "-r", "report", "--ttl", "3s", "--", "sleep", "30",
    ]));
    let token = holder.token().await;

    let status = output(quorumlock(&cluster).args(["status", "report"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let text = stdout(&status);
    assert!(
        text.contains(&format!("held by {token} on 3/3 nodes (quorum 2)")),
        "{text}"
    );
    for url in cluster.urls() {
        assert!(text.contains(&url), "{text}");
    }

    let status = output(quorumlock(&cluster).args(["status", "report", "--json"])).await;
    let report: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["verdict"], "held");
    assert_eq!(report["holder"], token.as_str());
    assert_eq!(report["holding_nodes"], 3);
    assert_eq!(report["agree"], true);
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for node in nodes {
        assert_eq!(node["state"], "held");
        let ttl = node["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 3000, "{node}");
    }

    // A wrong token touches nothing.
    let wrong =
        output(quorumlock(&cluster).args(["release", "report", "--token", "not-the-token"])).await;
    assert_eq!(code(&wrong), 1, "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).contains("does not hold"),
        "{}",
        stderr(&wrong)
    );
    for node in cluster.nodes() {
        assert_eq!(
            node.get("report").await.unwrap().as_deref(),
            Some(token.as_str())
        );
    }

    // The holder's token releases it on every node.
    let released =
        output(quorumlock(&cluster).args(["release", "report", "--token", &token, "--json"])).await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let result: Value = serde_json::from_slice(&released.stdout).unwrap();
    assert_eq!(result["released"], true);
    assert_eq!(result["deleted_nodes"], 3);
    let status = output(quorumlock(&cluster).args(["status", "report", "--json"])).await;
    let report: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["verdict"], "free");

    // The holder finds out at its next extension, stops its command, and says so.
    let (code, events) = holder.finish().await;
    assert_eq!(code, 70, "{events:?}");
    assert_eq!(event(&events, "exit")["command_signal"], 15);
}

#[tokio::test]
async fn help_usage_and_configuration_errors() {
    let help = output(bare().arg("--help")).await;
    assert_eq!(code(&help), 0);
    let text = stdout(&help);
    assert!(text.contains("Exit codes"), "{text}");
    for (code, meaning) in [
        ("64", "usage"),
        ("69", "no quorum"),
        ("70", "lost"),
        ("75", "held elsewhere"),
        ("78", "configuration"),
    ] {
        assert!(
            text.lines()
                .any(|line| line.trim_start().starts_with(code) && line.contains(meaning)),
            "{code} {meaning} missing from --help:\n{text}"
        );
    }
    assert!(text.contains("QUORUMLOCK_NODES"));
    let run_help = output(bare().args(["run", "--help"])).await;
    for option in [
        "--resource",
        "--ttl",
        "--wait",
        "--no-wait",
        "--on-lost",
        "--kill-after",
    ] {
        assert!(stdout(&run_help).contains(option), "{option}");
    }

    let usage = output(bare().args(["run", "-r", "job", "--ttl", "30", "--", "true"])).await;
    assert_eq!(code(&usage), 64);
    assert!(stderr(&usage).contains("30s"), "{}", stderr(&usage));
    let usage = output(bare().args([
        "run",
        "-r",
        "job",
        "--wait",
        "1s",
        "--no-wait",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(code(&usage), 64);

    let no_nodes = output(bare().args(["run", "-r", "job", "--", "true"])).await;
    assert_eq!(code(&no_nodes), 78);
    let text = stderr(&no_nodes);
    assert!(
        text.contains("--nodes") && text.contains("QUORUMLOCK_NODES"),
        "{text}"
    );

    let bad_url =
        output(bare().args(["--nodes", "redis://:hunter2@host:port", "status", "job"])).await;
    assert_eq!(code(&bad_url), 78);
    assert!(
        !stderr(&bad_url).contains("hunter2"),
        "{}",
        stderr(&bad_url)
    );
}
