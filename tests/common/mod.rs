//! Shared set-up for the integration tests: real redis-server nodes from the testkit.

#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;
use std::time::{Duration, Instant};

use quorumlock::testkit::RedisCluster;
use quorumlock::{LockConfig, Redlock};

/// A TTL long enough to never expire by accident on a loaded 2-core machine.
pub const TTL: Duration = Duration::from_secs(10);

/// The per-node timeout of the tests: the library default.
pub const NODE_TIMEOUT: Duration = LockConfig::DEFAULT_NODE_TIMEOUT;

pub async fn cluster(nodes: usize) -> RedisCluster {
    RedisCluster::start(nodes)
        .await
        .expect("start local redis-server nodes (apt-get install -y redis-server)")
}

/// A config without retries; short TTLs get a per-node timeout of a tenth of the TTL.
pub fn config(ttl: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT.min(ttl / 10))
        .retry_count(0)
        .build()
        .expect("valid test config")
}

/// A lock over every node of `cluster`, with its connections already made.
///
/// Connections are lazy: a node still connecting when a quorum has answered is not waited
/// for, so tests that inspect every node warm the connections first.
pub async fn redlock(cluster: &RedisCluster, config: LockConfig) -> Redlock {
    let lock = Redlock::connect(cluster.urls(), config)
        .await
        .expect("connect to the test nodes");
    let mut warm = false;
    for _ in 0..50 {
        if let Ok(guard) = lock.try_acquire("warm-up").await {
            guard.release().await.expect("release the warm-up lock");
            warm = all_keys(cluster).await.is_empty();
            if warm {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(warm, "the test nodes did not answer");
    lock
}

/// Every key on every running node, flattened with the node index.
pub async fn all_keys(cluster: &RedisCluster) -> Vec<(usize, String)> {
    cluster
        .keys_on_running("*")
        .await
        .expect("list keys")
        .into_iter()
        .enumerate()
        .flat_map(|(node, keys)| keys.into_iter().map(move |key| (node, key)))
        .collect()
}

/// Polls `check` every 10 ms until it holds; panics with `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return;
        }
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until no running node has any key (background deletes are done).
pub async fn no_keys_left(cluster: &RedisCluster, limit: Duration) {
    eventually("every key deleted on every node", limit, || async {
        all_keys(cluster).await.is_empty()
    })
    .await;
}
