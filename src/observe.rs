//! What a lock observes about its nodes and operations, beyond [`Counters`]: per-node
//! counters ([`NodeMetrics`]), the rate-limited warning about a failing node, outcome names
//! for spans and events, and, with the `metrics` feature, the `metrics` crate's handles.
//!
//! Everything here is registered once, when a lock is made: an operation only bumps atomics
//! (and, with the feature, calls pre-registered handles, no-ops without a recorder). No
//! allocation, no task, no lock per successful operation; a failure takes a short mutex to
//! keep the node's last error, copied only when it differs from the one kept (a node that
//! keeps failing the same way allocates nothing).
//!
//! [`Counters`]: crate::metrics::Counters

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{micros, millis};
use crate::error::{LockError, NodeError};
use crate::metrics::NodeMetrics;
use crate::node::LockNode;

/// At most one `warn` event per failing node per this interval; the next one says how many
/// failures it stood for.
pub(crate) const NODE_WARN_INTERVAL: Duration = Duration::from_secs(10);

/// The per-node observations of one lock's nodes, shared by every lock on the same
/// connections.
#[derive(Debug)]
pub(crate) struct Observed {
    began: Instant,
    nodes: Box<[NodeStats]>,
    #[cfg(feature = "metrics")]
    pub(crate) meters: meters::Meters,
}

#[derive(Debug)]
struct NodeStats {
    name: String,
    replies: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    latency_us: AtomicU64,
    latency_max_us: AtomicU64,
    last_error: Mutex<Option<NodeError>>,
    /// When the last warning was given, in ms since `began`, plus one (0: never).
    warned_at: AtomicU64,
    /// Failures since the last warning.
    unwarned: AtomicU64,
    #[cfg(feature = "metrics")]
    meters: meters::NodeMeters,
}

impl Observed {
    pub(crate) fn new(nodes: &[std::sync::Arc<dyn LockNode>]) -> Self {
        Observed {
            began: Instant::now(),
            nodes: nodes
                .iter()
                .map(|node| NodeStats {
                    name: node.name().to_owned(),
                    replies: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    timeouts: AtomicU64::new(0),
                    latency_us: AtomicU64::new(0),
                    latency_max_us: AtomicU64::new(0),
                    last_error: Mutex::new(None),
                    warned_at: AtomicU64::new(0),
                    unwarned: AtomicU64::new(0),
                    #[cfg(feature = "metrics")]
                    meters: meters::NodeMeters::new(node.name()),
                })
                .collect(),
            #[cfg(feature = "metrics")]
            meters: meters::Meters::new(),
        }
    }

