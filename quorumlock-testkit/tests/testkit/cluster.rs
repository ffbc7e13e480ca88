//! The nodes: real redis-server processes, failure injection, clean-up.

use std::time::Duration;

use quorumlock_testkit::{NodeOptions, NodeState, Persistence, RedisCluster, TestkitError};

/// A connection with a short response timeout, for probing a node the way a lock client would.
async fn connection(
    url: &str,
    timeout: Duration,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Whether a process with this pid exists (zombies count as existing).
fn process_exists(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[tokio::test]
async fn three_nodes_serve_independent_data() {
    let cluster = RedisCluster::start(3).await.expect("cluster starts");
    assert_eq!(cluster.len(), 3);
    assert!(!cluster.is_empty());

    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(
            url,
            &format!("redis://127.0.0.1:{}", cluster.node(i).port())
        );
        assert_eq!(cluster.node(i).state(), NodeState::Running);
        assert!(cluster.node(i).pid().is_some());
    }
    let mut ports: Vec<u16> = cluster.nodes().iter().map(|n| n.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "distinct ports");

    for (i, node) in cluster.nodes().iter().enumerate() {
        node.set("tk:key", &format!("v{i}"), None).await.unwrap();
        node.set("tk:ttl", "x", Some(Duration::from_secs(10)))
            .await
            .unwrap();
    }
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(node.get("tk:key").await.unwrap(), Some(format!("v{i}")));
        assert_eq!(node.get("tk:missing").await.unwrap(), None);
        let pttl = node.pttl("tk:ttl").await.unwrap();
        assert!((9_000..=10_000).contains(&pttl), "pttl {pttl}");
        assert_eq!(node.pttl("tk:key").await.unwrap(), -1);
        assert_eq!(node.pttl("tk:missing").await.unwrap(), -2);
    }

    let keys = cluster.keys("tk:*").await.unwrap();
    assert_eq!(
        keys,
        vec![vec!["tk:key".to_owned(), "tk:ttl".to_owned()]; 3]
    );
    assert_eq!(
        cluster.keys("nope:*").await.unwrap(),
        vec![Vec::<String>::new(); 3]
    );

    cluster.node(1).flush().await.unwrap();
    assert_eq!(cluster.node(1).get("tk:key").await.unwrap(), None);
    assert_eq!(
        cluster.node(0).get("tk:key").await.unwrap().as_deref(),
        Some("v0")
    );

    cluster.flush_all().await.unwrap();
    assert_eq!(
        cluster.keys("*").await.unwrap(),
        vec![Vec::<String>::new(); 3]
    );
}

#[tokio::test]
async fn frozen_node_times_out_until_thawed() {
    let mut cluster = RedisCluster::start(3).await.unwrap();
    let url = cluster.node(1).url();
    cluster.node(1).set("k", "v", None).await.unwrap();
    let mut con = connection(&url, Duration::from_secs(2)).await.unwrap();

    cluster.node_mut(1).freeze().await.unwrap();
    assert_eq!(cluster.node(1).state(), NodeState::Frozen);

    let frozen_get = tokio::time::timeout(
        Duration::from_millis(200),
        redis::cmd("GET")
            .arg("k")
            .query_async::<Option<String>>(&mut con),
    )
    .await;
    assert!(
        frozen_get.is_err(),
        "GET on a frozen node must time out: {frozen_get:?}"
    );

    // Helpers refuse at once rather than hanging.
    let err = cluster.node(1).get("k").await.unwrap_err();
    assert!(
        matches!(
            err,
            TestkitError::NotRunning {
                state: NodeState::Frozen,
                ..
            }
        ),
        "{err}"
    );
    assert!(cluster.keys("*").await.is_err());
    let running = cluster.keys_on_running("*").await.unwrap();
    assert_eq!(running[1], Vec::<String>::new());
    // Other nodes are unaffected.
    cluster.node(0).set("k0", "v0", None).await.unwrap();

    cluster.node_mut(1).thaw().await.unwrap();
    assert_eq!(cluster.node(1).state(), NodeState::Running);
    assert_eq!(
        cluster.node(1).get("k").await.unwrap().as_deref(),
        Some("v")
    );
    let mut fresh = connection(&url, Duration::from_millis(500)).await.unwrap();
    let value: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut fresh)
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    assert_eq!(
        cluster.keys_on_running("k*").await.unwrap(),
        vec![vec!["k0".to_owned()], vec!["k".to_owned()], vec![]]
    );
}

#[tokio::test]
async fn killed_node_refuses_and_restarts_empty_on_same_port() {
    // Without persistence (the default keeps an append-only file, which a restart reloads).
    let options = NodeOptions::default().with_persistence(Persistence::None);
    let mut cluster = RedisCluster::start_with(3, options).await.unwrap();
    let node = cluster.node_mut(2);
    let port = node.port();
    let url = node.url();
    let old_pid = node.pid().unwrap();
    node.set("k", "v", None).await.unwrap();

    node.kill().await.unwrap();
    assert_eq!(node.state(), NodeState::Stopped);
    assert_eq!(node.pid(), None);
    assert!(!process_exists(old_pid));
    assert!(
        connection(&url, Duration::from_millis(500)).await.is_err(),
        "connection refused"
    );
    assert!(matches!(
        node.get("k").await,
        Err(TestkitError::NotRunning {
            state: NodeState::Stopped,
            ..
        })
    ));
    assert!(node.freeze().await.is_err());
    assert!(cluster.flush_all().await.is_err());
    assert_eq!(
        cluster.keys_on_running("*").await.unwrap()[2],
        Vec::<String>::new()
    );

    let node = cluster.node_mut(2);
    node.restart().await.unwrap();
    assert_eq!(node.state(), NodeState::Running);
    assert_eq!(node.port(), port);
    assert_eq!(node.url(), url);
    assert_ne!(node.pid(), Some(old_pid));
    let mut con = connection(&url, Duration::from_millis(500)).await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        node.get("k").await.unwrap(),
        None,
        "no persistence: data is lost"
    );

    // restart also works straight from running (and from frozen).
    node.set("k", "v", None).await.unwrap();
    node.freeze().await.unwrap();
    node.restart().await.unwrap();
    assert_eq!(node.port(), port);
    assert_eq!(node.get("k").await.unwrap(), None);
}

