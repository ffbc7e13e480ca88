//! `quorumlock bench` run as a user would, against real redis-server nodes: the report's
//! figures, a slow node named, a frozen node survived, Ctrl-C cleaned up, `--json`, the
//! refusals, and no key left behind on any node.

use std::process::Output;
use std::time::Duration;

use quorumlock_testkit::{Direction, ProxiedCluster, RedisCluster};
use serde_json::Value;
use tokio::process::Command;

use crate::support::{bare, code, events, output, stderr, stdout, Background, NODE_TIMEOUT};

/// `quorumlock bench` on `urls`, with nothing from the caller's environment that could
/// change its behaviour.
fn bench(urls: &[String]) -> Command {
    let mut command = bare();
    command
        .env("QUORUMLOCK_NODES", urls.join(","))
        .args(["bench", "--node-timeout", NODE_TIMEOUT]);
    command
}

/// The `--json` report on stdout.
fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}, stderr {:?}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Every key on every running node.
async fn keys_left(cluster: &RedisCluster) -> Vec<String> {
    cluster
        .keys_on_running("*")
        .await
        .expect("list keys")
        .into_iter()
        .flatten()
        .collect()
}

fn ms(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// Waits for the event of a `bench --json` in the background that says the run has begun.
async fn started(run: &mut Background) {
    let event = run.next_event().await;
    assert_eq!(event["event"], "bench_started", "{event}");
}

#[tokio::test]
async fn a_run_on_five_nodes_prints_every_figure_and_leaves_no_key() {
    let cluster = RedisCluster::start(5).await.unwrap();
    let out = output(bench(&cluster.urls()).args(["--concurrency", "1,4", "--ops", "300"])).await;
    let (text, errors) = (stdout(&out), stderr(&out));
    assert_eq!(code(&out), 0, "{text}\n{errors}");

    // The prefix is printed before anything is created, and again in the report.
    let prefix_line = errors.lines().next().expect("a first line on stderr");
    assert!(
        prefix_line.contains("keys under prefix \"quorumlock-bench:"),
        "{errors}"
    );
    // Per node: every node, with PING and lock round trips, failures and quorum shares.
    for url in cluster.urls() {
        let row = text
            .lines()
            .find(|line| line.trim_start().starts_with(&url))
            .unwrap_or_else(|| panic!("no row for {url}:\n{text}"));
        assert!(row.ends_with('%'), "no decided share: {row}");
    }
    for figure in [
        "ping p50",
        "lock p50",
        "errors",
        "timeouts",
        "decided",
        "slowest node:",
    ] {
        assert!(text.contains(figure), "{figure} missing:\n{text}");
    }
    // Per operation: one row per level, with percentiles to p99.9, throughput, attempts
    // and validity lost, then a histogram per level.
    for figure in [
        "cycles/s", "p90", "p99.9", "max", "attempts", "lost p50", "lost max",
    ] {
        assert!(text.contains(figure), "{figure} missing:\n{text}");
    }
    let rows: Vec<&str> = text
        .lines()
        .filter(|line| line.trim_start().starts_with("1 ") || line.trim_start().starts_with("4 "))
        .collect();
    assert_eq!(rows.len(), 2, "one row per level:\n{text}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1], "300", "every cycle completed: {row}");
        assert_eq!(
            cells[8], "1.00",
            "one attempt per uncontended acquisition: {row}"
        );
        // The TTL is 10 s, so the drift allowance alone is 102 ms.
        assert!(cells[9].starts_with("10"), "validity lost: {row}");
    }
    assert_eq!(text.matches("Cycle latency, ").count(), 2, "{text}");
    assert!(text.contains('#'), "a histogram is drawn:\n{text}");
    assert!(text.contains("none left on any node"), "{text}");

    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}

#[tokio::test]
async fn json_has_the_documented_fields_and_a_contended_run_leaves_no_key() {
    let cluster = RedisCluster::start(3).await.unwrap();
    let out = output(bench(&cluster.urls()).args([
        "--json",
        "--contended",
        "--concurrency",
        "4",
        "--ops",
        "200",
        "--ttl",
        "5s",
    ]))
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Every stderr line is a JSON event; the first names the prefix.
    let events = events(&out);
    assert_eq!(events[0]["event"], "bench_started");
    let report = report(&out);
    let prefix = report["key_prefix"].as_str().unwrap();
    assert!(prefix.starts_with("quorumlock-bench:"), "{prefix}");
    assert_eq!(events[0]["key_prefix"], prefix);
    assert_eq!(report["node_count"], 3);
    assert_eq!(report["quorum"], 2);
    assert_eq!(report["settings"]["ttl_ms"], 5000);
    assert_eq!(report["settings"]["node_timeout_ms"], 250);
    assert_eq!(report["settings"]["drift_allowance_ms"], 52.0);
    assert_eq!(report["settings"]["fair"], true);
    assert_eq!(report["settings"]["contended"], true);
    assert_eq!(report["settings"]["concurrency"], serde_json::json!([4]));
    assert_eq!(report["settings"]["ops"], 200);
    assert!(report["probe_rounds"].as_u64().unwrap() >= 10);

    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let mut decided = 0;
    for (node, url) in nodes.iter().zip(cluster.urls()) {
        assert_eq!(node["node"], url.as_str());
        for what in ["ping", "lock"] {
            for field in ["p50_ms", "p99_ms", "max_ms", "mean_ms"] {
                assert!(ms(&node[what][field]) > 0.0, "{what}.{field}: {node}");
            }
            assert!(node[what]["count"].as_u64().unwrap() >= 10, "{node}");
        }
        assert_eq!(node["errors"], 0, "{node}");
        assert_eq!(node["timeouts"], 0, "{node}");
        decided += node["quorum_decided"].as_u64().unwrap();
        let share = ms(&node["quorum_decided_share"]);
        assert!((0.0..=1.0).contains(&share), "{node}");
    }
    assert_eq!(decided, report["probe_rounds"].as_u64().unwrap());
    assert!(report["slowest_node"].is_string());

    let level = &report["levels"][0];
    assert_eq!(level["concurrency"], 4);
    assert_eq!(level["cycles"], 200);
    assert_eq!(level["failed"], 0);
    assert!(ms(&level["cycles_per_sec"]) > 0.0);
    assert!(level["elapsed_ms"].is_u64());
    for field in ["p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms"] {
        assert!(ms(&level["cycle"][field]) > 0.0, "cycle.{field}: {level}");
        assert!(
            ms(&level["acquire"][field]) > 0.0,
            "acquire.{field}: {level}"
        );
    }
    assert!(ms(&level["release"]["p50_ms"]) > 0.0);
    assert!(ms(&level["validity_lost"]["p50_ms"]) >= 52.0, "{level}");
    // Waiters wake on releases and try again: more than one round per acquisition.
    assert!(ms(&level["attempts_per_acquisition"]) > 1.0, "{level}");
    // Each cycle got the lock from the nodes or, passed by a task of the same process, with
    // no round trip (cohorts).
    let rounds = &level["lock_rounds"];
    let got = rounds["acquired"].as_u64().unwrap() + rounds["passed"].as_u64().unwrap();
    assert_eq!(got, 200, "{level}");
    let least = level["fairness"]["least_served"].as_u64().unwrap();
    let most = level["fairness"]["most_served"].as_u64().unwrap();
    assert!(least > 0 && least <= most && most < 200, "{level}");
    assert_eq!(report["cleanup"]["clean"], true);
    assert_eq!(report["interrupted"], Value::Null);
    assert_eq!(report["exit_code"], 0);

    // Waiters queued on the nodes: their queue keys are gone too.
    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}

/// The latency added to the slow node's replies.
const SLOW: Duration = Duration::from_millis(100);

// The proxies forward on the test's runtime: two threads keep their own delay out of the
// healthy nodes' figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_is_named_and_the_quorum_does_not_wait_for_it() {
    let cluster = ProxiedCluster::start(5).await.unwrap();
    let slow = 2;
    // Far above what a loaded machine adds to a fast node's round trip (10 to 20 ms seen
    // under `stress-ng --cpu 2`), so that the cycle's bound below has room.
    cluster
        .proxy(slow)
        .set_latency(Direction::ToClient, SLOW, Duration::ZERO);
    let out =
        output(bench(&cluster.urls()).args(["--json", "--concurrency", "2", "--ops", "200"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = report(&out);
    let slow_url = &cluster.urls()[slow];
    assert_eq!(report["slowest_node"], slow_url.as_str(), "{report}");
    let node = &report["nodes"][slow];
    // Two round trips (SET NX PX, then the release), each late by the latency.
    let late = SLOW.as_secs_f64() * 1000.0;
    let slow_lock = ms(&node["lock"]["p50_ms"]);
    assert!(slow_lock >= 2.0 * late, "{node}");
    assert!(ms(&node["ping"]["p50_ms"]) >= late, "{node}");
    assert_eq!(
        node["quorum_decided"], 0,
        "a quorum never waits for it: {report}"
    );
    // Each of the cycle's two rounds is decided by the three fastest nodes: a cycle that
    // waited for the slow node in either would take the latency added at least.
    let cycle = ms(&report["levels"][0]["cycle"]["p50_ms"]);
    assert!(cycle < late, "cycle p50 {cycle} ms:\n{report}");
    let fast: Vec<f64> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != slow)
        .map(|(_, node)| ms(&node["lock"]["p50_ms"]))
        .collect();
    assert!(
        fast.iter().all(|&lock| lock < slow_lock / 2.0),
        "{fast:?} vs {slow_lock}"
    );
}

#[tokio::test]
async fn a_frozen_node_shows_timeouts_and_the_run_completes() {
    let mut cluster = RedisCluster::start(5).await.unwrap();
    let frozen = 4;
    let mut run = Background::reading_stdout(bench(&cluster.urls()).args([
        "--json",
        "--concurrency",
        "2",
        "--duration",
        "1200ms",
    ]));
    started(&mut run).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.node_mut(frozen).freeze().await.unwrap();
    let (code, report, events) = run.report().await;
    cluster.node_mut(frozen).thaw().await.unwrap();

    assert_eq!(code, 0, "{report}\n{events:?}");
    let url = &cluster.urls()[frozen];
    let node = &report["nodes"][frozen];
    assert!(node["timeouts"].as_u64().unwrap() > 0, "{node}");
    assert!(
        node["last_error"].as_str().unwrap().contains("timed out"),
        "{node}"
    );
    for (i, other) in report["nodes"].as_array().unwrap().iter().enumerate() {
        if i != frozen {
            assert_eq!(other["timeouts"], 0, "{other}");
        }
    }
    // The lock went on with the four others (its rounds leave the frozen node's answers
    // unawaited once a quorum decided, so the probes are what name it).
    let level = &report["levels"][0];
    assert!(level["cycles"].as_u64().unwrap() > 0, "{level}");
    assert_eq!(level["failed"], 0, "{level}");
    // The frozen node could not be cleaned: said so, and nothing was left on the others.
    assert_eq!(report["cleanup"]["unchecked"][0]["node"], url.as_str());
    assert!(
        events
            .iter()
            .any(|event| event["event"] == "warning" && event["node"] == url.as_str()),
        "{events:?}"
    );
    let mut left = cluster.keys("*").await.unwrap();
    left.remove(frozen);
    assert!(left.iter().all(Vec::is_empty), "{left:?}");
}

#[tokio::test]
async fn a_node_lost_mid_run_is_reported_not_fatal() {
    let mut cluster = RedisCluster::start(3).await.unwrap();
    let lost = 0;
    let mut run = Background::reading_stdout(bench(&cluster.urls()).args([
        "--json",
        "--concurrency",
        "2",
        "--duration",
        "1s",
    ]));
    started(&mut run).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.node_mut(lost).kill().await.unwrap();
    let (code, report, events) = run.report().await;

    // Two of three still make a quorum: the run completes, and names the node it lost.
    assert_eq!(code, 0, "{report}\n{events:?}");
    let node = &report["nodes"][lost];
    let failures = node["errors"].as_u64().unwrap() + node["timeouts"].as_u64().unwrap();
    assert!(failures > 0, "{node}");
    assert!(node["last_error"].is_string(), "{node}");
    assert_eq!(report["levels"][0]["failed"], 0, "{report}");
    assert_eq!(
        report["cleanup"]["unchecked"][0]["node"],
        cluster.urls()[lost].as_str()
    );
    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}

#[tokio::test]
async fn ctrl_c_mid_run_leaves_no_key() {
    let cluster = RedisCluster::start(3).await.unwrap();
    // Contended, so that waiters are queued on the nodes when the signal comes.
    let mut run = Background::reading_stdout(bench(&cluster.urls()).args([
        "--json",
        "--contended",
        "--concurrency",
        "8",
        "--duration",
        "20s",
    ]));
    started(&mut run).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    run.signal("INT");
    let (code, report, _) = run.report().await;
    assert_eq!(code, 130, "{report}");
    assert_eq!(report["interrupted"], "SIGINT");
    assert_eq!(report["exit_code"], 130);
    assert!(
        report["levels"][0]["cycles"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["cleanup"]["clean"], true, "{report}");
    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}

#[tokio::test]
async fn existing_keys_of_the_prefix_are_refused_then_left_alone_with_force() {
    let cluster = RedisCluster::start(3).await.unwrap();
    let theirs = "quorumlock-bench:fixed:t0";
    cluster
        .node(1)
        .set(theirs, "not ours", None)
        .await
        .expect("set a key");
    let args = ["--run-id", "fixed", "--ops", "20"];

    let out = output(bench(&cluster.urls()).args(args)).await;
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert!(stderr(&out).contains(theirs), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());

    let out = output(bench(&cluster.urls()).args(args).arg("--force")).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        cluster.node(1).get(theirs).await.unwrap().as_deref(),
        Some("not ours")
    );
    let left: Vec<Vec<String>> = cluster.keys("*").await.unwrap();
    assert_eq!(left, [vec![], vec![theirs.to_owned()], vec![]]);
}

#[tokio::test]
async fn bad_input_gets_the_documented_exit_codes() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let urls = cluster.urls();
    for (args, expected, says) in [
        (&["--rate", "0"][..], 64, "above 0"),
        (&["--concurrency", "0"][..], 64, "--concurrency"),
        (&["--concurrency", "1,0"][..], 64, "--concurrency"),
        (&["--ops", "0"][..], 64, "--ops"),
        (&["--run-id", "a*b"][..], 64, "--run-id"),
        (&["--ttl", "100ms"][..], 78, "--node-timeout"),
    ] {
        let out = output(bench(&urls).args(args)).await;
        assert_eq!(code(&out), expected, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }

    let out = output(bench(&[]).args(["--ops", "1"])).await;
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert!(stderr(&out).contains("no nodes"), "{}", stderr(&out));

    // A port nobody listens on: the node is named, and nothing runs.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("redis://{}", free.local_addr().unwrap());
    drop(free);
    let out = output(bench(&[urls[0].clone(), down.clone()]).args(["--ops", "1"])).await;
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains(&down), "{}", stderr(&out));
    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}

#[tokio::test]
async fn plot_draws_a_png_and_rate_caps_the_load() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("latency.png");
    let started = std::time::Instant::now();
    let out = output(bench(&cluster.urls()).args([
        "--json",
        "--ops",
        "20",
        "--rate",
        "40",
        "--plot",
        png.to_str().unwrap(),
    ]))
    .await;
    let font = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ]
    .iter()
    .any(|path| std::path::Path::new(path).exists());
    if !font {
        // Refused before it ran, with what to install (.ci/run installs a font).
        assert_eq!(code(&out), 78, "{}", stderr(&out));
        assert!(stderr(&out).contains("QUORUMLOCK_FONT"), "{}", stderr(&out));
        return;
    }
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = report(&out);
    // 20 cycles at 40/s: the last starts 475 ms after the first.
    let level = &report["levels"][0];
    assert!(level["elapsed_ms"].as_u64().unwrap() >= 450, "{level}");
    assert!(ms(&level["cycles_per_sec"]) <= 45.0, "{level}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let bytes = std::fs::read(&png).expect("the plot was written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(keys_left(&cluster).await, Vec::<String>::new());
}