    /// Node `index` answered (any reply, a refusal included) after `latency`.
    pub(crate) fn replied(&self, index: usize, latency: Duration) {
        let Some(node) = self.nodes.get(index) else {
            return;
        };
        let micros = micros(latency);
        node.replies.fetch_add(1, Ordering::Relaxed);
        node.latency_us.fetch_add(micros, Ordering::Relaxed);
        node.latency_max_us.fetch_max(micros, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        node.meters.latency.record(latency.as_secs_f64());
    }

    /// Node `index` failed with `error`: counted, kept as its last error, and warned about
    /// at most once per [`NODE_WARN_INTERVAL`].
    pub(crate) fn failed(&self, index: usize, error: &NodeError) {
        let Some(node) = self.nodes.get(index) else {
            return;
        };
        let timeout = matches!(error, NodeError::Timeout(_));
        if timeout {
            node.timeouts.fetch_add(1, Ordering::Relaxed);
        } else {
            node.errors.fetch_add(1, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        if timeout {
            node.meters.timeouts.increment(1);
        } else {
            node.meters.errors.increment(1);
        }
        {
            let mut last = node
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.as_ref() != Some(error) {
                *last = Some(error.clone());
            }
        }
        let unwarned = node.unwarned.fetch_add(1, Ordering::Relaxed) + 1;
        if !tracing::enabled!(tracing::Level::WARN) {
            return;
        }
        let now = millis(self.began.elapsed()).saturating_add(1);
        let last = node.warned_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= millis(NODE_WARN_INTERVAL);
        if due
            && node
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            node.unwarned.fetch_sub(unwarned, Ordering::Relaxed);
            tracing::warn!(
                node = %node.name,
                reason = %error,
                failures = unwarned,
                "node failed; the lock's fault tolerance is reduced while it does \
                 (at most one warning per node every 10 s; `failures` counts since the last)"
            );
        }
    }

    /// A snapshot of every node's counters, in node order.
    pub(crate) fn snapshot(&self) -> Vec<NodeMetrics> {
        self.nodes
            .iter()
            .map(|node| NodeMetrics {
                node: node.name.clone(),
                replies: node.replies.load(Ordering::Relaxed),
                errors: node.errors.load(Ordering::Relaxed),
                timeouts: node.timeouts.load(Ordering::Relaxed),
                latency_total: Duration::from_micros(node.latency_us.load(Ordering::Relaxed)),
                latency_max: Duration::from_micros(node.latency_max_us.load(Ordering::Relaxed)),
                last_error: node
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref()
                    .map(NodeError::to_string),
                excluded: None,
            })
            .collect()
    }
}

/// The outcome of an acquisition, as spans, events and metrics name it.
pub(crate) fn acquire_outcome<T>(result: &Result<T, LockError>) -> &'static str {
    match result {
        Ok(_) => "acquired",
        Err(LockError::Held { .. }) => "held",
        Err(LockError::NoQuorum { .. }) => "no_quorum",
        Err(LockError::ValidityExhausted { .. }) => "validity_exhausted",
        Err(LockError::TimedOut { .. }) => "timed_out",
        Err(_) => "error",
    }
}

/// The outcome of a release or refresh.
pub(crate) fn settle_outcome<T>(result: &Result<T, LockError>, done: &'static str) -> &'static str {
    match result {
        Ok(_) => done,
        Err(LockError::NotHeld { .. }) => "not_held",
        Err(LockError::NoQuorum { .. }) => "no_quorum",
        Err(LockError::Expired { .. }) => "expired",
        Err(LockError::ValidityExhausted { .. }) => "validity_exhausted",
        Err(_) => "error",
    }
}

#[cfg(feature = "metrics")]
pub(crate) mod meters {
    //! The `metrics` handles, registered when a lock is made (so install the recorder
    //! first); the names are documented in docs/operations.md and stable.

    use metrics::{counter, histogram, Counter, Histogram};

    /// `quorumlock_acquisitions_total{outcome}`.
    pub(crate) const ACQUISITIONS: &str = "quorumlock_acquisitions_total";
    /// `quorumlock_acquire_wait_seconds`: from the call to the lock, acquisitions that won.
    pub(crate) const ACQUIRE_WAIT: &str = "quorumlock_acquire_wait_seconds";
    /// `quorumlock_hold_seconds`: from acquisition to release.
    pub(crate) const HOLD: &str = "quorumlock_hold_seconds";
    /// `quorumlock_releases_total{outcome}`.
    pub(crate) const RELEASES: &str = "quorumlock_releases_total";
    /// `quorumlock_refreshes_total{outcome}`.
    pub(crate) const REFRESHES: &str = "quorumlock_refreshes_total";
    /// `quorumlock_node_errors_total{node, kind}`.
    pub(crate) const NODE_ERRORS: &str = "quorumlock_node_errors_total";
    /// `quorumlock_node_latency_seconds{node}`.
    pub(crate) const NODE_LATENCY: &str = "quorumlock_node_latency_seconds";

    const ACQUIRE_OUTCOMES: [&str; 6] = [
        "acquired",
        "held",
        "no_quorum",
        "validity_exhausted",
        "timed_out",
        "error",
    ];
    const SETTLE_OUTCOMES: [&str; 6] = [
        "released",
        "extended",
        "not_held",
        "no_quorum",
        "expired",
        "error",
    ];

    #[derive(Debug)]
    pub(crate) struct Meters {
        acquisitions: [Counter; 6],
        releases: [Counter; 6],
        refreshes: [Counter; 6],
        pub(crate) acquire_wait: Histogram,
        pub(crate) hold: Histogram,
    }

    impl Meters {
        pub(crate) fn new() -> Self {
            Meters {
                acquisitions: ACQUIRE_OUTCOMES
                    .map(|outcome| counter!(ACQUISITIONS, "outcome" => outcome)),
                releases: SETTLE_OUTCOMES.map(|outcome| counter!(RELEASES, "outcome" => outcome)),
                refreshes: SETTLE_OUTCOMES.map(|outcome| counter!(REFRESHES, "outcome" => outcome)),
                acquire_wait: histogram!(ACQUIRE_WAIT),
                hold: histogram!(HOLD),
            }
        }

        pub(crate) fn acquisition(&self, outcome: &str) {
            if let Some(at) = ACQUIRE_OUTCOMES.iter().position(|known| *known == outcome) {
                self.acquisitions[at].increment(1);
            }
        }

        pub(crate) fn release(&self, outcome: &str) {
            if let Some(at) = SETTLE_OUTCOMES.iter().position(|known| *known == outcome) {
                self.releases[at].increment(1);
            }
        }

        pub(crate) fn refresh(&self, outcome: &str) {
            if let Some(at) = SETTLE_OUTCOMES.iter().position(|known| *known == outcome) {
                self.refreshes[at].increment(1);
            }
        }
    }

    #[derive(Debug)]
    pub(crate) struct NodeMeters {
        pub(crate) errors: Counter,
        pub(crate) timeouts: Counter,
        pub(crate) latency: Histogram,
    }

    impl NodeMeters {
        pub(crate) fn new(node: &str) -> Self {
            NodeMeters {
                errors: counter!(NODE_ERRORS, "node" => node.to_owned(), "kind" => "error"),
                timeouts: counter!(NODE_ERRORS, "node" => node.to_owned(), "kind" => "timeout"),
                latency: histogram!(NODE_LATENCY, "node" => node.to_owned()),
            }
        }
    }
}
