//! [`ReleaseWatches`]: the announcements a waiter wakes on, gathered from every node that
//! makes them: the releases of one key, or the keys reserved for this client's waiters.

use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FusedFuture};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rand::Rng;

use crate::fan_out::poll_first;
use crate::node::{Announcement, GrantStamp, LockNode, ReleaseWatch};

/// After a hand-off wake-up, each waiter pauses a random moment before its attempt, so
/// that the waiters of different processes woken by one release do not all send their
/// `SET NX` at once and split the votes. The window starts at the duration of the waiter's
/// last round and doubles with each wake-up it lost (binary exponential backoff, as on a
/// shared Ethernet segment), so however many waiters there are, they spread out after a
/// few collisions; it never exceeds this cap. (Waiters of one process do not race at all:
/// they take turns, see [`LocalQueues`](super::turns::LocalQueues).)
const MAX_WAKE_SPREAD: Duration = Duration::from_millis(50);

/// Release announcements from every node that can make them: of one key (for waiters that
/// race), or of the keys reserved for one client's queued waiters (for waiters in line).
#[derive(Clone)]
pub(crate) struct ReleaseWatches {
    watches: Vec<ReleaseWatch>,
    /// The index among the lock's nodes of each watch's node.
    nodes: Vec<usize>,
    /// How many nodes must announce a release before waiters wake: the lock's quorum (or
    /// every watch, when fewer nodes can announce). Fewer announcements come from the
    /// rollback of a failed attempt, which cannot free a quorum.
    needed: usize,
}

impl ReleaseWatches {
    /// Starts watching releases of `key` on every node at once; `None` when no node
    /// announces releases.
    pub(crate) async fn start(
        nodes: &[Arc<dyn LockNode>],
        key: &str,
        quorum: usize,
    ) -> Option<Self> {
        let watches = nodes
            .iter()
            .enumerate()
            .map(|(index, node)| node.watch_releases(key).map(move |watch| (index, watch)));
        Self::gather(watches, quorum).await
    }

    /// Starts watching, on every node at once, the keys reserved for the queued waiters of
    /// `client`; `None` when no node announces them.
    pub(crate) async fn start_reservations(
        nodes: &[Arc<dyn LockNode>],
        client: &str,
        quorum: usize,
    ) -> Option<Self> {
        let watches = nodes.iter().enumerate().map(|(index, node)| {
            node.watch_reservations(client)
                .map(move |watch| (index, watch))
        });
        Self::gather(watches, quorum).await
    }

    /// The watches of the nodes that made one, each with its node's index.
    async fn gather(
        watches: impl Iterator<Item = impl Future<Output = (usize, Option<ReleaseWatch>)>>,
        quorum: usize,
    ) -> Option<Self> {
        let (nodes, watches): (Vec<usize>, Vec<ReleaseWatch>) = watches
            .collect::<FuturesUnordered<_>>()
            .filter_map(|(index, watch)| async move { watch.map(|watch| (index, watch)) })
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .unzip();
        if watches.is_empty() {
            return None;
        }
        let needed = quorum.min(watches.len());
        Some(ReleaseWatches {
            watches,
            nodes,
            needed,
        })
    }

    /// Forgets the announcements so far: only releases after this point wake the next wait.
    pub(crate) fn mark_seen(&mut self) {
        self.watches.iter_mut().for_each(ReleaseWatch::mark_seen);
    }

