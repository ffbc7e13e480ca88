//! [`Transport`]: how a [`RedisNode`](super::RedisNode) reaches its server: one
//! multiplexed connection to a standalone master ([`Link`]), or a Redis Cluster through the
//! cluster client ([`ClusterLink`]). The requests and scripts are the same on both; only
//! the routing differs.

use std::sync::Arc;

use redis::{Cmd, RedisResult, Value};
use tokio::time::Instant;

use super::cluster::ClusterLink;
use super::identity::Rejection;
use super::link::Link;

/// The way to one node's server or servers.
#[derive(Clone)]
pub(crate) enum Transport {
    /// A standalone master (or the master a Sentinel names).
    Server(Arc<Link>),
    /// A Redis Cluster, one member of the lock.
    Cluster(Arc<ClusterLink>),
}

impl Transport {
    /// Sends `command`, made at `now`, and returns the reply.
    pub(crate) async fn send(self, command: &Cmd, now: Instant) -> RedisResult<Value> {
        match self {
            Transport::Server(link) => link.send(command, now).await,
            Transport::Cluster(link) => link.send(command).await,
        }
    }

    /// Sends `command` where the write to `key` just went: on the same connection to a
    /// standalone master, to the master of `key`'s slot on a cluster.
    pub(crate) async fn send_after_write(
        self,
        key: &str,
        command: &Cmd,
        now: Instant,
    ) -> RedisResult<Value> {
        match self {
            Transport::Server(link) => link.send(command, now).await,
            Transport::Cluster(link) => link.send_to_master_of(key, command).await,
        }
    }

    /// Whether a request goes out when first polled (see
    /// [`NodeHints::sends_when_polled`](crate::node::NodeHints::sends_when_polled)): on an open
    /// connection to one server. A cluster request first passes the cluster client's
    /// task, so the coordinator drives it to its end instead of assuming it went out.
    pub(crate) fn is_open(&self) -> bool {
        match self {
            Transport::Server(link) => link.is_open(),
            Transport::Cluster(_) => false,
        }
    }

    /// Whether requests take effect in the order they were sent (see
    /// [`NodeHints::applies_in_order`](crate::node::NodeHints::applies_in_order)): over one
    /// connection to a server, yes; the cluster client routes each on its own, and follows
    /// redirects for some.
    pub(crate) fn applies_in_order(&self) -> bool {
        matches!(self, Transport::Server(_))
    }

    /// Whether one script call must keep to one hash slot: on a Redis Cluster.
    pub(crate) fn routes_by_slot(&self) -> bool {
        matches!(self, Transport::Cluster(_))
    }

    /// Why the node counts as failed without being asked (refused, or abstaining), while
    /// it does.
    pub(crate) fn exclusion(&self) -> Option<String> {
        match self {
            Transport::Server(link) => link.exclusion(),
            Transport::Cluster(link) => link.exclusion(),
        }
    }

    /// Connects now and checks who answers.
    pub(crate) async fn connect(&self) -> Result<(), Rejection> {
        match self {
            Transport::Server(link) => link.connect().await,
            Transport::Cluster(link) => link.connect().await,
        }
    }
}
