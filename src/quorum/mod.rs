//! The quorum coordinator: the Redlock algorithm over a set of [`LockNode`]s.
//!
//! The lock runs on it: [`Redlock`](crate::Redlock) with N nodes, or one
//! ([`RedisLock`](crate::RedisLock), a quorum of one). Each operation is a *round*:
//! the same command sent to every node at once, each reply bounded by the per-node timeout,
//! and the replies counted until the outcome is decided.
//!
//! - `votes`: the command a round sends to every node (over a [`Round`] of
//!   [`fan_out`](crate::fan_out)), and its replies counted into a [`Tally`] until a quorum
//!   agreed or can no longer agree; the fencing counters' rounds.
//! - `acquire`: one attempt (the lock round, the validity check, the rollback) and the
//!   blocking acquire that repeats it, with the drop guards that make both cancel-safe.
//! - `held`: what a held lock's [`Lease`] asks of the nodes: release, refresh, holds.
//! - `stragglers`: the requests a decided round leaves in flight.
//! - `cohorts`: the lines of this process's waiters, in which a released lock may pass to
//!   the next of them;
//! - `pass`: that pass ([`Baton`]), within the bounds of the coordinator's configuration.
//! - `claim`: an acquisition by another lock request than the mutex's ([`Claim`]: the
//!   sides of a read-write lock).
//! - `leader_record`: an election leader's record, written to and read from a quorum.
//!
//! An acquisition hands out a [`Lease`], not a guard: the guard sits above the
//! coordinator, which it calls for each of its operations.
//!
//! Time comes from `tokio::time::Instant`, a monotonic clock that tokio lets tests pause
//! and advance, so the same code runs on a simulated timeline.
//!
//! [`Tally`]: crate::Tally
//! [`Round`]: crate::fan_out::Round
//! [`Lease`]: crate::lease::Lease

mod acquire;
pub(crate) mod claim;
mod cohorts;
mod held;
mod leader_record;
mod pass;
mod renewal;
mod stragglers;
mod votes;

use std::sync::Arc;

use crate::config::LockConfig;
use crate::error::{LockError, Tally};
use crate::fan_out::NodeSet;
use crate::handoff::HandOff;
use crate::lease::Lease;
use crate::metrics::{Counters, NodeMetrics};
use crate::node::LockNode;
use crate::observe::Observed;
use crate::resource::KeyLayout;

use self::cohorts::Cohorts;

