//! Stragglers: the requests a decided round leaves in flight. A round returns as soon as a
//! quorum decided it, but the requests to the other nodes are not abandoned: each goes out,
//! and what lands after the lease ended is undone.

use std::sync::Arc;

use futures::FutureExt;
use tokio::time::Instant;

use super::votes::{Answer, InFlight};
use super::Coordinator;
use crate::fan_out::spawn_detached;
use crate::handoff::Heard;
use crate::lease::Lease;
use crate::token::LockToken;

impl Coordinator {
    /// The lease of a won round, with what the round left in flight taken care of.
    ///
    /// The lock requests still in flight go out when polled: on nodes that answer, each is
    /// then queued on its open connection, and lands before the release's unlock on the
    /// same connection, awaited or not (the node keeps a dropped request until its answer).
    /// Only when some node may not have sent its request yet (still connecting) do they
    /// need a task to drive them, and the release must tell that task what its unlocks
    /// found. A queued winner always keeps one: it leaves the queues of the nodes that did
    /// not grant it the lock, since it could otherwise be picked there for a reservation
    /// later.
    pub(super) fn lease_won(
        self: &Arc<Self>,
        lease: Lease,
        mut in_flight: InFlight,
        waiter: Option<LockToken>,
        answers: &[Option<Answer>],
        heard: Option<Heard>,
    ) -> Arc<Lease> {
        if waiter.is_none() {
            drain_ready(&mut in_flight);
        }
        let settle_late_sets =
            !in_flight.is_empty() && (waiter.is_some() || !self.all_send_when_polled(&in_flight));
        let lease = Arc::new(if settle_late_sets {
            lease.tracking_unlocks(self.nodes.len())
        } else {
            lease
        });
        let refused_by: Vec<usize> = match waiter {
            Some(_) => (0..self.nodes.len())
                .filter(|&index| matches!(answers[index], Some(Answer::Refused | Answer::Failed)))
                .collect(),
            None => Vec::new(),
        };
        if settle_late_sets || !refused_by.is_empty() {
            let stragglers = Stragglers {
                in_flight,
                lease: Arc::clone(&lease),
                waiter,
                refused_by,
                heard,
            };
            spawn_detached(Arc::clone(self).finish_stragglers(stragglers));
        }
        lease
    }

    /// Lets the `SET`s still in flight when a quorum granted the lock finish, so the lock
    /// ends up on every node that answers, not on a bare quorum. A `SET` that lands after
    /// the lease was released (a node still connecting, its request queued behind the
    /// release, or sent by this task after the release) is undone on that node, and so is
    /// one whose reply never came, as it may have landed.
    ///
    /// It holds the lease itself, not a weak reference: a guard released with
    /// `release().await` is gone by the time such a late `SET` lands, and the `SET` must
    /// still be undone. A guard dropped with `auto_release` off never ends its lease, so its
    /// late `SET`s stay, like the rest of its keys, until the TTL.
    ///
    /// A queued waiter also leaves the queue of each node that did not grant it the lock,
    /// once that node answered.
    pub(super) async fn finish_stragglers(self: Arc<Self>, stragglers: Stragglers) {
        let Stragglers {
            mut in_flight,
            lease,
            waiter,
            mut refused_by,
            heard,
        } = stragglers;
        let timeout = self.config.node_timeout();
        // A winner of the direct grant hears the other nodes' grants, which the same
        // releases made a moment later: a node that granted it the lock took its place out
        // of line, and needs no leave (two requests per contended acquisition on five
        // nodes). Those not heard of within a node timeout are left. A grant heard after
        // the lease was released may have come after the release reached that node (the
        // earlier holder's release reached it late), and is given back.
        if let Some(mut heard) = heard {
            let until = Instant::now() + timeout;
            while !refused_by.is_empty() {
                let Some(index) = heard.next(until).await else {
                    break;
                };
                refused_by.retain(|&refused| refused != index);
                if lease.keys_given_up() {
                    let node = Arc::clone(&self.nodes[index]);
                    let undo = node.unlock(&lease.keys, &lease.token);
                    let _ = tokio::time::timeout(timeout, undo).await;
                }
            }
        }
        let leave = |index: usize| {
            let node = Arc::clone(&self.nodes[index]);
            let keys = lease.keys.clone();
            let waiter = waiter.clone();
            async move {
                if let Some(waiter) = waiter {
                    let leave = node.leave_queue(&keys, &waiter);
                    let _ = tokio::time::timeout(timeout, leave).await;
                }
            }
        };
        futures::future::join_all(refused_by.into_iter().map(leave)).await;
        while let Some((index, reply, _)) = in_flight.next().await {
            if !matches!(reply, Ok(true)) {
                leave(index).await;
            }
            // A node that said no took nothing. One that failed or timed out may have taken
            // the keys all the same (its reply lost), so it is undone like a late grant.
            if matches!(reply, Ok(false)) || !lease.keys_given_up() {
                continue;
            }
            // The release's own unlock, sent after this SET on the same connection, deleted
            // the keys in the usual case; undo the SET only where it did not (the release
            // may have come before this SET was sent, as a straggler is sent by this task).
            if let Some(unlocks) = lease.unlocks() {
                if unlocks.deleted_on(index, timeout).await {
                    continue;
                }
            }
            let node = Arc::clone(&self.nodes[index]);
            let _ = tokio::time::timeout(timeout, node.unlock(&lease.keys, &lease.token)).await;
        }
        if let Some(unlocks) = lease.unlocks() {
            unlocks.settle();
        }
    }

