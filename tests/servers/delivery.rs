//! Releases that always arrive, and acquisitions dropped mid-flight that leave nothing
//! behind: every unlock reaches every node it was meant for, whether or not a round still
//! waits for it, and an undo never overtakes the request it undoes. Real redis-server nodes.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    cluster, config, eventually, node_command, proxied, redlock, redlock_via, TTL,
};
use quorumlock::backend::RedisNode;
use quorumlock::node::LockNode;
use quorumlock::{LockGuard, Redlock};
use quorumlock_testkit::{NodeOptions, Persistence, RedisCluster, ResetWhen};
use rand::Rng;

/// After a release returns, the lock's key is gone from every node within 1 s.
async fn gone_everywhere_within_a_second(cluster: &RedisCluster, guard: LockGuard) {
    let key = guard.key().to_owned();
    guard.release().await.expect("the release is confirmed");
    eventually(
        &format!("{key} deleted on every node"),
        Duration::from_secs(1),
        || async {
            for node in cluster.nodes() {
                if node.get(&key).await.unwrap().is_some() {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

/// A node that lost its script cache (restart, failover, `SCRIPT FLUSH`) answers the
/// release's unlock with NOSCRIPT; the reload must happen even once a quorum confirmed the
/// release and nobody awaits that node.
#[tokio::test]
async fn a_release_reaches_nodes_that_lost_their_scripts() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    for round in 0..5 {
        let guard = lock.try_acquire(&format!("flushed:{round}")).await.unwrap();
        for node in &cluster.nodes()[1..] {
            node_command(node, &["SCRIPT", "FLUSH"]).await;
        }
        gone_everywhere_within_a_second(&cluster, guard).await;
    }
}

#[tokio::test]
async fn a_release_reaches_nodes_restarted_since_the_acquire() {
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let mut cluster = RedisCluster::start_with(5, options).await.unwrap();
    // Every write is fsynced before the node answers, and the release's unlock on a
    // restarted node waits for its reconnect and server check (INFO, CONFIG GET): more than
    // 250 ms on a loaded machine (seen under the full suite), so the tests' own timeout.
    let patient = config(TTL)
        .to_builder()
        .node_timeout(crate::common::NODE_TIMEOUT)
        .build()
        .unwrap();
    let lock = redlock(&cluster, patient).await;
    for round in 0..3 {
        let guard = lock
            .try_acquire(&format!("restarted:{round}"))
            .await
            .unwrap();
        for i in 1..5 {
            cluster.node_mut(i).restart().await.unwrap();
        }
        gone_everywhere_within_a_second(&cluster, guard).await;
    }
}

#[tokio::test]
async fn a_release_reaches_nodes_whose_connection_reset_under_it() {
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, config(TTL)).await;
    for round in 0..10 {
        let guard = lock.try_acquire(&format!("reset:{round}")).await.unwrap();
        // The next unlock script sent to nodes 3 and 4 resets the connection before it
        // reaches the node: it must be sent again on a new connection, though the other
        // three confirm the release without them.
        for i in 3..5 {
            cluster
                .proxy(i)
                .reset_on(b"EVALSHA".to_vec(), ResetWhen::BeforeForwarding);
        }
        gone_everywhere_within_a_second(cluster.cluster(), guard).await;
        for i in 3..5 {
            cluster.proxy(i).heal().await.unwrap();
        }
    }
}

/// A lock whose node connections are not made yet: each is made by the first request.
async fn cold_lock(cluster: &RedisCluster) -> Redlock {
    let mut nodes: Vec<Arc<dyn LockNode>> = Vec::new();
    for url in cluster.urls() {
        nodes.push(Arc::new(
            RedisNode::connect(&url, crate::common::NODE_TIMEOUT)
                .await
                .unwrap(),
        ));
    }
    Redlock::from_nodes(nodes, config(TTL)).unwrap()
}

/// Drops acquisitions at random points of their round, on fresh and on used connections,
/// and checks that no key is left anywhere: the background unlock of a dropped attempt
/// must not reach a node before the `SET` it undoes.
async fn dropped_acquires_leave_no_key() {
    let cluster = cluster(5).await;
    let warm = redlock(&cluster, config(TTL)).await;
    for i in 0..40 {
        let cold = cold_lock(&cluster).await;
        let micros = rand::rng().random_range(0..3_000);
        for (lock, name) in [(&cold, "cold"), (&warm, "warm")] {
            let resource = format!("dropped:{name}:{i}");
            let acquire = lock.acquire(&resource);
            if let Ok(Ok(guard)) =
                tokio::time::timeout(Duration::from_micros(micros), acquire).await
            {
                guard.release().await.unwrap();
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let left = cluster.keys("dropped:*").await.unwrap();
    assert!(
        left.iter().all(Vec::is_empty),
        "keys left behind by dropped acquisitions: {left:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn dropped_acquires_leave_no_key_on_one_thread() {
    dropped_acquires_leave_no_key().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_no_key_on_two_threads() {
    dropped_acquires_leave_no_key().await;
}
