//! Shared set-up for the integration tests: real redis-server nodes from the testkit.

use std::future::Future;
use std::ops::Range;
use std::time::{Duration, Instant};

use quorumlock::{DistributedLock, LockConfig, Nodes, Redlock};
use quorumlock_testkit::{RedisCluster, RedisProcess};
use redis::aio::MultiplexedConnection;

/// A TTL long enough to never expire by accident on a loaded 2-core machine.
pub const TTL: Duration = Duration::from_secs(10);

/// The per-node timeout of the tests: ten times the library's default, so that a scheduling
/// stall on a loaded 2-core machine is not taken for a node failure. Tests of the timeout
/// itself set their own.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// How late a timed step may come on a loaded 2-core machine, on top of what it waits for:
/// the margin of every wall-clock bound in these tests. A step that waits for a frozen node
/// to thaw, or sleeps out a retry delay it should not, still misses the bound.
pub const LOAD_MARGIN: Duration = Duration::from_secs(1);

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

/// A config with the test TTL whose blocking `acquire` retries `count` times, `delay`
/// apart, give or take `jitter`.
pub fn retrying(count: u32, delay: Duration, jitter: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .retry_count(count)
        .retry_delay(delay)
        .retry_jitter(jitter)
        .build()
        .expect("valid retrying config")
}

/// Takes `resource` at once and releases it; panics if either fails.
pub async fn acquire_and_release<L: DistributedLock>(lock: &L, resource: &str) {
    let guard = lock
        .try_acquire(resource)
        .await
        .unwrap_or_else(|err| panic!("acquire {resource:?}: {err:?}"));
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("release {resource:?}: {err:?}"));
}

/// A direct connection to `node`, bypassing any lock (to run raw commands on it).
pub async fn raw_connection(node: &RedisProcess) -> MultiplexedConnection {
    node.client()
        .expect("a client for the node")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the node directly")
}

/// A lock over every node of `cluster`, with its connections already made.
///
/// Connections are lazy: a node still connecting when a quorum has answered is not waited
/// for, so tests that inspect every node warm the connections first.
pub async fn redlock(cluster: &RedisCluster, config: LockConfig) -> Redlock {
    let nodes = Nodes::new(cluster.urls()).expect("the test nodes' URLs");
    redlock_on(cluster, nodes, config).await
}

/// The test nodes at `urls` for a lock with fencing: they keep no append-only file.
pub fn volatile(urls: Vec<String>) -> Nodes {
    Nodes::new(urls)
        .expect("the test nodes' URLs")
        .fencing_on_volatile_nodes(true)
}

