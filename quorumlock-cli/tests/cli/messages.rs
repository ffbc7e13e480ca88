//! What the errors say: each names the option or the environment variable the user set,
//! in the command line's words rather than the library's, with a hint for its cause; and
//! the usage line and `--help` show only what the user typed or can type.

use std::time::{Duration, Instant};

use crate::support::{bare, cluster, code, output, quorumlock, stderr, stdout, Background};

/// A node that nothing answers on: the errors below come before any connection.
const NOWHERE: &str = "redis://127.0.0.1:1";

/// The code and stderr of `run ARGS -r job -- true` with the global options `global`
/// and the variables `vars`.
async fn run_with(global: &[&str], args: &[&str], vars: &[(&str, &str)]) -> (i32, String) {
    let mut command = bare();
    command
        .envs(vars.iter().copied())
        .args(global)
        .arg("run")
        .args(args);
    let result = output(command.args(["-r", "job", "--", "true"])).await;
    (code(&result), stderr(&result))
}

#[tokio::test]
async fn each_invalid_setting_names_the_option_or_variable_with_its_own_hint() {
    let long_prefix = "p".repeat(300);
    let nowhere = ["--nodes", NOWHERE];
    // The global options, run's options, the variables set; what the error and its hint
    // say.
    type Case<'a> = (
        Vec<&'a str>,
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        &'a str,
        &'a str,
    );
    let cases: [Case<'_>; 5] = [
        (
            nowhere.to_vec(),
            &["-w", "1000000000"],
            &[],
            "-w/--wait 1000000000s is longer than the maximum",
            "a bare number is seconds",
        ),
        (
            [&nowhere[..], &["--key-prefix", &long_prefix]].concat(),
            &[],
            &[],
            "--key-prefix is 300 bytes long",
            "shorten the key prefix",
        ),
        (
            nowhere.to_vec(),
            &[],
            &[("QUORUMLOCK_KEY_PREFIX", &long_prefix)],
            "QUORUMLOCK_KEY_PREFIX is 300 bytes long",
            "shorten the key prefix",
        ),
        (
            nowhere.to_vec(),
            &["--connect-timeout", "0s"],
            &[],
            "--connect-timeout must be greater than zero",
            "one connection to a node",
        ),
        (
            nowhere.to_vec(),
            &[],
            &[("QUORUMLOCK_CONNECT_TIMEOUT", "0s")],
            "QUORUMLOCK_CONNECT_TIMEOUT must be greater than zero",
            "one connection to a node",
        ),
    ];
    for (global, args, vars, names, hint) in cases {
        let (code, text) = run_with(&global, args, vars).await;
        assert_eq!(code, 78, "{args:?}: {text}");
        assert!(text.contains(names), "{args:?} {vars:?}: {text}");
        let hint_line = text
            .lines()
            .find(|line| line.contains("hint:"))
            .unwrap_or_default();
        assert!(hint_line.contains(hint), "{args:?}: {text}");
        // The one hint every configuration error had, whatever was wrong.
        assert!(!text.contains("change --ttl or --node-timeout"), "{text}");
    }
}

