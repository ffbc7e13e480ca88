//! [`RedisCluster`]: `n` local `redis-server` processes, started together and stopped
//! together.

use crate::binary::ServerBinary;
use crate::direct::{flush_all, keys_on_all, keys_on_running};
use crate::error::TestkitError;
use crate::options::NodeOptions;
use crate::ports::free_ports;
use crate::process::RedisProcess;

/// `n` independent local redis-server nodes (not a Redis Cluster deployment:
/// the nodes know nothing of each other, as Redlock requires).
///
/// Dropping the cluster kills every node and removes their directories.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisProcess>,
}

impl RedisCluster {
    /// Starts `n` independent redis-server processes on free 127.0.0.1 ports,
    /// with default [`NodeOptions`], and waits until each answers.
    pub async fn start(n: usize) -> Result<RedisCluster, TestkitError> {
        Self::start_with(n, NodeOptions::default()).await
    }

    /// Starts `n` nodes with the given options (see [`start`](Self::start)).
    pub async fn start_with(n: usize, options: NodeOptions) -> Result<RedisCluster, TestkitError> {
        let binary = ServerBinary::locate().await?;
        // Distinct ports for the nodes of one cluster, free until the servers start.
        let ports = free_ports(n)?;
        // On error, the nodes already started are dropped, hence killed.
        let nodes = futures::future::try_join_all(
            ports
                .into_iter()
                .map(|port| RedisProcess::start(binary.clone(), options.clone(), port)),
        )
        .await?;
        Ok(RedisCluster { nodes })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes' URLs, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProcess::url).collect()
    }

    /// Every node's TLS URL ([`RedisProcess::tls_url`]), in node order; empty unless the
    /// nodes run with [`NodeOptions::tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(RedisProcess::tls_url)
            .collect()
    }

    /// Node `i`.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisProcess {
        &self.nodes[i]
    }

    /// Node `i`, mutably (to kill, freeze, thaw or restart it).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisProcess {
        &mut self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[RedisProcess] {
        &self.nodes
    }

    /// All nodes, mutably.
    pub fn nodes_mut(&mut self) -> &mut [RedisProcess] {
        &mut self.nodes
    }

    /// Every key matching `pattern` on every node (`SCAN`, not `KEYS`),
    /// indexed by node, each list sorted. Fails if any node is frozen or
    /// stopped; see [`keys_on_running`](Self::keys_on_running).
    pub async fn keys(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        keys_on_all(&self.nodes, pattern).await
    }

    /// Like [`keys`](Self::keys), but frozen and stopped nodes yield an empty list.
    pub async fn keys_on_running(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        keys_on_running(&self.nodes, pattern).await
    }

    /// `FLUSHALL` on every node. Fails if any node is frozen or stopped.
    pub async fn flush_all(&self) -> Result<(), TestkitError> {
        flush_all(&self.nodes).await
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Signal every node first so they die in parallel; each node's own
        // Drop then only has to reap.
        for node in &mut self.nodes {
            node.start_kill_quietly();
        }
    }
}
