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
    /// Accepting new connections.
    Open,
    /// Refusing them (`refuse_new`).
    Closed,
    /// Closing or re-opening the socket failed, for this reason.
    Failed(String),
}

/// A pattern counter; see [`FaultProxy::tap`](super::FaultProxy::tap).
#[derive(Debug)]
pub(super) struct TapInner {
    /// The bytes counted.
    pub(super) pattern: Vec<u8>,
    /// How often they were delivered to the node.
    pub(super) count: AtomicUsize,
}

/// State shared by the proxy handle and its tasks.
pub(super) struct Shared {
    /// The address new connections are forwarded to (see `FaultProxy::redirect`).
    pub(super) upstream: Mutex<SocketAddr>,
    /// The current fault settings; every task watches them.
    pub(super) faults: watch::Sender<Faults>,
    /// What the accept loop did last with the listening socket.
    pub(super) listening: watch::Sender<Listening>,
    /// Open connections and the reset and close epochs they were born under.
    pub(super) live: Mutex<HashMap<u64, (u64, u64)>>,
    /// The id of the next connection accepted.
    pub(super) next_id: AtomicU64,
    /// Connections accepted so far.
    pub(super) accepted: AtomicUsize,
    /// Connections ended with a reset so far.
    pub(super) resets: AtomicUsize,
    /// The taps whose handles are still alive (dead ones are pruned when read).
    pub(super) taps: Mutex<Vec<Weak<TapInner>>>,
}

impl Shared {
    /// The address a connection accepted now is forwarded to.
    pub(super) fn upstream(&self) -> SocketAddr {
        *self.upstream.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open connections (the lock survives a panicked holder: it guards plain data).
    pub(super) fn live(&self) -> MutexGuard<'_, HashMap<u64, (u64, u64)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live taps, dropping those whose handles are gone.
    pub(super) fn taps(&self) -> Vec<Arc<TapInner>> {
        let mut taps = self.taps.lock().unwrap_or_else(PoisonError::into_inner);
        taps.retain(|tap| tap.strong_count() > 0);
        taps.iter().filter_map(Weak::upgrade).collect()
    }

    /// Consumes the first reset rule whose pattern the chunk completes.
    pub(super) fn fire_rule(&self, tail: &[u8], bytes: &[u8]) -> Option<ResetWhen> {
        let mut fired = None;
        self.faults.send_if_modified(|faults| {
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

    /// Counts, on every live tap, the occurrences of its pattern that the chunk completes.
    pub(super) fn count_taps(&self, tail: &[u8], bytes: &[u8]) {
        for tap in self.taps() {
            let n = occurrences(tail, bytes, &tap.pattern);
            if n > 0 {
                tap.count.fetch_add(n, Ordering::SeqCst);
            }
        }
    }
}

/// Removes a connection from the live set when its task ends or is aborted.
pub(super) struct LiveEntry {
    /// Where the live set is.
    pub(super) shared: Arc<Shared>,
    /// The connection's id in it.
    pub(super) id: u64,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        self.shared.live().remove(&self.id);
    }
}