    /// Lets the requests of a decided round still in flight reach their nodes. Each is
    /// polled once more (a request never polled has not gone out); then those to nodes that
    /// send when polled need nobody to await them, and the others are driven to the end in
    /// the background.
    pub(super) fn let_finish(&self, mut in_flight: InFlight) {
        drain_ready(&mut in_flight);
        if !self.all_send_when_polled(&in_flight) {
            finish_in_background(in_flight);
        }
    }

    /// Whether every request still in flight in `round` has gone out to its node for sure
    /// (see [`NodeHints::sends_when_polled`](crate::node::NodeHints::sends_when_polled)), once polled.
    fn all_send_when_polled(&self, round: &InFlight) -> bool {
        round
            .pending()
            .iter()
            .all(|&index| self.nodes[index].sends_when_polled())
    }
}

/// What a won round leaves to finish in the background; see
/// [`Coordinator::finish_stragglers`].
pub(super) struct Stragglers {
    in_flight: InFlight,
    lease: Arc<Lease>,
    /// The winner as the queues know it, when it won as a queued waiter: it leaves the
    /// lines of the nodes that did not grant it the lock.
    waiter: Option<LockToken>,
    /// The nodes that answered the round without granting the lock.
    refused_by: Vec<usize>,
    /// A winner of the direct grant: the grants of its winning refresh, heard of from
    /// before it was sent.
    heard: Option<Heard>,
}

/// Records in `lease` what each unlock of a release still in flight answers, for
/// [`Coordinator::finish_stragglers`].
pub(super) async fn record_unlocks(mut in_flight: InFlight, lease: Arc<Lease>) {
    while let Some((index, reply, _)) = in_flight.next().await {
        if let Some(unlocks) = lease.unlocks() {
            unlocks.record(index, matches!(reply, Ok(true)));
        }
    }
}

/// Takes the answers `in_flight` already has, without waiting: polls each request once
/// more, so that every one not polled yet (a decided round need not have polled them all)
/// goes out.
fn drain_ready(in_flight: &mut InFlight) {
    while let Some(Some(_)) = in_flight.next().now_or_never() {}
}

/// Lets the requests of a decided round still in flight reach their nodes, driven by a
/// task: a request whose future was never polled has not been sent yet.
pub(super) fn finish_in_background(in_flight: InFlight) {
    if !in_flight.is_empty() {
        spawn_detached(in_flight.finish());
    }
}
