//! A lock's [`Nodes`] connected: a [`RedisNode`] for each member, connected and checked
//! at once, with the facts of the deployment the coordinator needs (the key layout).

use std::sync::Arc;

use super::identity::{Admission, Rejection};
use super::nodes::Nodes;
use super::redis_node::{NodeSetup, NodeTimeouts, RedisNode};
use crate::config::LockConfig;
use crate::error::LockError;
use crate::metrics::Counters;
use crate::node::LockNode;
use crate::resource::KeyLayout;

/// A node set connected for one lock.
pub(crate) struct Connected {
    /// One node per member, in the order given.
    pub(crate) nodes: Vec<Arc<dyn LockNode>>,
    /// How the lock's keys are laid out on them.
    pub(crate) layout: KeyLayout,
}

/// The nodes of `nodes` for a lock with `config`, counting into `counters`, connected and
/// checked at once: a rule of the node set broken (see [`Nodes::check`]), a server that
/// cannot serve the lock (see [`identity`](super::identity)), or one that another member
/// reaches too, is an error. A node that cannot be reached now is kept: it counts as
/// failed until it comes back, and is checked then.
pub(crate) async fn connect(
    nodes: &Nodes,
    config: &LockConfig,
    counters: &Arc<Counters>,
) -> Result<Connected, LockError> {
    nodes.check(config)?;
    let deployment = nodes.deployment();
    let setup = NodeSetup {
        timeouts: NodeTimeouts {
            connect: deployment.connect_timeout,
            request: config.node_timeout(),
        },
        admission: Arc::new(Admission::new(
            config.fencing() && !deployment.fencing_on_volatile_nodes,
        )),
        counters: Arc::clone(counters),
        announce: config.notify_releases(),
        replica_acks: deployment.replica_acks,
    };
    let made: Vec<RedisNode> = nodes
        .addresses()
        .iter()
        .zip(nodes.clients()?)
        .map(|(address, client)| RedisNode::open(client, address.name().to_owned(), &setup))
        .collect::<Result<_, _>>()?;
    let checks = futures::future::join_all(made.iter().map(RedisNode::check)).await;
    for (node, check) in made.iter().zip(checks) {
        match check {
            Ok(()) => {}
            Err(Rejection::Refused(refusal)) => {
                return Err(LockError::InvalidNode {
                    node: node.name().to_owned(),
                    reason: refusal.to_string(),
                })
            }
            Err(Rejection::Failed(reason)) => {
                tracing::warn!(node = %node.name(), %reason, "node unreachable; it counts as failed until it answers");
            }
        }
    }
    Ok(Connected {
        nodes: made
            .into_iter()
            .map(|node| Arc::new(node) as Arc<dyn LockNode>)
            .collect(),
        layout: nodes.layout(),
    })
}