#[tokio::test]
async fn append_fsync_always_keeps_data_across_kill() {
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let mut cluster = RedisCluster::start_with(1, options).await.unwrap();
    let node = cluster.node_mut(0);
    node.set("durable", "yes", None).await.unwrap();
    node.set("durable:ttl", "yes", Some(Duration::from_secs(60)))
        .await
        .unwrap();
    node.kill().await.unwrap();
    node.restart().await.unwrap();
    assert_eq!(node.get("durable").await.unwrap().as_deref(), Some("yes"));
    assert!(node.pttl("durable:ttl").await.unwrap() > 50_000);
}

#[tokio::test]
async fn password_is_required() {
    let options = NodeOptions::default().with_password("s3cret/pw");
    let cluster = RedisCluster::start_with(2, options).await.unwrap();
    let node = cluster.node(0);
    assert_eq!(
        node.url(),
        format!("redis://:s3cret%2Fpw@127.0.0.1:{}", node.port())
    );

    node.set("k", "v", None).await.unwrap();
    let mut con = connection(&node.url(), Duration::from_secs(1))
        .await
        .unwrap();
    let value: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));

    let anonymous = format!("redis://127.0.0.1:{}", node.port());
    let denied = async {
        let mut con = connection(&anonymous, Duration::from_secs(1)).await?;
        redis::cmd("GET")
            .arg("k")
            .query_async::<Option<String>>(&mut con)
            .await
    }
    .await;
    let err = denied.expect_err("unauthenticated GET must fail");
    assert!(
        err.to_string().contains("NOAUTH") || err.to_string().contains("auth"),
        "{err}"
    );
}

#[tokio::test]
async fn debug_sleep_stalls_the_node() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let node = cluster.node(0);
    // Connect first: connection setup would itself wait out the sleep.
    let mut con = connection(&node.url(), Duration::from_secs(2))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let sleeping = tokio::spawn(node.debug_sleep(Duration::from_millis(400)));
    // Give the DEBUG command time to reach the server.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ping = tokio::time::timeout(
        Duration::from_millis(100),
        redis::cmd("PING").query_async::<String>(&mut con),
    )
    .await;
    assert!(ping.is_err(), "a sleeping node must not answer: {ping:?}");
    sleeping.await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(node.get("any").await.unwrap(), None);
}

// Multi-threaded, so that the synchronous Drop is also exercised on a worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_kills_every_process() {
    let mut cluster = RedisCluster::start(3).await.unwrap();
    cluster.node_mut(1).freeze().await.unwrap();
    cluster.node_mut(2).kill().await.unwrap();
    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|n| n.pid()).collect();
    let dirs: Vec<_> = cluster
        .nodes()
        .iter()
        .map(|n| n.dir().to_path_buf())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&pid| process_exists(pid)));

    drop(cluster);
    for pid in pids {
        assert!(!process_exists(pid), "pid {pid} survived drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} survived drop", dir.display());
    }
}

#[tokio::test]
async fn empty_cluster_is_fine() {
    let cluster = RedisCluster::start(0).await.unwrap();
    assert!(cluster.is_empty());
    assert!(cluster.urls().is_empty());
    assert!(cluster.keys("*").await.unwrap().is_empty());
    cluster.flush_all().await.unwrap();
}

#[test]
fn missing_binary_is_reported_clearly() {
    // A bogus override must fail rather than fall back to another binary. The
    // variable is process-wide and other tests start clusters concurrently, so
    // the check runs in a child process of this test binary.
    let exe = std::env::current_exe().unwrap();
    // The child's name as the test harness knows it: its path in this binary, without the
    // binary's own name.
    let child = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::missing_binary_child"),
        None => "missing_binary_child".to_owned(),
    };
    let output = std::process::Command::new(exe)
        .args(["--exact", &child, "--ignored", "--nocapture"])
        .env("QUORUMLOCK_REDIS_SERVER", "/nonexistent/redis-server")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[tokio::test]
#[ignore = "run by missing_binary_is_reported_clearly with QUORUMLOCK_REDIS_SERVER set"]
async fn missing_binary_child() {
    let err = RedisCluster::start(1).await.unwrap_err();
    assert!(
        matches!(err, TestkitError::ServerNotFound { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("apt-get install redis-server"),
        "{message}"
    );
    assert!(message.contains("/nonexistent/redis-server"), "{message}");
}

#[tokio::test]
async fn restart_reports_a_taken_port() {
    let mut cluster = RedisCluster::start(1).await.unwrap();
    let port = cluster.node(0).port();
    cluster.node_mut(0).kill().await.unwrap();

    // Someone else grabs the port while the node is down.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let err = cluster.node_mut(0).restart().await.unwrap_err();
    assert!(
        matches!(err, TestkitError::PortInUse { port: p, .. } if p == port),
        "{err}"
    );
    assert!(err.to_string().contains("Address already in use"), "{err}");
    assert_eq!(cluster.node(0).state(), NodeState::Stopped);

    drop(squatter);
    cluster.node_mut(0).restart().await.unwrap();
    assert_eq!(cluster.node(0).port(), port);
    cluster.node(0).set("k", "v", None).await.unwrap();
}