    /// Waits until enough nodes announced the key free since the last
    /// [`mark_seen`](Self::mark_seen), then a random spread up to `round` (the last round's
    /// duration) doubled `collisions` times, so that the waiters woken together do not
    /// split the votes; or until `fallback` passed, whichever comes first.
    pub(crate) async fn wait(&mut self, fallback: Duration, round: Duration, collisions: u32) {
        let released = async {
            loop {
                let releases = self.next_releases().await;
                // A key reserved for a queued waiter is not free: keep waiting.
                if releases
                    .iter()
                    .any(|(_, announced)| announced.next_waiter.is_none())
                {
                    return;
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep(fallback) => {}
            () = released => {
                let window = round
                    .saturating_mul(1 << collisions.min(16))
                    .min(MAX_WAKE_SPREAD);
                let spread = rand::rng().random_range(Duration::ZERO..=window);
                tokio::time::sleep(spread).await;
            }
        }
    }

    /// Waits until the lock is reserved for `waiter`: by `needed` nodes, or by one and then
    /// `grace` passed (the other nodes' releases are on their way, sent at the same moment);
    /// or until `fallback` passed. Announcements that arrived since these watches were
    /// made count, so a reservation made during the last attempt is not missed.
    pub(crate) async fn wait_for_turn(
        &mut self,
        fallback: Duration,
        grace: Duration,
        waiter: &str,
    ) {
        let give_up = tokio::time::sleep(fallback);
        tokio::pin!(give_up);
        let grace_over = futures::future::Fuse::terminated();
        tokio::pin!(grace_over);
        let mut reserved_by = vec![false; self.watches.len()];
        let needed = self.needed;
        loop {
            let mut next = self.next_of_each();
            let (index, announced) = tokio::select! {
                () = &mut give_up => return,
                () = &mut grace_over => return,
                (_, release) = poll_fn(|cx| poll_first(&mut next, cx)) => release,
            };
            // None: announcements were missed; one of them may have been ours.
            let ours = announced
                .next_waiter
                .as_deref()
                .is_none_or(|named| named == waiter);
            if ours {
                reserved_by[index] = true;
                if reserved_by.iter().filter(|&&reserved| reserved).count() >= needed {
                    return;
                }
                if grace_over.is_terminated() {
                    grace_over.set(tokio::time::sleep(grace).fuse());
                }
            }
        }
    }

    /// Waits for the next announcement that a node granted the key to `waiter` on the place
    /// of the refresh numbered `refresh` (see `Grants`), and returns that node's index among
    /// the lock's nodes, the one its [`GrantStamp`] names, not the one whose connection
    /// brought it (a pub/sub connection is not checked for the server it reaches); or, when
    /// one announces a reservation for `waiter` instead (a release of a client of the
    /// previous protocol, or one beside a live shared holder, which the waiter's next
    /// refresh claims), `None`. Grants of other refreshes (made on a place an earlier
    /// refresh wrote) do not count: the waiter's next refresh takes them. Nor do stamps
    /// that name no node announcing here.
    pub(crate) async fn next_grant(&mut self, waiter: &str, refresh: u64) -> Option<usize> {
        loop {
            let mut next = self.next_of_each();
            let (_, (_, announced)) = poll_fn(|cx| poll_first(&mut next, cx)).await;
            drop(next);
            if announced.next_waiter.as_deref() != Some(waiter) {
                continue;
            }
            // No stamp: a reservation for the waiter.
            let granted = announced.grant?;
            let stamp = GrantStamp::decode(granted);
            if stamp.refresh == refresh && self.nodes.contains(&stamp.node) {
                return Some(stamp.node);
            }
        }
    }

    /// The next announcement of `needed` different nodes, each with its watch's index.
    async fn next_releases(&mut self) -> Vec<(usize, Announcement)> {
        let needed = self.needed;
        let mut announcements = self.next_of_each();
        let mut releases = Vec::with_capacity(needed);
        while releases.len() < needed {
            // Pending for ever once no watch is left, as the announcements never come.
            let (_, release) = poll_fn(|cx| poll_first(&mut announcements, cx)).await;
            releases.push(release);
        }
        releases
    }

    /// The next announcement of each watch, with the watch's index, polled together with
    /// [`poll_first`] (not a `FuturesUnordered`, which wakes its own task each time it
    /// has polled them all: a thread wake-up on the hand-off's path).
    fn next_of_each(&mut self) -> Vec<BoxFuture<'_, (usize, Announcement)>> {
        self.watches
            .iter_mut()
            .enumerate()
            .map(|(index, watch)| async move { (index, watch.next_release().await) }.boxed())
            .collect()
    }
}
