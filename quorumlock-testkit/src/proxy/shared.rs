//! What the [`FaultProxy`](super::FaultProxy) handle and its tasks share: the fault
//! settings, the listener's state, the open connections, the counters and the taps.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::watch;

use super::rules::{occurrences, Faults, ResetWhen};

/// What the accept loop is doing with the listening socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Listening {
    Open,
    Closed,
    Failed(String),
}

/// A pattern counter; see [`FaultProxy::tap`].
#[derive(Debug)]
pub(super) struct TapInner {
    pub(super) pattern: Vec<u8>,
    pub(super) count: AtomicUsize,
}

/// State shared by the proxy handle and its tasks.
pub(super) struct Shared {
    pub(super) upstream: SocketAddr,
    pub(super) faults: watch::Sender<Faults>,
    pub(super) listening: watch::Sender<Listening>,
    /// Open connections and the reset and close epochs they were born under.
    pub(super) live: Mutex<HashMap<u64, (u64, u64)>>,
    pub(super) next_id: AtomicU64,
    pub(super) accepted: AtomicUsize,
    pub(super) resets: AtomicUsize,
    pub(super) taps: Mutex<Vec<Weak<TapInner>>>,
}

impl Shared {
    pub(super) fn live(&self) -> MutexGuard<'_, HashMap<u64, (u64, u64)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn taps(&self) -> Vec<Arc<TapInner>> {
        let mut taps = self.taps.lock().unwrap_or_else(PoisonError::into_inner);
        taps.retain(|tap| tap.strong_count() > 0);
        taps.iter().filter_map(Weak::upgrade).collect()
    }
}

/// Consumes the first reset rule whose pattern the chunk completes.
pub(super) fn fire_rule(shared: &Shared, tail: &[u8], bytes: &[u8]) -> Option<ResetWhen> {
    let mut fired = None;
    shared.faults.send_if_modified(|faults| {
        match faults
            .rules
            .iter()
            .position(|rule| occurrences(tail, bytes, &rule.pattern) > 0)
        {
            Some(index) => {
                fired = Some(faults.rules.remove(index).when);
                true
            }
            None => false,
        }
    });
    fired
}

pub(super) fn count_taps(shared: &Shared, tail: &[u8], bytes: &[u8]) {
    for tap in shared.taps() {
        let n = occurrences(tail, bytes, &tap.pattern);
        if n > 0 {
            tap.count.fetch_add(n, Ordering::SeqCst);
        }
    }
}

/// Removes a connection from the live set when its task ends or is aborted.
pub(super) struct LiveEntry {
    pub(super) shared: Arc<Shared>,
    pub(super) id: u64,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        self.shared.live().remove(&self.id);
    }
}
