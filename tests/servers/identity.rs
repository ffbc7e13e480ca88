//! One vote per server: nodes are told apart by what their servers report, not by URL, and
//! servers that cannot be lock nodes are refused with a message that says what they are.
//! Real redis-server processes throughout.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{cluster, config, invalid_node, node_command, TTL};
use quorumlock::{LockError, RedisLock, Redlock};
use quorumlock_testkit::{FaultProxy, NodeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn two_urls_of_one_server_are_refused_naming_both() {
    let cluster = cluster(2).await;
    let port = cluster.node(0).port();
    let first = format!("redis://127.0.0.1:{port}");
    for alias in [
        format!("redis://127.0.0.1:{port}/1"),
        format!("redis://localhost:{port}"),
        format!("redis://127.0.0.1:{port}/"),
        format!("redis://127.0.0.1:{port}/0"),
    ] {
        let urls = [first.clone(), alias.clone(), cluster.node(1).url()];
        // Strict, so that connect hears every member out: by default it returns at a
        // quorum plus a grace, and an alias slower than that (localhost resolved on a
        // loaded host) only counts as failed, as the next test shows.
        let nodes = quorumlock::Nodes::new(urls.as_slice())
            .unwrap()
            .strict_members(true);
        let (node, reason) = invalid_node(Redlock::connect(nodes, config(TTL)).await);
        let named = format!("{node} {reason}");
        assert!(
            named.contains(&first) && named.contains(&alias),
            "{alias}: both URLs named in: {named}"
        );
        assert!(reason.contains("same server"), "{reason}");
    }
}

/// Before this check, a 3-node lock with two URLs of one server was acquired while only
/// that server was alive: one crash of it could then break exclusion.
#[tokio::test]
async fn a_server_reached_twice_later_does_not_vote_twice() {
    let mut cluster = cluster(2).await;
    let a: SocketAddr = cluster.node(0).address().parse().unwrap();
    // A second way to server A, closed while the lock connects.
    let alias = FaultProxy::start(a).await.unwrap();
    alias.refuse_new(true).await.unwrap();
    // Another database, so that its keys do not show through the first URL.
    let urls = [
        cluster.node(0).url(),
        cluster.node(1).url(),
        format!("{}/1", alias.url()),
    ];
    let lock = Redlock::connect(&urls, config(TTL)).await.unwrap();
    crate::common::acquire_and_release(&lock, "warm").await;

    alias.refuse_new(false).await.unwrap();
    cluster.node_mut(1).kill().await.unwrap();
    // Server A alone is alive; through the alias it would be two votes of three.
    let mut named = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline {
        match lock.try_acquire("order:1").await {
            Ok(guard) => panic!("one server cast two votes: {:?}", guard.validity()),
            Err(err) => {
                assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
                named |= err.to_string().contains("same server");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(named, "the alias was never reported as the same server");
}

#[tokio::test]
async fn a_replica_is_refused_as_a_replica() {
    let cluster = cluster(2).await;
    let master = cluster.node(0).port().to_string();
    node_command(cluster.node(1), &["REPLICAOF", "127.0.0.1", &master]).await;
    let (node, reason) =
        invalid_node(RedisLock::connect(&cluster.node(1).url(), config(TTL)).await);
    assert_eq!(node, cluster.node(1).url());
    assert!(
        reason.contains("replica") && reason.contains("READONLY"),
        "{reason}"
    );
    node_command(cluster.node(1), &["REPLICAOF", "NO", "ONE"]).await;
}

#[tokio::test]
async fn a_cluster_node_given_as_a_plain_node_is_refused() {
    // The testkit's port for a cluster-enabled node leaves room for its bus port (+10000);
    // a port the system picks may not (the server then fails to start).
    let options = NodeOptions {
        cluster_enabled: true,
        ..NodeOptions::default()
    };
    let server = quorumlock_testkit::RedisCluster::start_with(1, options)
        .await
        .unwrap();
    let url = server.node(0).url();
    let (_, reason) = invalid_node(RedisLock::connect(&url, config(TTL)).await);
    assert!(
        reason.contains("Redis Cluster node") && reason.contains("CROSSSLOT"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_server_that_does_not_speak_redis_is_named_so() {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0; 1024];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let (node, reason) = invalid_node(RedisLock::connect(&url, config(TTL)).await);
    assert_eq!(node, url);
    assert!(reason.contains("not a Redis server"), "{reason}");
}

/// Where an ACL denies INFO, servers are told apart by the address they report.
#[tokio::test]
async fn without_info_the_reported_address_tells_servers_apart() {
    let cluster = cluster(3).await;
    for node in cluster.nodes() {
        node_command(
            node,
            &[
                "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-info",
            ],
        )
        .await;
    }
    let url =
        |i: usize, db: &str| format!("redis://locker:pw@127.0.0.1:{}{db}", cluster.node(i).port());
    let lock = Redlock::connect([url(0, ""), url(1, ""), url(2, "")], config(TTL))
        .await
        .unwrap();
    crate::common::acquire_and_release(&lock, "acl").await;

    let twice = [url(0, ""), url(0, "/1"), url(2, "")];
    let (_, reason) = invalid_node(Redlock::connect(twice, config(TTL)).await);
    assert!(
        reason.contains("same server") && reason.contains("address"),
        "{reason}"
    );
}
