//! [`Silence`]: whether a connection that has not closed has stopped answering.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Whether the open connection has gone silent: when the oldest request sent since the
/// last reply was sent, in microseconds since the link began (0: none waiting).
pub(super) struct Silence {
    began: Instant,
    oldest_unanswered: AtomicU64,
    probing: AtomicBool,
}

impl Silence {
    pub(super) fn new() -> Self {
        Silence {
            began: Instant::now(),
            oldest_unanswered: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// True if no probe is under way, which this call then starts.
    pub(super) fn start_probe(&self) -> bool {
        !self.probing.swap(true, Ordering::Relaxed)
    }

    pub(super) fn end_probe(&self) {
        self.probing.store(false, Ordering::Relaxed);
    }

    fn stamp(&self, at: Instant) -> u64 {
        // Never 0, which means "none waiting".
        u64::try_from(at.saturating_duration_since(self.began).as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(super) fn sent(&self, at: Instant) {
        // Most requests find a stamp there already (others are waiting): no locked
        // instruction for them.
        if self.oldest_unanswered.load(Ordering::Relaxed) == 0 {
            let stamp = self.stamp(at);
            let _ = self.oldest_unanswered.compare_exchange(
                0,
                stamp,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    pub(super) fn answered(&self) {
        // Any reply shows the connection alive, whatever else is still waiting.
        if self.oldest_unanswered.load(Ordering::Relaxed) != 0 {
            self.oldest_unanswered.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn reset(&self) {
        self.oldest_unanswered.store(0, Ordering::Relaxed);
    }

    /// How long a request has waited with no reply at all, if longer than `limit`.
    pub(super) fn silent_for(&self, now: Instant, limit: Duration) -> Option<Duration> {
        let oldest = self.oldest_unanswered.load(Ordering::Relaxed);
        if oldest == 0 {
            return None;
        }
        let waited = Duration::from_micros(self.stamp(now).saturating_sub(oldest));
        (waited > limit).then_some(waited)
    }
}
