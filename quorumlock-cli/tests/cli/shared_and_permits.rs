//! `quorumlock run --shared` and `--permits K`, and what `quorumlock status` shows of them,
//! against real redis-server nodes: shared runs run together and exclude the plain runs,
//! at most K runs with permits run at once.

use quorumlock_testkit::RedisCluster;

use crate::support::{cluster, code, output, quorumlock, stderr, stdout, Background};

/// A `run --json` of `sleep 30` holding `resource` with `extra`, once it has the lock.
async fn holding(cluster: &RedisCluster, resource: &str, extra: &[&str]) -> Background {
    let mut holder = Background::start(
        quorumlock(cluster)
            .args(["run", "--json", "-r", resource])
            .args(extra)
            .args(["--", "sleep", "30"]),
    );
    holder.token().await;
    holder
}

/// The exit code of a `run --no-wait` of `true` on `resource` with `extra`.
async fn try_run(cluster: &RedisCluster, resource: &str, extra: &[&str]) -> i32 {
    let out = output(
        quorumlock(cluster)
            .args(["run", "--no-wait", "-r", resource])
            .args(extra)
            .args(["--", "true"]),
    )
    .await;
    code(&out)
}

#[tokio::test]
async fn shared_runs_run_together_and_exclude_plain_runs() {
    let cluster = cluster(3).await;
    let mut reader = holding(&cluster, "catalog", &["--shared"]).await;
    assert_eq!(
        try_run(&cluster, "catalog", &["--shared"]).await,
        0,
        "shared with shared"
    );
    // flock's -s, as the README says run takes it.
    assert_eq!(
        try_run(&cluster, "catalog", &["-s"]).await,
        0,
        "-s is --shared"
    );
    assert_eq!(
        try_run(&cluster, "catalog", &[]).await,
        75,
        "a plain run waits for readers"
    );

    let status = output(quorumlock(&cluster).args(["status", "catalog"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let text = stdout(&status);
    assert!(text.contains("readers: 1 holding"), "{text}");
    // The verdict line does not call a name its readers hold free.
    assert!(
        text.contains("\nheld by 1 reader(s); no exclusive holder\n"),
        "{text}"
    );
    assert!(!text.lines().any(|line| line.starts_with("free")), "{text}");
    let json = output(quorumlock(&cluster).args(["status", "catalog", "--json"])).await;
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["readers"]["holding"], 1, "{report}");
    assert_eq!(report["verdict"], "free", "no writer: {report}");
    reader.child.kill().await.unwrap();

    let mut writer = holding(&cluster, "report", &[]).await;
    assert_eq!(
        try_run(&cluster, "report", &["--shared"]).await,
        75,
        "no reader beside a writer"
    );
    writer.child.kill().await.unwrap();
}

#[tokio::test]
async fn at_most_k_runs_with_permits_and_status_shows_them() {
    let cluster = cluster(3).await;
    let mut first = holding(&cluster, "uploads", &["--permits", "2"]).await;
    let mut second = holding(&cluster, "uploads", &["--permits", "2"]).await;
    assert_eq!(try_run(&cluster, "uploads", &["--permits", "2"]).await, 75);

    let status = output(quorumlock(&cluster).args(["status", "uploads", "--permits", "2"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    assert!(
        stdout(&status).contains("permits: 2 of 2 in use"),
        "{}",
        stdout(&status)
    );
    assert!(
        stdout(&status).contains("\nheld by 2 of 2 permits; no exclusive holder\n"),
        "{}",
        stdout(&status)
    );
    // Without --permits the slots are not found, and the verdict says they were not read.
    let unread = output(quorumlock(&cluster).args(["status", "uploads"])).await;
    assert!(
        stdout(&unread).contains("permits are read with --permits K"),
        "{}",
        stdout(&unread)
    );
    let json =
        output(quorumlock(&cluster).args(["status", "uploads", "--permits", "2", "--json"])).await;
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["permits"]["in_use"], 2, "{report}");

    first.child.kill().await.unwrap();
    second.child.kill().await.unwrap();
    let bad =
        output(quorumlock(&cluster).args(["run", "--permits", "0", "-r", "x", "--", "true"])).await;
    assert_eq!(code(&bad), 64, "{}", stderr(&bad));
    let both = output(quorumlock(&cluster).args([
        "run",
        "--shared",
        "--permits",
        "2",
        "-r",
        "x",
        "--",
        "true",
    ]))
    .await;
    assert_eq!(code(&both), 64, "{}", stderr(&both));
}

/// Issue #29: a name is one lock. While `run --permits 2` holds a permit, a plain run is
/// contention (75, as beside readers), and `--permits 3` is a mismatch of the name's K
/// (78, naming the mode the name is held in); neither runs its command.
#[tokio::test]
async fn permits_of_another_k_and_a_plain_run_do_not_run_beside_a_permit() {
    let cluster = cluster(3).await;
    let mut holder = holding(&cluster, "n", &["--permits", "2"]).await;

    let plain =
        output(quorumlock(&cluster).args(["run", "--no-wait", "-r", "n", "--", "echo", "ran"]))
            .await;
    assert_eq!(code(&plain), 75, "{}", stderr(&plain));
    assert!(!stdout(&plain).contains("ran"), "{}", stdout(&plain));

    let three = output(quorumlock(&cluster).args([
        "run",
        "--permits",
        "3",
        "-r",
        "n",
        "--",
        "echo",
        "ran",
    ]))
    .await;
    assert_eq!(code(&three), 78, "{}", stderr(&three));
    assert!(!stdout(&three).contains("ran"), "{}", stdout(&three));
    let message = stderr(&three);
    assert!(
        message.contains("held as a semaphore of 2 permits"),
        "{message}"
    );
    assert!(message.contains("--permits K"), "the hint: {message}");
    holder.child.kill().await.unwrap();
}
