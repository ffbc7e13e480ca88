//! What the simulated tests share: clusters of simulated nodes that announce releases, as
//! Redis nodes do by default, and the configurations the tests use.

use std::future::Future;
use std::time::Duration;

use quorumlock::sim::SimCluster;
use quorumlock::{LockConfig, LockGuard, Redlock};
use tokio_test::task::Spawn;

/// A TTL that never runs out by accident: virtual time only moves when the test lets it.
pub const TTL: Duration = Duration::from_secs(10);

/// `n` simulated nodes that announce releases.
pub fn cluster(n: usize) -> SimCluster {
    let cluster = SimCluster::new(n);
    cluster.announce_releases(true);
    cluster
}

/// A config without retries, with `ttl`; short TTLs get a per-node timeout of a tenth of
/// the TTL (the longest a config allows), as in `tests/servers/`.
pub fn config(ttl: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(ttl)
        .node_timeout(LockConfig::DEFAULT_NODE_TIMEOUT.min(ttl / 10))
        .retry_count(0)
        .build()
        .expect("valid test config")
}

/// A config with [`TTL`] whose blocking `acquire` retries `count` times, `delay` apart,
/// give or take `jitter`.
pub fn retrying(count: u32, delay: Duration, jitter: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(count)
        .retry_delay(delay)
        .retry_jitter(jitter)
        .build()
        .expect("valid retrying config")
}

/// A config without retries that waits up to 2 s for each node, with a 30 s TTL: frozen or
/// slow nodes keep an acquisition round open rather than time out.
pub fn slow_nodes() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(30))
        .node_timeout(Duration::from_secs(2))
        .retry_count(0)
        .build()
        .expect("valid slow-nodes config")
}

/// A lock client of its own over `cluster` (its own connections and client id, as in a
/// process of its own), its requests logged under `name`.
pub fn client(cluster: &SimCluster, name: &str, config: LockConfig) -> Redlock {
    cluster
        .redlock_for(name, config)
        .expect("a lock over the simulated nodes")
}

/// How many nodes of `cluster` hold `guard`'s token under every one of its keys.
pub fn holding(cluster: &SimCluster, guard: &LockGuard) -> usize {
    cluster
        .nodes()
        .iter()
        .filter(|node| {
            guard
                .keys()
                .all(|key| node.get(key).as_ref() == Some(guard.token()))
        })
        .count()
}

/// Every live key on every node, with the node's index.
pub fn all_keys(cluster: &SimCluster) -> Vec<(usize, String)> {
    cluster
        .nodes()
        .iter()
        .enumerate()
        .flat_map(|(i, node)| node.keys().into_iter().map(move |key| (i, key)))
        .collect()
}

/// Drives `task` while `time` of virtual time passes, polling it on every wake as a runtime
/// polls a task, and asserts that it is still waiting then. The task is left as it is: to
/// be polled on, dropped, or never polled again (a process that stopped).
pub async fn pending_for<T: Future>(task: &mut Spawn<T>, time: Duration) {
    let ended = tokio::time::timeout(time, &mut *task).await.is_ok();
    assert!(!ended, "the task ended within {time:?}");
    assert!(task.poll().is_pending(), "the task ended within {time:?}");
}

/// Lets what the clients sent in the background (releases, queue exits) land: the nodes
/// answer in no virtual time unless a delay is set, so a millisecond is plenty.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// Spawns `work` and returns its task, which answers what `work` gave and the virtual
/// instant it gave it: when a waiter got its lock, next to when it was released.
pub fn spawn_timed<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<(tokio::time::Instant, T)> {
    tokio::spawn(async move {
        let value = work.await;
        (tokio::time::Instant::now(), value)
    })
}
