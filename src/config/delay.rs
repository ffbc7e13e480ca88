//! The lock-delay (see [`LockConfig::lock_delay`]): how long past its validity a lease that
//! ended without a release keeps its resource closed, and the key lifetime that follows.

use std::time::Duration;

use super::LockConfig;
use crate::error::ConfigError;

impl LockConfig {
    /// How long past the end of its validity a lease that ended without a release (its
    /// holder crashed, paused past its TTL, or lost its keys' refresh) keeps the resource
    /// closed to everybody else; zero (the default) turns it off. As Consul's `LockDelay`
    /// and Chubby's lock-delay.
    ///
    /// Why: a holder paused (a GC pause, a stopped VM, a swap storm) just past its
    /// validity wakes up believing it still holds the lock and may write once more before
    /// it checks. Without a delay the next holder may already be inside; with one, nobody
    /// else gets the lock until `ttl + lock_delay` after the holder's last acquire or
    /// extension, so a late write that lands within the delay is alone. A pause longer
    /// than that still overlaps: this narrows the window, fencing tokens
    /// ([`fencing`](Self::fencing)) close it.
    ///
    /// How: the keys are written with an expiry of [`key_ttl`](Self::key_ttl) (`ttl +
    /// lock_delay`) on every acquire and extension, while the holder's validity, its
    /// deadline and its watchdog's timing stay computed from the TTL alone. A clean release
    /// deletes the keys, so the next holder waits for nothing: only an unclean end costs
    /// the delay.
    ///
    /// The trade-off: a holder that crashed (or a guard dropped with
    /// [`auto_release`](Self::auto_release) off) blocks its resource for `ttl +
    /// lock_delay`, not `ttl`. It costs no request: the acquire and extend rounds are the
    /// same, with another number for the expiry.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use quorumlock::LockConfig;
    /// let config = LockConfig::builder()
    ///     .ttl(Duration::from_secs(10))
    ///     .lock_delay(Duration::from_secs(5))
    ///     .build()?;
    /// assert_eq!(config.key_ttl(), Duration::from_secs(15));
    /// // The validity is the TTL's, as without the delay.
    /// assert_eq!(config.max_validity(), Duration::from_millis(10_000 - 102));
    /// # Ok::<(), quorumlock::ConfigError>(())
    /// ```
    pub fn lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// The expiry the keys are written with (Redis `PX`): the TTL plus the
    /// [`lock_delay`](Self::lock_delay), at most [`MAX_TTL`](Self::MAX_TTL).
    pub fn key_ttl(&self) -> Duration {
        // Cannot saturate: `validate_lock_delay` bounds the sum by MAX_TTL.
        self.ttl.saturating_add(self.lock_delay)
    }

    /// The TTL and the keys' expiry: what a cohort's waiters must share with a holder to be
    /// passed its lock (see `quorum::cohorts::Terms`).
    pub(crate) fn terms(&self) -> (Duration, Duration) {
        (self.ttl, self.key_ttl())
    }

    /// The lock-delay must be whole milliseconds (it goes into `PX`), and the TTL plus it at
    /// most [`MAX_TTL`](Self::MAX_TTL).
    pub(super) fn validate_lock_delay(&self) -> Result<(), ConfigError> {
        let delay = self.lock_delay;
        if !delay.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ConfigError::SubMillisecondLockDelay { lock_delay: delay });
        }
        if self
            .ttl
            .checked_add(delay)
            .is_none_or(|sum| sum > Self::MAX_TTL)
        {
            return Err(ConfigError::LockDelayTooLong {
                ttl: self.ttl,
                lock_delay: delay,
                max: Self::MAX_TTL,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::ms;

    #[test]
    fn off_by_default_and_the_key_ttl_is_the_ttl() {
        let config = LockConfig::default();
        assert_eq!(config.lock_delay(), Duration::ZERO);
        assert_eq!(config.key_ttl(), config.ttl());
    }

    #[test]
    fn adds_to_the_key_ttl_but_not_to_the_validity() {
        let plain = LockConfig::builder().ttl(ms(1_000)).build().unwrap();
        let delayed = plain.to_builder().lock_delay(ms(400)).build().unwrap();
        assert_eq!(delayed.key_ttl(), ms(1_400));
        assert_eq!(delayed.max_validity(), plain.max_validity());
        assert_eq!(delayed.drift_allowance(), plain.drift_allowance());
    }

    #[test]
    fn rejects_sub_millisecond_delays_and_sums_above_the_maximum() {
        let build = |delay| LockConfig::builder().lock_delay(delay).build();
        assert!(matches!(
            build(Duration::from_micros(1_500)),
            Err(ConfigError::SubMillisecondLockDelay { .. })
        ));
        let room = LockConfig::MAX_TTL - LockConfig::DEFAULT_TTL;
        assert_eq!(build(room).map(|c| c.key_ttl()), Ok(LockConfig::MAX_TTL));
        let err = build(room + ms(1)).unwrap_err();
        assert!(
            matches!(err, ConfigError::LockDelayTooLong { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("lock-delay"), "{err}");
        assert!(matches!(
            build(Duration::from_secs(u64::MAX)),
            Err(ConfigError::LockDelayTooLong { .. })
        ));
    }
}
