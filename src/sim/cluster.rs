//! [`SimCluster`]: N simulated nodes and the locks over them.

use std::sync::Arc;

use super::log::OpRecord;
use super::node::SimNode;
use crate::config::LockConfig;
use crate::error::LockError;
use crate::node::LockNode;
use crate::redlock::Redlock;
use crate::token::LockToken;

/// N independent [`SimNode`]s, named `sim-0` to `sim-{N-1}`, and [`Redlock`]s over them.
///
/// Each lock client of a test gets its own [`Redlock`] from
/// [`redlock_for`](Self::redlock_for), so that the nodes' logs tell whose requests are
/// whose; [`redlock`](Self::redlock) makes an anonymous one. Faults are injected through
/// [`node`](Self::node).
///
/// ```
/// use quorumlock::sim::SimCluster;
/// use quorumlock::{DistributedLock, LockConfig};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let cluster = SimCluster::new(5);
/// let lock = cluster.redlock(LockConfig::default()).unwrap();
/// cluster.node(0).crash();
/// cluster.node(1).lose_replies(true); // frozen: only the per-node timeout ends the wait
/// let guard = lock.acquire("job").await.unwrap();
/// assert_eq!(cluster.holders("job").iter().flatten().count(), 3);
/// guard.release().await.unwrap();
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct SimCluster {
    nodes: Vec<SimNode>,
}

impl SimCluster {
    /// `n` nodes, up and empty, named `sim-0` to `sim-{n-1}`.
    pub fn new(n: usize) -> Self {
        SimCluster {
            nodes: (0..n).map(|i| SimNode::new(format!("sim-{i}"))).collect(),
        }
    }

    /// A cluster of the given nodes (for example built with names of one's own).
    pub fn from_nodes(nodes: Vec<SimNode>) -> Self {
        SimCluster { nodes }
    }

    /// Makes every node announce releases (`on`) or stop; see
    /// [`SimNode::announce_releases`].
    pub fn announce_releases(&self, on: bool) {
        for node in &self.nodes {
            node.announce_releases(on);
        }
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node at `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range, as slice indexing does.
    pub fn node(&self, index: usize) -> &SimNode {
        &self.nodes[index]
    }

    /// All the nodes, in order.
    pub fn nodes(&self) -> &[SimNode] {
        &self.nodes
    }

    /// The nodes as [`LockNode`]s, for [`Redlock::from_nodes`].
    pub fn lock_nodes(&self) -> Vec<Arc<dyn LockNode>> {
        self.nodes.iter().map(SimNode::to_lock_node).collect()
    }

    /// The nodes as [`LockNode`]s whose requests are logged under `client`.
    pub fn lock_nodes_for(&self, client: &str) -> Vec<Arc<dyn LockNode>> {
        self.nodes
            .iter()
            .map(|node| node.for_client(client).to_lock_node())
            .collect()
    }

    /// A [`Redlock`] over all the nodes.
    pub fn redlock(&self, config: LockConfig) -> Result<Redlock, LockError> {
        Redlock::from_nodes(self.lock_nodes(), config)
    }

    /// A [`Redlock`] over all the nodes whose requests are logged under `client`.
    pub fn redlock_for(&self, client: &str, config: LockConfig) -> Result<Redlock, LockError> {
        Redlock::from_nodes(self.lock_nodes_for(client), config)
    }

    /// The token live under `key` on each node, in node order.
    pub fn holders(&self, key: &str) -> Vec<Option<LockToken>> {
        self.nodes.iter().map(|node| node.get(key)).collect()
    }

    /// Every node's log, each record with its node's index, ordered by the time the
    /// request was sent (the order of each node's log is kept among equal times).
    pub fn log(&self) -> Vec<(usize, OpRecord)> {
        let mut log: Vec<(usize, OpRecord)> = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(index, node)| node.log().into_iter().map(move |record| (index, record)))
            .collect();
        log.sort_by_key(|(_, record)| record.sent_at);
        log
    }
}
