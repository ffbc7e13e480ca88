//! Direct node access: short-lived connections for the assertion helpers (`GET`, `PTTL`,
//! `SET`, `FLUSHALL`, `SCAN`) and the readiness probe, shared by both backends.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};

use crate::error::{Result, TestkitError};
use crate::state::NodeState;

/// How long a freshly started node may take to answer `PING`.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Delay between two readiness probes.
pub(crate) const READY_POLL: Duration = Duration::from_millis(10);
/// Upper bound for one readiness probe; a probe that hangs must not eat the whole budget.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Budget of every direct-assertion helper (connect + command).
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(2);

/// A node the direct-assertion helpers can reach: [`RedisProcess`](crate::RedisProcess), and the
/// container backend's `RedisContainer`. Their public helper methods (and
/// those of their clusters) are thin wrappers over the functions below.
pub(crate) trait DirectNode {
    /// The node's URL.
    fn url(&self) -> String;
    /// `host:port`, as used in error messages.
    fn address(&self) -> String;
    /// What the harness last did to the node.
    fn state(&self) -> NodeState;

    /// The error of an operation refused because the node is not running.
    fn not_running(&self) -> TestkitError {
        TestkitError::NotRunning {
            node: self.address(),
            state: self.state(),
        }
    }
}

/// Opens a fresh multiplexed connection whose connect and responses are bounded by `timeout`.
async fn connect(url: &str, timeout: Duration) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Refuses to talk to a node the harness knows cannot answer, so helpers fail
/// at once instead of waiting for a timeout.
fn ensure_running(node: &str, state: NodeState) -> Result<()> {
    match state {
        NodeState::Running => Ok(()),
        state => Err(TestkitError::NotRunning {
            node: node.to_owned(),
            state,
        }),
    }
}

/// Runs `cmd` on a fresh connection, the whole exchange bounded by `timeout`.
pub(crate) async fn query_with_timeout<T: FromRedisValue>(
    url: &str,
    node: &str,
    state: NodeState,
    operation: &'static str,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> Result<T> {
    ensure_running(node, state)?;
    let exchange = async {
        let mut con = connect(url, timeout).await?;
        cmd.query_async::<T>(&mut con).await
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(TestkitError::Timeout {
            node: node.to_owned(),
            operation,
            timeout,
        }),
    }
}

/// [`query_with_timeout`] on `node`, with the standard helper budget.
async fn query<T: FromRedisValue>(
    node: &impl DirectNode,
    operation: &'static str,
    cmd: &redis::Cmd,
) -> Result<T> {
    let (url, address) = (node.url(), node.address());
    query_with_timeout(&url, &address, node.state(), operation, cmd, HELPER_TIMEOUT).await
}

/// `GET key`.
pub(crate) async fn get(node: &impl DirectNode, key: &str) -> Result<Option<String>> {
    query(node, "GET", redis::cmd("GET").arg(key)).await
}

/// `PTTL key`.
pub(crate) async fn pttl(node: &impl DirectNode, key: &str) -> Result<i64> {
    query(node, "PTTL", redis::cmd("PTTL").arg(key)).await
}

/// `SET key value [PX ms]`.
pub(crate) async fn set(
    node: &impl DirectNode,
    key: &str,
    value: &str,
    ttl: Option<Duration>,
) -> Result<()> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if let Some(ttl) = ttl {
        cmd.arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    query::<()>(node, "SET", &cmd).await
}

/// `FLUSHALL`.
pub(crate) async fn flush(node: &impl DirectNode) -> Result<()> {
    query::<()>(node, "FLUSHALL", &redis::cmd("FLUSHALL")).await
}

/// Every key matching `pattern`, through `SCAN` (never `KEYS`), sorted and deduplicated.
pub(crate) async fn scan_keys(node: &impl DirectNode, pattern: &str) -> Result<Vec<String>> {
    let (url, address) = (node.url(), node.address());
    ensure_running(&address, node.state())?;
    let scan = async {
        let mut con = connect(&url, HELPER_TIMEOUT).await?;
        // SCAN may return a key more than once; a set removes the repeats.
        let mut keys = BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut con)
                .await?;
            keys.extend(batch);
            if next == 0 {
                return redis::RedisResult::Ok(keys.into_iter().collect());
            }
            cursor = next;
        }
    };
    match tokio::time::timeout(HELPER_TIMEOUT, scan).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(TestkitError::Timeout {
            node: address,
            operation: "SCAN",
            timeout: HELPER_TIMEOUT,
        }),
    }
}

/// Every key matching `pattern` on each of `nodes`, in node order. Fails if
/// any node is not running.
pub(crate) async fn keys_on_all<N: DirectNode>(
    nodes: &[N],
    pattern: &str,
) -> Result<Vec<Vec<String>>> {
    futures::future::try_join_all(nodes.iter().map(|node| scan_keys(node, pattern))).await
}

/// Like [`keys_on_all`], but the nodes that are not running yield an empty list.
pub(crate) async fn keys_on_running<N: DirectNode>(
    nodes: &[N],
    pattern: &str,
) -> Result<Vec<Vec<String>>> {
    futures::future::try_join_all(nodes.iter().map(|node| async move {
        if node.state() == NodeState::Running {
            scan_keys(node, pattern).await
        } else {
            Ok(Vec::new())
        }
    }))
    .await
}

/// `FLUSHALL` on each of `nodes`. Fails if any node is not running.
pub(crate) async fn flush_all<N: DirectNode>(nodes: &[N]) -> Result<()> {
    futures::future::try_join_all(nodes.iter().map(flush)).await?;
    Ok(())
}

/// One readiness probe: `INFO` answered, the node has finished loading its
/// data (a node restarted with an append-only file answers `INFO` while it
/// still refuses other commands with `LOADING`), and (when `expected_pid` is
/// given) by that very process rather than by some other server that happens
/// to hold the port.
pub(crate) async fn probe(url: &str, expected_pid: Option<u32>) -> bool {
    let exchange = async {
        let mut con = connect(url, PROBE_TIMEOUT).await?;
        // Every default section (server and persistence among them): `INFO` with several
        // section names is Redis 7+, and 6.2 refuses it.
        redis::cmd("INFO").query_async::<String>(&mut con).await
    };
    let Ok(Ok(info)) = tokio::time::timeout(PROBE_TIMEOUT, exchange).await else {
        return false;
    };
    if info.lines().any(|line| line.trim() == "loading:1") {
        return false;
    }
    match expected_pid {
        None => true,
        Some(pid) => info
            .lines()
            .filter_map(|line| line.strip_prefix("process_id:"))
            .any(|value| value.trim().parse::<u32>() == Ok(pid)),
    }
}

/// Polls until the node at `url` answers, for nodes the harness cannot watch
/// as a child process (containers).
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
pub(crate) async fn wait_until_answers(url: &str, node: &str) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if probe(url, None).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestkitError::Timeout {
                node: node.to_owned(),
                operation: "PING (readiness)",
                timeout: READY_TIMEOUT,
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}
