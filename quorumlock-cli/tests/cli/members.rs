//! Members that cannot serve the lock: alone, or too many of them, a configuration error
//! (78) that names the real cause; one of five, a warning while `run` goes on.

use crate::support::{bare, cluster, code, output, stderr, NODE_TIMEOUT};

/// `run -r members -- true` on `nodes`, with a short connect timeout.
async fn run_on(nodes: &str, extra: &[&str]) -> std::process::Output {
    output(
        bare()
            .args(["--nodes", nodes, "--node-timeout", NODE_TIMEOUT])
            .args(["--connect-timeout", "500ms"])
            .args(extra)
            .args(["run", "-r", "members", "--", "true"]),
    )
    .await
}

#[tokio::test]
async fn a_misconfigured_node_is_a_configuration_error_naming_the_cause() {
    let cluster = cluster(1).await;
    let address = cluster.node(0).address();
    for (url, cause) in [
        (
            format!("redis://{address}/99"),
            "database 99 does not exist",
        ),
        (
            format!("redis+cluster://{address}"),
            "not a Redis Cluster node",
        ),
        (
            format!("redis+sentinel://{address}/mymaster"),
            "not a Redis Sentinel",
        ),
        (format!("rediss://{address}"), "does not speak TLS"),
    ] {
        let run = run_on(&url, &[]).await;
        assert_eq!(code(&run), 78, "{url}: {}", stderr(&run));
        assert!(stderr(&run).contains(cause), "{url}: {}", stderr(&run));
    }
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_is_refused_before_connecting() {
    let dir = std::env::temp_dir().join(format!("quorumlock-cli-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("not-a-ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    // No server at all: the file is refused before any connection is tried.
    let run = run_on("rediss://127.0.0.1:1", &["--tls-ca", ca.to_str().unwrap()]).await;
    assert_eq!(code(&run), 78, "{}", stderr(&run));
    assert!(
        stderr(&run).contains("no certificate in"),
        "{}",
        stderr(&run)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A replica among five members: `run` takes the lock on the four masters, and says which
/// member counts as failed and why.
#[tokio::test]
async fn a_replica_of_five_members_is_named_and_the_run_goes_on() {
    let cluster = cluster(5).await;
    let master = cluster.node(0).port().to_string();
    let client = cluster.node(4).client().unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&master)
        .query_async(&mut connection)
        .await
        .unwrap();
    let nodes = cluster.urls().join(",");
    let run = run_on(&nodes, &[]).await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    assert!(
        stderr(&run).contains(&cluster.node(4).url()) && stderr(&run).contains("replica"),
        "{}",
        stderr(&run)
    );
    // status does not count the replica's copy of a key as a vote, and says why.
    let status = output(bare().args(["--nodes", &nodes, "--json", "status", "members"])).await;
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let replica = &report["nodes"][4];
    assert_eq!(replica["state"], "failed", "{report}");
    assert!(
        replica["error"]
            .as_str()
            .unwrap()
            .contains("refused: a replica"),
        "{report}"
    );
}

/// `status` samples each clock twice: a node whose clock runs three times fast is shown as
/// abstaining, not as a vote.
#[tokio::test]
async fn status_shows_a_node_whose_clock_runs_fast_as_abstaining() {
    let options = quorumlock_testkit::NodeOptions::default().with_fake_clock("+0 x3");
    let cluster = quorumlock_testkit::RedisCluster::start_with(1, options)
        .await
        .expect("redis-server under libfaketime (apt-get install faketime gcc)");
    let status =
        output(bare().args(["--nodes", &cluster.urls()[0], "--json", "status", "k"])).await;
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let node = &report["nodes"][0];
    assert_eq!(node["state"], "failed", "{report}");
    assert!(
        node["error"].as_str().unwrap().contains("clock"),
        "{report}"
    );
}
