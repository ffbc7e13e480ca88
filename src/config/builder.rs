//! [`LockConfigBuilder`]: the one way to a changed [`LockConfig`], validated as a whole.

use std::time::Duration;

use super::LockConfig;
use crate::error::ConfigError;
use crate::fencing::FencingCounters;

/// Builds a validated [`LockConfig`]; start one with [`LockConfig::builder`].
///
/// Setters never fail; [`build`](Self::build) checks the whole configuration at once, so
/// the order of the calls does not matter.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockConfigBuilder {
    config: LockConfig,
}

impl LockConfigBuilder {
    /// A builder that starts from `config`.
    pub(super) fn new(config: LockConfig) -> Self {
        LockConfigBuilder { config }
    }

    /// Sets the TTL: a whole number of milliseconds, at most [`LockConfig::MAX_TTL`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Sets whether dropped guards release their lock in the background.
    pub fn auto_release(mut self, auto_release: bool) -> Self {
        self.config.auto_release = auto_release;
        self
    }

    /// Sets how many times a blocking `acquire` retries after its first attempt.
    pub fn retry_count(mut self, retry_count: u32) -> Self {
        self.config.retry_count = retry_count;
        self
    }

    /// Sets the mean delay between attempts (non-zero when retries are enabled).
    pub fn retry_delay(mut self, retry_delay: Duration) -> Self {
        self.config.retry_delay = retry_delay;
        self
    }

    /// Sets the jitter around the retry delay (at most the delay itself).
    pub fn retry_jitter(mut self, retry_jitter: Duration) -> Self {
        self.config.retry_jitter = retry_jitter;
        self
    }

    /// Sets the clock-drift factor, in `[0, 1)`.
    pub fn drift_factor(mut self, drift_factor: f64) -> Self {
        self.config.drift_factor = drift_factor;
        self
    }

    /// Sets the per-node timeout (non-zero, at most a tenth of the TTL).
    pub fn node_timeout(mut self, node_timeout: Duration) -> Self {
        self.config.node_timeout = node_timeout;
        self
    }

    /// Sets a prefix for every Redis key (an empty prefix means none).
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        let prefix = key_prefix.into();
        self.config.key_prefix = (!prefix.is_empty()).then_some(prefix);
        self
    }

    /// Sets whether releases are announced over pub/sub and waited for.
    pub fn notify_releases(mut self, notify: bool) -> Self {
        self.config.notify_releases = notify;
        self
    }

    /// Sets whether blocking acquires wait in line on the nodes; see [`LockConfig::fair`].
    pub fn fair(mut self, fair: bool) -> Self {
        self.config.fair = fair;
        self
    }

    /// Sets whether a fair lock's waiters take grants; see [`LockConfig::direct_grant`].
    pub fn direct_grant(mut self, direct_grant: bool) -> Self {
        self.config.direct_grant = direct_grant;
        self
    }

    /// Sets whether each acquisition mints a fencing token.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.config.fencing = fencing;
        self
    }

    /// Sets where the fencing counters live on the nodes; see [`FencingCounters`]. Every
    /// client of a resource must use the same layout.
    pub fn fencing_counters(mut self, counters: FencingCounters) -> Self {
        self.config.fencing_counters = counters;
        self
    }

    /// Gives every blocking acquire a deadline, `timeout` after it starts (non-zero, at most
    /// [`LockConfig::MAX_ACQUIRE_TIMEOUT`]); see [`LockConfig::acquire_timeout`]. With it,
    /// `retry_count` may be as large as you like: the deadline, not the count, ends the
    /// wait. `None` takes the deadline away again (from a builder made by
    /// [`LockConfig::to_builder`]).
    pub fn acquire_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.config.acquire_timeout = timeout.into();
        self
    }

    /// Sets how many times in a row a held lock may pass to a waiting task of this process
    /// without a round trip to the nodes (0 turns cohorts off); see
    /// [`LockConfig::cohort_passes`].
    pub fn cohort_passes(mut self, passes: u32) -> Self {
        self.config.cohort_passes = passes;
        self
    }

    /// Sets how long after it was won on the nodes a lock may still pass from task to task
    /// of this process (non-zero, at most [`LockConfig::MAX_COHORT_WINDOW`]); see
    /// [`LockConfig::cohort_window`].
    pub fn cohort_window(mut self, window: Duration) -> Self {
        self.config.cohort_window = window;
        self
    }

    /// Sets the lock-delay: how long past its validity a lease that ended without a release
    /// keeps its resource closed (whole milliseconds, the TTL plus it at most
    /// [`LockConfig::MAX_TTL`]; zero, the default, turns it off); see
    /// [`LockConfig::lock_delay`].
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.config.lock_delay = delay;
        self
    }

    /// Validates the settings and returns the configuration.
    pub fn build(self) -> Result<LockConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::ms;

    #[test]
    fn builder_derives_copies_without_touching_the_original() {
        let base = LockConfig::default();
        let changed = base
            .to_builder()
            .ttl(Duration::from_secs(5))
            .auto_release(false)
            .retry_count(0)
            .key_prefix("locks:")
            .build()
            .unwrap();
        assert_eq!(base, LockConfig::default());
        assert_eq!(changed.ttl(), Duration::from_secs(5));
        assert!(!changed.auto_release());
        assert_eq!(changed.retry_count(), 0);
        assert_eq!(changed.key_prefix(), Some("locks:"));
        assert_eq!(base.with_ttl(ms(1500)).unwrap().ttl(), ms(1500));
    }

    #[test]
    fn empty_key_prefix_means_none() {
        let config = LockConfig::builder().key_prefix("").build().unwrap();
        assert_eq!(config.key_prefix(), None);
    }
}
