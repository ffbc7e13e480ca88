//! [`ProxiedCluster`]: a [`RedisCluster`] with a [`FaultProxy`] in front of each node.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::time::Instant;

use super::FaultProxy;
use crate::cluster::RedisCluster;
use crate::error::TestkitError;
use crate::options::NodeOptions;
use crate::process::RedisProcess;
use crate::state::NodeState;

/// How long a restarted node may take to load its data.
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`RedisCluster`] with a [`FaultProxy`] in front of each node: network
/// faults through the proxies, process faults (kill, freeze, restart)
/// through the nodes.
///
/// Give clients [`urls`](Self::urls) (the proxies); use the nodes' own
/// helpers ([`node`](Self::node)`(i).get(..)`, [`RedisCluster::keys`]) for
/// direct assertions, which bypass the proxies. A node keeps its port across
/// restarts, so its proxy keeps working.
#[derive(Debug)]
pub struct ProxiedCluster {
    // Declared first so the proxies stop before the nodes are killed.
    proxies: Vec<FaultProxy>,
    cluster: RedisCluster,
}

impl ProxiedCluster {
    /// Starts `n` nodes with default [`NodeOptions`] and a proxy in front of each.
    pub async fn start(n: usize) -> Result<ProxiedCluster, TestkitError> {
        Self::start_with(n, NodeOptions::default()).await
    }

    /// Starts `n` nodes with `options` and a proxy in front of each.
    pub async fn start_with(
        n: usize,
        options: NodeOptions,
    ) -> Result<ProxiedCluster, TestkitError> {
        let cluster = RedisCluster::start_with(n, options).await?;
        Self::wrap(cluster).await
    }

    /// Puts a proxy in front of each node of a running cluster.
    pub async fn wrap(cluster: RedisCluster) -> Result<ProxiedCluster, TestkitError> {
        let mut proxies = Vec::with_capacity(cluster.len());
        for node in cluster.nodes() {
            let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, node.port()));
            proxies.push(FaultProxy::start(upstream).await?);
        }
        Ok(ProxiedCluster { proxies, cluster })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.cluster.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty()
    }

    /// The URLs of the proxies, in node order, with each node's password if
    /// it has one: what clients under test connect to.
    pub fn urls(&self) -> Vec<String> {
        self.proxies
            .iter()
            .zip(self.cluster.nodes())
            .map(|(proxy, node)| node.options().url("127.0.0.1", proxy.port()))
            .collect()
    }

    /// The nodes' own URLs, bypassing the proxies.
    pub fn direct_urls(&self) -> Vec<String> {
        self.cluster.urls()
    }

    /// The proxy in front of node `i`.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn proxy(&self, i: usize) -> &FaultProxy {
        &self.proxies[i]
    }

    /// Every proxy, in node order.
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }

    /// Node `i` (for direct assertions).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisProcess {
        self.cluster.node(i)
    }

    /// Node `i`, mutably (to kill, freeze, thaw or restart it).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisProcess {
        self.cluster.node_mut(i)
    }

    /// The nodes behind the proxies.
    pub fn cluster(&self) -> &RedisCluster {
        &self.cluster
    }

    /// The nodes behind the proxies, mutably.
    pub fn cluster_mut(&mut self) -> &mut RedisCluster {
        &mut self.cluster
    }

    /// Ends every fault: heals every proxy, thaws frozen nodes and restarts
    /// stopped ones, and waits until restarted nodes have loaded their data.
    pub async fn heal_all(&mut self) -> Result<(), TestkitError> {
        for proxy in &self.proxies {
            proxy.heal().await?;
        }
        for node in self.cluster.nodes_mut() {
            match node.state() {
                NodeState::Running => {}
                NodeState::Frozen => node.thaw().await?,
                NodeState::Stopped => {
                    node.restart().await?;
                    wait_until_loaded(node).await?;
                }
            }
        }
        Ok(())
    }
}

/// Waits until a freshly (re)started node serves reads: it answers `INFO` (the
/// harness's readiness probe) while it still loads its AOF, but refuses data
/// commands with `LOADING` until done.
pub(crate) async fn wait_until_loaded(node: &RedisProcess) -> Result<(), TestkitError> {
    let deadline = Instant::now() + LOAD_TIMEOUT;
    loop {
        match node.get("quorumlock:testkit:loaded-probe").await {
            Ok(_) => return Ok(()),
            Err(err) if err.to_string().to_lowercase().contains("loading") => {
                if Instant::now() >= deadline {
                    return Err(TestkitError::Timeout {
                        node: node.address(),
                        operation: "waiting for the dataset to load",
                        timeout: LOAD_TIMEOUT,
                    });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(err) => return Err(err),
        }
    }
}
