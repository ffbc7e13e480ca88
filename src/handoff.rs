//! Fast hand-off: a blocking acquire that lost to another holder waits for that holder's
//! release to be announced, instead of sleeping out its whole retry delay.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rand::Rng;

use crate::node::{LockNode, ReleaseWatch};

/// After a hand-off wake-up, each waiter pauses a random moment up to this long, so that the
/// waiters woken by one release do not all send their `SET NX` at once and split the votes.
/// A round on a local network takes well under this, so the first waiter usually wins the
/// whole quorum before the next one starts.
const WAKE_SPREAD: Duration = Duration::from_millis(1);

/// The release announcements of one key on every node that can announce them.
pub(crate) struct ReleaseWatches {
    watches: Vec<ReleaseWatch>,
    /// How many nodes must announce a release before waiters wake: the lock's quorum (or
    /// every watch, when fewer nodes can announce). Fewer announcements come from the
    /// rollback of a failed attempt, which cannot free a quorum.
    needed: usize,
}

impl ReleaseWatches {
    /// Starts watching `key` on every node at once; `None` when no node announces releases.
    pub(crate) async fn start(
        nodes: &[Arc<dyn LockNode>],
        key: &str,
        quorum: usize,
    ) -> Option<Self> {
        let watches: Vec<ReleaseWatch> = nodes
            .iter()
            .map(|node| node.watch_releases(key))
            .collect::<FuturesUnordered<_>>()
            .filter_map(|watch| async move { watch })
            .collect()
            .await;
        if watches.is_empty() {
            return None;
        }
        let needed = quorum.min(watches.len());
        Some(ReleaseWatches { watches, needed })
    }

    /// Forgets the announcements so far: only releases after this point wake the next wait.
    pub(crate) fn mark_seen(&mut self) {
        self.watches.iter_mut().for_each(ReleaseWatch::mark_seen);
    }

    /// Waits until enough nodes announced a release since the last [`mark_seen`], then a
    /// short random spread; or until `fallback` passed, whichever comes first.
    ///
    /// [`mark_seen`]: Self::mark_seen
    pub(crate) async fn wait(&self, fallback: Duration) {
        let mut announcements: FuturesUnordered<_> = self
            .watches
            .iter()
            .map(ReleaseWatch::next_release)
            .collect();
        let needed = self.needed;
        let released = async move {
            for _ in 0..needed {
                announcements.next().await;
            }
        };
        tokio::select! {
            () = tokio::time::sleep(fallback) => {}
            () = released => {
                let spread = rand::rng().random_range(Duration::ZERO..=WAKE_SPREAD);
                tokio::time::sleep(spread).await;
            }
        }
    }
}
