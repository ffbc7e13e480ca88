//! The watchdog: a background task that keeps a held lock alive while its work runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::LockError;
use crate::lease::{Lease, LeaseEnd};

/// How a guard's watchdog extends its lock; see [`LockGuard::auto_extend`](crate::LockGuard::auto_extend).
///
/// ```
/// use std::time::Duration;
/// use quorumlock::AutoExtend;
///
/// let options = AutoExtend::default().max_hold(Duration::from_secs(3600));
/// assert_eq!(options.interval(), None); // a third of the TTL
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoExtend {
    interval: Option<Duration>,
    max_hold: Option<Duration>,
}

impl AutoExtend {
    /// Extends every `interval` after the last success instead of every third of the TTL.
    /// It is clamped to at most half the TTL, so an extension always has time to retry.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Stops extending once the lock has been held this long in total; the lock then
    /// expires at its deadline and the lost signal fires with [`LeaseEnd::Expired`]. A cap
    /// keeps a hung critical section from holding a lock forever.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// The configured interval, if any (`None`: a third of the TTL).
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The configured cap on the total hold time, if any.
    pub fn max_hold_time(&self) -> Option<Duration> {
        self.max_hold
    }
}

/// A running watchdog; aborted when dropped.
pub(crate) struct Watchdog {
    task: JoinHandle<()>,
}

impl Watchdog {
    /// Starts extending `lease` in the background, on the current tokio runtime.
    pub(crate) fn start(lease: Arc<Lease>, options: AutoExtend) -> Self {
        Watchdog {
            task: tokio::spawn(keep_alive(lease, options)),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Extends the lease a third of the TTL after each success; after a failure that may be
/// transient (no quorum answered), retries quickly while validity remains. Declares the
/// lease lost once the remaining validity is too short for one more round, so the lost
/// signal fires before the deadline rather than at it.
async fn keep_alive(lease: Arc<Lease>, options: AutoExtend) {
    let config = lease.coordinator.config().clone();
    let ttl = config.ttl();
    let interval = options.interval.unwrap_or(ttl / 3).min(ttl / 2);
    let retry = config.node_timeout().max(ttl / 20);
    // A round takes at most one node timeout; below this margin a refresh can no longer be
    // confirmed in time.
    let margin = config.node_timeout().saturating_mul(2);
    let started = Instant::now();
    let cap = options.max_hold.and_then(|max| started.checked_add(max));

    // Instants are checked like every other time computation; a TTL of at most 30 days
    // keeps them far from overflow, and on overflow the watchdog simply stops.
    let mut next = lease.state().acquired_at.checked_add(interval);
    while let Some(at) = next {
        tokio::time::sleep_until(at).await;
        let state = lease.state();
        if state.end.is_some() {
            return;
        }
        if cap.is_some_and(|cap| Instant::now() >= cap) {
            return; // held long enough: let it expire at its deadline
        }
        match lease.refresh().await {
            Ok(_) => next = lease.state().acquired_at.checked_add(interval),
            Err(LockError::NotHeld { .. } | LockError::Expired { .. }) => return,
            Err(error) => {
                let now = Instant::now();
                let deadline = lease.deadline();
                if deadline.saturating_duration_since(now) <= margin.saturating_add(retry) {
                    lease.end(LeaseEnd::Lost(Box::new(error)));
                    return;
                }
                next = now.checked_add(retry);
            }
        }
    }
}