/// [`redlock`] on `nodes`, the nodes of `cluster` with the settings of their deployment.
pub async fn redlock_on(cluster: &RedisCluster, nodes: Nodes, config: LockConfig) -> Redlock {
    let lock = Redlock::connect(nodes, config)
        .await
        .expect("connect to the test nodes");
    let started = Instant::now();
    let mut warm = false;
    for attempt in 0.. {
        // A fresh name each time: a release that failed (a node slow to answer on a
        // loaded machine) leaves its key to the TTL, and the next attempt must not wait.
        if let Ok(guard) = lock.try_acquire(&format!("warm-up:{attempt}")).await {
            // The lock key only: a fencing counter beside it stays.
            let key = guard.key().to_owned();
            let released = guard.release().await.is_ok();
            warm = released
                && cluster
                    .keys_on_running(&key)
                    .await
                    .expect("list keys")
                    .iter()
                    .all(Vec::is_empty);
        }
        if warm || started.elapsed() > 10 * LOAD_MARGIN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(warm, "the test nodes did not answer");
    lock
}

/// Every key on every running node, flattened with the node index.
pub async fn all_keys(cluster: &RedisCluster) -> Vec<(usize, String)> {
    by_node(cluster.keys_on_running("*").await.expect("list keys"))
}

/// Per-node key lists, flattened into `(node index, key)` pairs.
fn by_node(keys: Vec<Vec<String>>) -> Vec<(usize, String)> {
    keys.into_iter()
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

/// Waits (up to 2 s) until every key of `guard` holds its token on every node of
/// `cluster`: the requests the quorum did not wait for have landed too.
pub async fn held_on_every_node(cluster: &RedisCluster, guard: &quorumlock::LockGuard) {
    held_on(cluster, 0..cluster.len(), guard).await;
}

/// Waits (up to 2 s) until every key of `guard` holds its token on the nodes at `nodes`.
pub async fn held_on(cluster: &RedisCluster, nodes: Range<usize>, guard: &quorumlock::LockGuard) {
    let what = format!("{} held on nodes {nodes:?}", guard.resource());
    let token = guard.token().as_str();
    eventually(&what, Duration::from_secs(2), || async {
        for i in nodes.clone() {
            for key in guard.keys() {
                if cluster.node(i).get(key).await.unwrap().as_deref() != Some(token) {
                    return false;
                }
            }
        }
        true
    })
    .await;
}

/// Waits until no running node has any key (background deletes are done).
pub async fn no_keys_left(cluster: &RedisCluster, limit: Duration) {
    eventually("every key deleted on every node", limit, || async {
        all_keys(cluster).await.is_empty()
    })
    .await;
}

// ---------------------------------------------------------------------------
// Chaos and no-oversell helpers (tests/chaos.rs, tests/oversell.rs).
// ---------------------------------------------------------------------------

/// The key prefix of the chaos and oversell locks, so that lock keys are told apart from
/// data keys (stock, sales) on the same nodes.
pub const LOCK_PREFIX: &str = "lock:";

/// The `SCAN` pattern matching every lock key made with [`chaos_config`].
pub const LOCK_KEYS: &str = "lock:*";

/// `n` nodes with a fault proxy in front of each.
pub async fn proxied(nodes: usize) -> quorumlock_testkit::ProxiedCluster {
    proxied_with(nodes, quorumlock_testkit::NodeOptions::default()).await
}

/// `n` nodes started with `options`, with a fault proxy in front of each.
pub async fn proxied_with(
    nodes: usize,
    options: quorumlock_testkit::NodeOptions,
) -> quorumlock_testkit::ProxiedCluster {
    quorumlock_testkit::ProxiedCluster::start_with(nodes, options)
        .await
        .expect("start local redis-server nodes behind fault proxies")
}

/// Like [`config`], with the [`LOCK_PREFIX`] key prefix.
pub fn chaos_config(ttl: Duration) -> LockConfig {
    config(ttl)
        .to_builder()
        .key_prefix(LOCK_PREFIX)
        .build()
        .expect("valid chaos config")
}

/// A quorum lock over the proxies of `cluster`, every connection made and used once.
pub async fn redlock_via(
    cluster: &quorumlock_testkit::ProxiedCluster,
    config: LockConfig,
) -> Redlock {
    let nodes = Nodes::new(cluster.urls()).expect("the proxies' URLs");
    redlock_via_on(cluster, nodes, config).await
}

/// [`redlock_via`] on `nodes`, the proxies of `cluster` with the settings of their
/// deployment.
pub async fn redlock_via_on(
    cluster: &quorumlock_testkit::ProxiedCluster,
    nodes: Nodes,
    config: LockConfig,
) -> Redlock {
    let lock = Redlock::connect(nodes, config)
        .await
        .expect("connect through the proxies");
    warm_up(&lock, cluster.cluster()).await;
    lock
}

/// Takes and releases a lock until every node of `cluster` held it once, so that every
/// connection of `lock` is made (connections are lazy, and a node still connecting when a
/// quorum answered is not waited for). Leaves no key behind.
pub async fn warm_up<L: DistributedLock>(lock: &L, cluster: &RedisCluster) {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the test nodes did not all answer"
        );
        let Ok(guard) = lock.try_acquire("warm-up").await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let key = guard.key().to_owned();
        let token = guard.token().as_str().to_owned();
        let mut everywhere = false;
        for _ in 0..20 {
            let mut holding = 0;
            for node in cluster.nodes() {
                holding +=
                    usize::from(node.get(&key).await.ok().flatten().as_deref() == Some(&*token));
            }
            everywhere = holding == cluster.len();
            if everywhere {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = guard.release().await;
        eventually(
            "the warm-up key deleted everywhere",
            Duration::from_secs(5),
            || async {
                let mut left = 0;
                for node in cluster.nodes() {
                    left += usize::from(node.get(&key).await.ok().flatten().is_some());
                }
                left == 0
            },
        )
        .await;
        if everywhere {
            return;
        }
    }
}

/// After a scenario: no lock key outlives its TTL on any node.
///
/// Every node must be running (heal first, and let delayed traffic drain). Checks that each
/// key matching `pattern` expires (`PTTL` in `(0, ttl]`: no key without expiry, no key
/// extended beyond the TTL), then that all are gone within `ttl` plus a scheduling margin.
pub async fn no_lock_key_outlives_ttl(cluster: &RedisCluster, pattern: &str, ttl: Duration) {
    let start = Instant::now();
    let keys = cluster
        .keys(pattern)
        .await
        .expect("list lock keys on every node");
    for (i, keys) in keys.iter().enumerate() {
        for key in keys {
            let pttl = cluster.node(i).pttl(key).await.expect("PTTL");
            // -2: expired since the scan.
            assert!(
                pttl == -2 || (pttl > 0 && u128::try_from(pttl).unwrap() <= ttl.as_millis()),
                "node {i}: lock key {key:?} has PTTL {pttl} ms (TTL {ttl:?})"
            );
        }
    }
    let limit = ttl + Duration::from_millis(500);
    loop {
        let left = by_node(
            cluster
                .keys(pattern)
                .await
                .expect("list lock keys on every node"),
        );
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "lock keys outlived their TTL of {ttl:?}: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One field of `INFO commandstats` on node `node`: how many times `command` ran since
/// the last `CONFIG RESETSTAT` (0 when never).
pub async fn command_calls(node: &RedisProcess, command: &str) -> u64 {
    let mut connection = raw_connection(node).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a call count"))
}

/// Runs one command on node `node` over a fresh connection (for `CONFIG SET`, `CONFIG
/// RESETSTAT` and the like).
pub async fn node_command(node: &RedisProcess, args: &[&str]) {
    let mut connection = raw_connection(node).await;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let () = cmd
        .query_async(&mut connection)
        .await
        .expect("direct command");
}

/// The node and reason of an `InvalidNode` error, or a panic naming what came instead.
pub fn invalid_node<T: std::fmt::Debug>(
    result: Result<T, quorumlock::LockError>,
) -> (String, String) {
    match result {
        Err(quorumlock::LockError::InvalidNode { node, reason }) => (node, reason),
        other => panic!("expected InvalidNode, got {other:?}"),
    }
}