#[tokio::test]
async fn the_fencing_refusal_names_the_command_line_option() {
    // A node that keeps no append-only file.
    let options = quorumlock_testkit::NodeOptions::default()
        .with_persistence(quorumlock_testkit::Persistence::None);
    let cluster = quorumlock_testkit::RedisCluster::start_with(1, options)
        .await
        .unwrap();
    let result =
        output(quorumlock(&cluster).args(["run", "--fencing", "-r", "job", "--", "true"])).await;
    let text = stderr(&result);
    assert_eq!(code(&result), 78, "{text}");
    assert!(text.contains("--fencing-on-volatile-nodes"), "{text}");
    assert!(!text.contains("::fencing_on_volatile_nodes"), "{text}");
    // The node list is not what is wrong.
    assert!(!text.contains("fix the node list"), "{text}");
    // Allowed, on a node this test just started (a fresh volatile node would abstain).
    let allowed = output(quorumlock(&cluster).args([
        "--no-restart-abstention",
        "run",
        "--fencing",
        "--fencing-on-volatile-nodes",
        "-r",
        "job",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(code(&allowed), 0, "{}", stderr(&allowed));
}

#[tokio::test]
async fn a_bad_variable_is_named_and_the_usage_line_lists_only_what_was_typed() {
    let from_env = output(
        bare()
            .env("QUORUMLOCK_NODES", "redis://127.0.0.1:1,localhost:6379")
            .args(["status", "job"]),
    )
    .await;
    let text = stderr(&from_env);
    assert_eq!(code(&from_env), 64, "{text}");
    assert!(
        text.contains("invalid value in QUORUMLOCK_NODES: `localhost:6379`"),
        "{text}"
    );
    assert!(!text.contains("--nodes <"), "{text}");

    // Settings from the environment are not arguments the user left out or typed.
    let usage = output(
        bare()
            .env("QUORUMLOCK_NODES", NOWHERE)
            .env("QUORUMLOCK_KEY_PREFIX", "locks:")
            .args(["run", "-r", "job"]),
    )
    .await;
    let text = stderr(&usage);
    assert_eq!(code(&usage), 64, "{text}");
    let line = text
        .lines()
        .find(|line| line.starts_with("Usage:"))
        .unwrap_or_default();
    assert!(
        line.contains("--resource") && line.contains("<COMMAND>"),
        "{text}"
    );
    assert!(
        !line.contains("--nodes") && !line.contains("--key-prefix"),
        "{text}"
    );

    // The help names each variable, and shows no value, set or not.
    let help = output(bare().env("QUORUMLOCK_TLS_CA", "").arg("--help")).await;
    let text = stdout(&help);
    assert!(text.contains("[env: QUORUMLOCK_TLS_CA]"), "{text}");
    assert!(!text.contains("=]"), "{text}");
}

#[tokio::test]
async fn a_node_list_with_spaces_is_told_to_use_commas() {
    for list in [
        "redis://127.0.0.1:6379 127.0.0.2:6379",
        "redis://127.0.0.1:6379 redis://127.0.0.2:6379",
    ] {
        for via_env in [false, true] {
            let mut command = bare();
            if via_env {
                command.env("QUORUMLOCK_NODES", list);
            } else {
                command.args(["--nodes", list]);
            }
            let result = output(command.args(["status", "job"])).await;
            let text = stderr(&result);
            assert_eq!(code(&result), 64, "{text}");
            assert!(text.contains("comma"), "{list}: {text}");
        }
    }
}

#[tokio::test]
async fn a_malformed_token_is_a_usage_error_before_any_node_is_asked() {
    for token in ["nothex", "3f9c0b1e", ""] {
        let result =
            output(bare().args(["--nodes", NOWHERE, "release", "job", "--token", token])).await;
        let text = stderr(&result);
        assert_eq!(code(&result), 64, "{token:?}: {text}");
        assert!(text.contains("32 hex digits"), "{text}");
        assert!(!text.contains("Connection refused"), "{text}");
    }
}

#[tokio::test]
async fn a_wait_that_runs_out_says_how_long_it_waited() {
    let cluster = cluster(1).await;
    let mut holder = Background::start(
        quorumlock(&cluster).args(["run", "--json", "-r", "busy", "--", "sleep", "30"]),
    );
    holder.token().await;
    let started = Instant::now();
    let waited =
        output(quorumlock(&cluster).args(["run", "-w", "1", "-r", "busy", "--", "true"])).await;
    let text = stderr(&waited);
    assert_eq!(code(&waited), 75, "{text}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert!(text.contains("gave up after waiting 1s"), "{text}");
    assert!(text.contains("wait longer than -w 1s"), "{text}");
    assert!(!text.contains("pass --wait"), "{text}");
    // Without a wait, the hint is still to wait.
    let at_once = output(quorumlock(&cluster).args(["run", "-r", "busy", "--", "true"])).await;
    assert!(
        stderr(&at_once).contains("pass --wait"),
        "{}",
        stderr(&at_once)
    );
    holder.signal("TERM");
    holder.finish().await;
}
