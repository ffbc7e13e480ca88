//! The watchdog: a background task that keeps a held lock alive while its work runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::{ConfigError, LeaseEnd, LockError};
use crate::lease::Lease;
use crate::quorum::Coordinator;

/// How a guard's watchdog extends its lock; see [`LockGuard::auto_extend`](crate::LockGuard::auto_extend).
///
/// ```
/// use std::time::Duration;
/// use quorumlock::AutoExtend;
///
/// let options = AutoExtend::default().max_hold(Duration::from_secs(3600));
/// assert_eq!(options.interval(), None); // a third of the TTL
/// ```
///
/// An interval short enough to flood the nodes is refused where the options meet the
/// lock's configuration, by [`LockGuard::auto_extend`](crate::LockGuard::auto_extend), or
/// ahead of time by [`check`](Self::check):
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{AutoExtend, ConfigError, LockConfig};
///
/// let config = LockConfig::default(); // node timeout 50 ms
/// assert_eq!(AutoExtend::min_interval(&config), Duration::from_millis(100));
/// let err = AutoExtend::default().every(Duration::ZERO).check(&config).unwrap_err();
/// assert!(matches!(err, ConfigError::ExtendIntervalTooShort { .. }));
/// assert!(AutoExtend::default().every(Duration::from_secs(1)).check(&config).is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoExtend {
    interval: Option<Duration>,
    max_hold: Option<Duration>,
}

impl AutoExtend {
    /// The absolute floor of an [`every`](Self::every) interval: 10 ms, at most 100
    /// extension rounds a second per guard. It matters only with sub-5 ms node timeouts,
    /// where twice the node timeout (see [`min_interval`](Self::min_interval)) would
    /// still let one guard keep every node busy; an interval below it is a unit mistake
    /// (or `Duration::ZERO`), since no lock needs its TTL renewed that often.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

    /// Extends every `interval` after the last success instead of every third of the TTL.
    /// It is clamped to at most half the TTL, so an extension always has time to retry.
    /// It must be at least [`min_interval`](Self::min_interval) of the lock's
    /// configuration: [`LockGuard::auto_extend`](crate::LockGuard::auto_extend) refuses
    /// shorter ones.
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

    /// The shortest [`every`](Self::every) interval accepted under `config`: twice its node
    /// timeout, and at least [`MIN_INTERVAL`](Self::MIN_INTERVAL).
    ///
    /// The next extension is due an interval after the previous one *started*, and one
    /// round takes up to a node timeout, so below one node timeout the rounds run back to
    /// back (`every(Duration::ZERO)` ran about 900 a second per guard). Twice the node
    /// timeout leaves each node free of this guard's extensions at least half the time even
    /// when every round runs to its timeout, and is the same margin the watchdog keeps
    /// before declaring a lock lost.
    ///
    /// The default interval, a third of the TTL, is not checked: validation keeps the node
    /// timeout at most a tenth of the TTL, so it is always above twice the node timeout
    /// (and under 10 ms only for TTLs under 30 ms, which need renewing that often).
    pub fn min_interval(config: &LockConfig) -> Duration {
        config
            .node_timeout()
            .saturating_mul(2)
            .max(Self::MIN_INTERVAL)
    }

    /// Checks these options against the configuration of the lock they are for; the
    /// check [`LockGuard::auto_extend`](crate::LockGuard::auto_extend) makes.
    pub fn check(&self, config: &LockConfig) -> Result<(), ConfigError> {
        let Some(interval) = self.interval else {
            return Ok(());
        };
        let min = Self::min_interval(config);
        if interval < min {
            return Err(ConfigError::ExtendIntervalTooShort {
                interval,
                min,
                node_timeout: config.node_timeout(),
                floor: Self::MIN_INTERVAL,
            });
        }
        Ok(())
    }
}

/// A running watchdog; aborted when dropped.
pub(crate) struct Watchdog {
    task: JoinHandle<()>,
}

impl Watchdog {
    /// Starts extending `lease` through `coordinator` in the background, on the current
    /// tokio runtime, once the options passed [`AutoExtend::check`] against the
    /// coordinator's configuration.
    pub(crate) fn start(
        coordinator: &Arc<Coordinator>,
        lease: &Arc<Lease>,
        options: AutoExtend,
    ) -> Result<Self, ConfigError> {
        options.check(coordinator.config())?;
        let task = keep_alive(Arc::clone(coordinator), Arc::clone(lease), options);
        Ok(Watchdog {
            task: tokio::spawn(task),
        })
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
async fn keep_alive(coordinator: Arc<Coordinator>, lease: Arc<Lease>, options: AutoExtend) {
    let config = coordinator.config();
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
        // Boxed for the round only: a watchdog spends nearly all its life asleep, and its
        // task, which lives as long as the guard, would otherwise keep room for the whole
        // refresh round (its span, requests and tally) the while.
        match Box::pin(coordinator.refresh(&lease)).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn config(node_timeout: Duration) -> LockConfig {
        LockConfig::builder()
            .node_timeout(node_timeout)
            .build()
            .unwrap()
    }

    #[test]
    fn a_zero_interval_is_refused_with_the_values_named() {
        let err = AutoExtend::default()
            .every(Duration::ZERO)
            .check(&LockConfig::default())
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::ExtendIntervalTooShort {
                interval: Duration::ZERO,
                min: ms(100),
                node_timeout: ms(50),
                floor: AutoExtend::MIN_INTERVAL,
            }
        );
        let text = err.to_string();
        for needle in ["0ns", "100ms", "50ms", "10ms"] {
            assert!(text.contains(needle), "{needle:?} missing: {text}");
        }
    }

    #[test]
    fn the_floor_is_twice_the_node_timeout_and_at_least_10_ms() {
        let slow = config(ms(200));
        assert_eq!(AutoExtend::min_interval(&slow), ms(400));
        assert!(AutoExtend::default().every(ms(399)).check(&slow).is_err());
        assert!(AutoExtend::default().every(ms(400)).check(&slow).is_ok());
        // A sub-millisecond node timeout does not let the interval go below 10 ms.
        let fast = config(Duration::from_micros(500));
        assert_eq!(AutoExtend::min_interval(&fast), ms(10));
        assert!(AutoExtend::default().every(ms(9)).check(&fast).is_err());
        assert!(AutoExtend::default().every(ms(10)).check(&fast).is_ok());
    }

    #[test]
    fn the_default_interval_is_never_refused() {
        // A 10 ms TTL is extended every 3.3 ms by default, under the 10 ms floor: the
        // default follows from the TTL, which validation accepted.
        let tiny = LockConfig::builder()
            .ttl(ms(10))
            .node_timeout(ms(1))
            .build()
            .unwrap();
        assert!(AutoExtend::default().check(&tiny).is_ok());
        let capped = AutoExtend::default().max_hold(Duration::from_secs(1));
        assert!(capped.check(&LockConfig::default()).is_ok());
    }
}
