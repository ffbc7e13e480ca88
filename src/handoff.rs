//! Fast hand-off: a blocking acquire that lost to another holder waits for that holder's
//! release to be announced, instead of sleeping out its whole retry delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rand::Rng;

use crate::node::{LockNode, ReleaseWatch};
use crate::resource::Keys;

/// After a hand-off wake-up, each waiter pauses a random moment before its attempt, so
/// that the waiters of different processes woken by one release do not all send their
/// `SET NX` at once and split the votes. The window starts at the duration of the waiter's
/// last round and doubles with each wake-up it lost (binary exponential backoff, as on a
/// shared Ethernet segment), so however many waiters there are, they spread out after a
/// few collisions; it never exceeds this cap. (Waiters of one process do not race at all:
/// they take turns, see [`LocalQueues`].)
const MAX_WAKE_SPREAD: Duration = Duration::from_millis(50);

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
    /// random spread up to `round` (the last round's duration) doubled `collisions` times;
    /// or until `fallback` passed, whichever comes first.
    ///
    /// [`mark_seen`]: Self::mark_seen
    pub(crate) async fn wait(&self, fallback: Duration, round: Duration, collisions: u32) {
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
                let window = round
                    .saturating_mul(1 << collisions.min(16))
                    .min(MAX_WAKE_SPREAD);
                let spread = rand::rng().random_range(Duration::ZERO..=window);
                tokio::time::sleep(spread).await;
            }
        }
    }
}

/// Blocking acquisitions of the same resources in one process take turns, first come first
/// served: only the head of each queue contends on the nodes, so the waiters of one process
/// never split each other's votes, and a holder that releases and asks again queues behind
/// the others instead of taking the lock straight back.
#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<HashMap<Keys, Arc<tokio::sync::Mutex<()>>>>,
}

impl LocalQueues {
    /// Waits for this process's turn to contend for `keys`.
    pub(crate) async fn turn(self: &Arc<Self>, keys: &Keys) -> LocalTurn {
        let queue = Arc::clone(lock(&self.queues).entry(Arc::clone(keys)).or_default());
        let guard = queue.lock_owned().await;
        LocalTurn {
            queues: Arc::clone(self),
            keys: Arc::clone(keys),
            guard: Some(guard),
        }
    }
}

/// The turn of one blocking acquisition; the next in line goes when it is dropped.
pub(crate) struct LocalTurn {
    queues: Arc<LocalQueues>,
    keys: Keys,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        self.guard = None;
        let mut queues = lock(&self.queues.queues);
        // Only the map still refers to the queue: nobody waits, so forget it.
        if queues
            .get(&self.keys)
            .is_some_and(|queue| Arc::strong_count(queue) == 1)
        {
            queues.remove(&self.keys);
        }
    }
}

/// Locks the queue map, recovering it from a poisoned mutex (it stays consistent).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
