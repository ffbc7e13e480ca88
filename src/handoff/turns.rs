//! [`LocalQueues`]: the blocking acquisitions of one process take turns, so that they never
//! split each other's votes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::resource::Keys;

/// Blocking acquisitions of the same resources in one process take turns, first come first
/// served: only the head of each queue contends on the nodes, so the waiters of one process
/// never split each other's votes, and a holder that releases and asks again queues behind
/// the others instead of taking the lock straight back.
#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<HashMap<Keys, Arc<tokio::sync::Mutex<()>>>>,
    /// When this process last found each key held: a blocking acquire of a key found held
    /// within [`CONTENTION_MEMORY`] expects to wait, and queues on its first attempt.
    contended: Mutex<HashMap<Keys, Instant>>,
}

/// How long a key found held counts as contended; see [`LocalQueues::recently_contended`].
const CONTENTION_MEMORY: Duration = Duration::from_secs(1);

/// Above this many remembered keys, the ones no longer contended are forgotten.
const CONTENTION_KEYS_KEPT: usize = 1024;

impl LocalQueues {
    /// Remembers that `keys` were just found held.
    pub(crate) fn note_contended(&self, keys: &Keys) {
        let mut contended = lock(&self.contended);
        let now = Instant::now();
        if contended.len() >= CONTENTION_KEYS_KEPT {
            contended.retain(|_, seen| now.saturating_duration_since(*seen) < CONTENTION_MEMORY);
        }
        contended.insert(keys.clone(), now);
    }

    /// Whether `keys` were found held within the last [`CONTENTION_MEMORY`].
    pub(crate) fn recently_contended(&self, keys: &Keys) -> bool {
        lock(&self.contended)
            .get(keys)
            .is_some_and(|seen| seen.elapsed() < CONTENTION_MEMORY)
    }

    /// Whether a blocking acquisition of `keys` in this process holds or waits for a turn.
    pub(crate) fn has_waiters(&self, keys: &Keys) -> bool {
        lock(&self.queues).contains_key(keys)
    }

    /// Waits for this process's turn to contend for `keys`.
    pub(crate) async fn turn(self: &Arc<Self>, keys: &Keys) -> LocalTurn {
        let queue = Arc::clone(lock(&self.queues).entry(keys.clone()).or_default());
        let guard = queue.lock_owned().await;
        LocalTurn {
            queues: Arc::clone(self),
            keys: keys.clone(),
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