/// How many of `nodes` nodes must agree for an operation to succeed: a majority,
/// `nodes / 2 + 1` (1 of 1, 2 of 3, 3 of 5). Any two majorities of the same nodes share a
/// node, which is what a lock's exclusion and the fencing counters' order rest on.
///
/// ```
/// assert_eq!(quorumlock::quorum_of(1), 1);
/// assert_eq!(quorumlock::quorum_of(4), 3);
/// assert_eq!(quorumlock::quorum_of(5), 3);
/// ```
pub const fn quorum_of(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The Redlock algorithm over a fixed set of nodes with one configuration.
pub(crate) struct Coordinator {
    nodes: NodeSet,
    counters: Arc<Counters>,
    /// Per-node counters, the failing-node warnings and the metrics handles.
    observed: Arc<Observed>,
    /// The turns, queue places and announcements of the blocking acquisitions.
    hand_off: Arc<HandOff>,
    /// The lines of this process's waiters that a release may pass its lock to.
    cohorts: Arc<Cohorts<Baton>>,
    config: LockConfig,
    /// How the keys are laid out on the nodes: a fact of the node set, not of the
    /// configuration.
    layout: KeyLayout,
    quorum: usize,
    /// The tallies of won rounds that met no refusal or failure, by how many nodes had
    /// agreed when the quorum was decided: nearly every lease is won so, and shares one of
    /// these instead of keeping a copy (see `won_tally`).
    clean_tallies: Arc<[Arc<Tally>]>,
}

/// A held lock on its way from one task to the next (see `pass`): the passer's lease,
/// ended as passed, and the coordinator that granted it. Taken, it becomes the receiver's
/// lease; dropped untaken (its receiver gave up meanwhile), it goes to the next seat, or
/// to the nodes.
pub(crate) struct Baton {
    coordinator: Arc<Coordinator>,
    lease: Option<Arc<Lease>>,
}

impl Coordinator {
    /// A coordinator over `nodes`, which must be non-empty and have distinct names.
    pub(crate) fn new(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Self::with_counters(nodes, config, Arc::default())
    }

    /// [`new`](Self::new), counting into `counters`, which the nodes may share.
    pub(crate) fn with_counters(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
        counters: Arc<Counters>,
    ) -> Result<Self, LockError> {
        if nodes.is_empty() {
            return Err(LockError::InvalidNode {
                node: "(none)".to_owned(),
                reason: "a lock needs at least one node".to_owned(),
            });
        }
        for (i, node) in nodes.iter().enumerate() {
            if nodes[..i]
                .iter()
                .any(|earlier| earlier.name() == node.name())
            {
                return Err(LockError::InvalidNode {
                    node: node.name().to_owned(),
                    reason: "listed twice; the nodes of a quorum must be independent servers"
                        .to_owned(),
                });
            }
        }
        let quorum = quorum_of(nodes.len());
        let observed = Arc::new(Observed::new(&nodes));
        let nodes: NodeSet = nodes.into();
        Ok(Coordinator {
            hand_off: Arc::new(HandOff::new(Arc::clone(&nodes), quorum)),
            cohorts: Arc::default(),
            clean_tallies: (0..=nodes.len())
                .map(|granted| {
                    Arc::new(Tally {
                        nodes: nodes.len(),
                        quorum,
                        granted,
                        ..Tally::default()
                    })
                })
                .collect(),
            nodes,
            counters,
            observed,
            config,
            layout: KeyLayout::Plain,
            quorum,
        })
    }

    /// A coordinator over the Redis nodes of `nodes`, connected and checked at once (see
    /// [`backend::connect`](crate::backend::connect)), the nodes counting into the
    /// coordinator's counters, the keys in the layout the nodes need.
    pub(crate) async fn connected(
        nodes: &crate::backend::Nodes,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        let counters = Arc::default();
        let quorum = quorum_of(nodes.len());
        let connected = crate::backend::connect(nodes, &config, quorum, &counters).await?;
        let mut coordinator = Self::with_counters(connected.nodes, config, counters)?;
        coordinator.layout = connected.layout;
        Ok(coordinator)
    }

    /// The same nodes with another configuration.
    pub(crate) fn with_config(&self, config: LockConfig) -> Self {
        Coordinator {
            nodes: Arc::clone(&self.nodes),
            counters: Arc::clone(&self.counters),
            observed: Arc::clone(&self.observed),
            hand_off: Arc::clone(&self.hand_off),
            cohorts: Arc::clone(&self.cohorts),
            config,
            layout: self.layout,
            quorum: self.quorum,
            clean_tallies: Arc::clone(&self.clean_tallies),
        }
    }

    pub(crate) fn config(&self) -> &LockConfig {
        &self.config
    }

    /// How the keys of a lock are laid out on these nodes.
    pub(crate) fn layout(&self) -> KeyLayout {
        self.layout
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn nodes(&self) -> &[Arc<dyn LockNode>] {
        &self.nodes
    }

    /// The counters every lock on these connections counts into.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The lines of this process's waiters, shared by every lock on these connections.
    pub(crate) fn cohorts(&self) -> &Arc<Cohorts<Baton>> {
        &self.cohorts
    }

    pub(crate) fn node_metrics(&self) -> Vec<NodeMetrics> {
        let mut metrics = self.observed.snapshot();
        for (node, metrics) in self.nodes.iter().zip(&mut metrics) {
            metrics.excluded = node.excluded();
        }
        metrics
    }

    /// Whether `other` runs on the very same node connections.
    pub(crate) fn shares_nodes_with(&self, other: &Coordinator) -> bool {
        Arc::ptr_eq(&self.nodes, &other.nodes)
    }
}
