//! [`HandOff`]: what the blocking acquisitions on one set of node connections share.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::OnceCell;

use super::turns::LocalQueues;
use super::watches::ReleaseWatches;
use crate::config::micros;
use crate::fan_out::{spawn_detached, NodeSet, Round};
use crate::node::QueuePlace;
use crate::protocol::keys::waiter_id;
use crate::resource::Keys;
use crate::token::LockToken;

/// The hand-off state of one set of node connections, shared by every lock on them (clones,
/// other configurations, factories): this client's id in the nodes' queues, the turns of
/// this process's waiters, and the watch of the reservations the nodes announce to it.
pub(crate) struct HandOff {
    nodes: NodeSet,
    quorum: usize,
    pub(super) queues: Arc<LocalQueues>,
    /// This client's id in the nodes' queues: the nodes announce the keys they reserve for
    /// its waiters on a channel of its own (see [`QueuePlace::waiter`]).
    client: Arc<str>,
    /// The announcements of those reservations, watched from the first queued wait on.
    reservations: OnceCell<Option<ReleaseWatches>>,
}

impl HandOff {
    /// The hand-off over `nodes`, whose announcements wake waiters once `quorum` of them
    /// made one.
    pub(crate) fn new(nodes: NodeSet, quorum: usize) -> Self {
        HandOff {
            nodes,
            quorum,
            queues: Arc::default(),
            client: LockToken::generate().as_str().into(),
            reservations: OnceCell::new(),
        }
    }

    /// This client's watches of reservations, made on the first call and shared by every
    /// waiter after; each call returns a copy that sees the announcements made from now on.
    /// `None` without `notify_releases`, or when no node announces them.
    pub(super) async fn reservation_watches(
        &self,
        notify_releases: bool,
    ) -> Option<ReleaseWatches> {
        if !notify_releases {
            return None;
        }
        self.reservations
            .get_or_init(|| {
                ReleaseWatches::start_reservations(&self.nodes, &self.client, self.quorum)
            })
            .await
            .clone()
    }

    /// Whether blocking acquisitions of `keys` in this process contend: one holds or waits
    /// for their turn, or found them held within the last second.
    pub(crate) fn contended_here(&self, keys: &Keys) -> bool {
        self.queues.has_waiters(keys) || self.queues.recently_contended(keys)
    }

    /// Remembers that a node refused `keys` just now: a blocking acquire of them in this
    /// process expects to wait for a while, and queues with its first attempt.
    pub(crate) fn found_held(&self, keys: &Keys) {
        self.queues.note_contended(keys);
    }

    /// Starts watching the releases of `key` on every node; `None` when no node announces
    /// them.
    pub(super) async fn release_watches(&self, key: &str) -> Option<ReleaseWatches> {
        ReleaseWatches::start(&self.nodes, key, self.quorum).await
    }

    /// A new place in the queues, for one blocking acquisition that began at `began`; it
    /// lapses after `lifetime` unless an attempt refreshes it. Its ticket is when the
    /// acquisition began, so it queues behind every waiter that began before it.
    pub(super) fn queue_place(&self, began: SystemTime, lifetime: Duration) -> QueuePlace {
        let ticket = began
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, micros);
        QueuePlace {
            waiter: LockToken::from_string(waiter_id(&self.client, LockToken::generate().as_str())),
            ticket,
            lifetime,
        }
    }

    /// Takes `waiter` out of the queue of `keys` on every node, each request bounded by
    /// `timeout`; a reservation it had, or a key granted to it, goes to the next in line.
    pub(crate) async fn leave_queues(&self, keys: &Keys, waiter: &LockToken, timeout: Duration) {
        let in_flight = Round::fan_out(&self.nodes, 0..self.nodes.len(), timeout, |_, node| {
            let keys = keys.clone();
            let waiter = waiter.clone();
            async move { node.leave_queue(&keys, &waiter).await }
        });
        in_flight.finish().await;
    }

    /// [`leave_queues`](Self::leave_queues) in the background.
    pub(super) fn leave_queues_in_background(
        self: Arc<Self>,
        keys: Keys,
        waiter: LockToken,
        timeout: Duration,
    ) {
        spawn_detached(async move { self.leave_queues(&keys, &waiter, timeout).await });
    }
}
