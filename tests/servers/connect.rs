//! Connecting: `Redlock::connect` returns once a quorum of members is connected and
//! checked, the others joining in the background; a member whose server cannot serve the
//! lock counts as failed (loudly) instead of stopping every new client, unless the node set
//! is strict; and each refusal names its real cause. Real redis-server processes.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{
    cluster, command_calls, config, eventually, invalid_node, node_command, raw_connection,
    retrying, LOAD_MARGIN, TTL,
};
use quorumlock::{Nodes, RedisLock, Redlock};

/// A connect timeout far above what a healthy local node needs, so that waiting for the
/// frozen node shows plainly.
const SLOW_CONNECT: Duration = Duration::from_secs(5);

/// With one node of five frozen, connect returns with the four others checked, long
/// before the frozen node's connect timeout; the lock works meanwhile, and the node, once
/// thawed, is checked and grants again. (Before, connect waited out the whole connect
/// timeout of the frozen node.)
#[tokio::test]
async fn connect_returns_at_a_quorum_and_a_frozen_node_joins_when_it_thaws() {
    let mut cluster = cluster(5).await;
    cluster.node_mut(4).freeze().await.unwrap();
    let nodes = Nodes::new(cluster.urls())
        .unwrap()
        .connect_timeout(SLOW_CONNECT);
    let started = Instant::now();
    let lock = Redlock::connect(nodes, config(TTL)).await.unwrap();
    let took = started.elapsed();
    assert!(
        took < LOAD_MARGIN,
        "connect waited {took:?} for the frozen node (connect timeout {SLOW_CONNECT:?})"
    );
    let guard = lock.try_acquire("joined").await.unwrap();
    guard.release().await.unwrap();
    cluster.node_mut(4).thaw().await.unwrap();
    let (thawed, lock) = (&cluster, &lock);
    eventually(
        "the thawed node grants",
        SLOW_CONNECT + LOAD_MARGIN,
        || async move {
            let Ok(guard) = lock.try_acquire("joined").await else {
                return false;
            };
            let mut held = false;
            for _ in 0..10 {
                held = thawed.node(4).get(guard.key()).await.unwrap().as_deref()
                    == Some(guard.token().as_str());
                if held {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = guard.release().await;
            held
        },
    )
    .await;
}

/// Four healthy masters and a replica: connect succeeds, the replica counts as failed and
/// says why in its node metrics, and locks are taken on the four. A strict node set
/// refuses the replica as before. (Before, connect failed with `InvalidNode` either way.)
#[tokio::test]
async fn a_replica_member_counts_as_failed_unless_the_node_set_is_strict() {
    let cluster = cluster(5).await;
    let master = cluster.node(0).port().to_string();
    node_command(cluster.node(4), &["REPLICAOF", "127.0.0.1", &master]).await;
    let nodes = Nodes::new(cluster.urls()).unwrap();
    let lock = Redlock::connect(nodes.clone(), config(TTL)).await.unwrap();
    // Connect returns at a quorum: the replica's check may still be under way.
    eventually("the replica is excluded", LOAD_MARGIN, || async {
        lock.node_metrics()[4].excluded.is_some()
    })
    .await;
    let excluded = lock.node_metrics()[4].excluded.clone().unwrap();
    assert!(excluded.contains("replica"), "{excluded}");
    assert!(lock.node_metrics()[..4]
        .iter()
        .all(|node| node.excluded.is_none()));
    let guard = lock.try_acquire("with-a-replica").await.unwrap();
    guard.release().await.unwrap();

    let (node, reason) =
        invalid_node(Redlock::connect(nodes.strict_members(true), config(TTL)).await);
    assert_eq!(node, cluster.node(4).url());
    assert!(reason.contains("replica"), "{reason}");
    node_command(cluster.node(4), &["REPLICAOF", "NO", "ONE"]).await;
}

/// Three replicas of five members leave no quorum: connect fails, naming a replica and the
/// count.
#[tokio::test]
async fn members_refused_past_a_quorum_fail_connect() {
    let cluster = cluster(5).await;
    let master = cluster.node(0).port().to_string();
    for i in 2..5 {
        node_command(cluster.node(i), &["REPLICAOF", "127.0.0.1", &master]).await;
    }
    let (_, reason) = invalid_node(Redlock::connect(cluster.urls(), config(TTL)).await);
    assert!(
        reason.contains("replica") && reason.contains("3 of 5 members refused"),
        "{reason}"
    );
    for i in 2..5 {
        node_command(cluster.node(i), &["REPLICAOF", "NO", "ONE"]).await;
    }
}

/// A database the server does not have is a refusal that says so, not a node "down".
#[tokio::test]
async fn a_database_the_server_does_not_have_is_named() {
    let cluster = cluster(1).await;
    let url = format!("{}/99", cluster.node(0).url());
    let (node, reason) = invalid_node(RedisLock::connect(&url, config(TTL)).await);
    assert_eq!(node, url);
    assert!(reason.contains("database 99 does not exist"), "{reason}");
}

/// `redis+cluster://` to a server that is not in cluster mode, and `redis+sentinel://` to
/// one that is not a sentinel, are refused as such.
#[tokio::test]
async fn a_cluster_or_sentinel_url_to_a_plain_server_is_named() {
    let cluster = cluster(1).await;
    let address = cluster.node(0).address();
    let url = format!("redis+cluster://{address}");
    let (_, reason) = invalid_node(RedisLock::connect(&url, config(TTL)).await);
    assert!(reason.contains("not a Redis Cluster node"), "{reason}");
    let url = format!("redis+sentinel://{address}/mymaster");
    let (_, reason) = invalid_node(RedisLock::connect(&url, config(TTL)).await);
    assert!(reason.contains("not a Redis Sentinel"), "{reason}");
}

/// `rediss://` to a server that speaks no TLS says so, instead of "timed out".
#[cfg(feature = "tls")]
#[tokio::test]
async fn a_tls_url_to_a_plain_server_is_named() {
    let cluster = cluster(1).await;
    let url = format!("rediss://{}", cluster.node(0).address());
    let nodes = Nodes::new(url.as_str())
        .unwrap()
        .connect_timeout(Duration::from_millis(500));
    let (_, reason) = invalid_node(RedisLock::connect(nodes, config(TTL)).await);
    assert!(reason.contains("does not speak TLS"), "{reason}");
}

/// The clients connected to `node`, this query's own connection left out.
async fn connected_clients(node: &quorumlock_testkit::RedisProcess) -> u64 {
    let mut connection = raw_connection(node).await;
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut connection)
        .await
        .expect("INFO clients");
    let count: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("a client count");
    count - 1
}

/// A lock its user dropped takes its connections (for requests and for announcements) and
/// its clock watch with it: the servers see no more of it. (Before, the task that made each connection kept the link
/// alive while it watched the clock: a `TIME` a second to every node, and an open
/// connection, for as long as the process lived.)
#[tokio::test]
async fn a_dropped_lock_closes_its_connections_and_stops_watching_the_clocks() {
    let cluster = cluster(3).await;
    let before: Vec<u64> =
        futures::future::join_all(cluster.nodes().iter().map(connected_clients)).await;
    {
        let retries = retrying(40, Duration::from_millis(50), Duration::from_millis(10));
        let lock = Redlock::connect(cluster.urls(), retries).await.unwrap();
        let guard = lock.acquire("dropped").await.unwrap();
        // A waiter too: its queue place and the announcements it watches.
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire("dropped").await.unwrap().release().await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.unwrap();
        waiter.await.unwrap().unwrap();
        // At least one clock sample on every node, so that every watch has begun.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    for (index, node) in cluster.nodes().iter().enumerate() {
        eventually(
            "the dropped lock's connections closed",
            5 * LOAD_MARGIN,
            || async { connected_clients(node).await <= before[index] },
        )
        .await;
    }
    let times = futures::future::join_all(
        cluster
            .nodes()
            .iter()
            .map(|node| command_calls(node, "time")),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = futures::future::join_all(
        cluster
            .nodes()
            .iter()
            .map(|node| command_calls(node, "time")),
    )
    .await;
    assert_eq!(later, times, "TIME sent after the lock was dropped");
}
