//! How long a blocking acquire may wait: the bound of one attempt, the worst case of the
//! retry settings and its limit, and the deadline an acquire timeout sets.

use std::time::Duration;

use tokio::time::Instant;

use super::LockConfig;

impl LockConfig {
    /// The longest a blocking acquire may take by its retry settings alone, without an
    /// [`acquire_timeout`](Self::acquire_timeout): 1 hour.
    ///
    /// Waiting for a lock is meant to cover a holder's critical section, seconds to
    /// minutes; the defaults give up after about 2 s. An hour is three orders of magnitude
    /// above that, so no sensible setting is refused, while `retry_count(u32::MAX)` (the
    /// original design's "retry forever" anti-pattern, months of retries even 1 ms apart)
    /// and `retry_delay(Duration::MAX)` (one sleep that never ends) are. A caller that
    /// really wants to wait longer says how long, with an acquire timeout.
    ///
    /// Locks with TTLs of hours get more: see
    /// [`max_blocking_acquire`](Self::max_blocking_acquire).
    pub const MAX_BLOCKING_ACQUIRE: Duration = Duration::from_secs(60 * 60);
    /// For long TTLs, a blocking acquire may take this many TTLs (5) instead of
    /// [`MAX_BLOCKING_ACQUIRE`](Self::MAX_BLOCKING_ACQUIRE). Waiting out a crashed holder
    /// takes up to one TTL, and with TTLs of hours even a single attempt's node timeouts
    /// (up to a tenth of the TTL each) can exceed an hour; a few TTLs is what waiting for
    /// such a lock means, while months of retries stay refused.
    pub const MAX_BLOCKING_ACQUIRE_TTLS: u32 = 5;
    /// How many node timeouts one attempt of a blocking acquire can take, fencing off: the
    /// lock round, the rollback of a failed attempt, and the waits' set-up (a pub/sub
    /// subscription, connect then confirm, and joining or leaving the queue), each bounded
    /// by one node timeout.
    const ATTEMPT_ROUNDS: u32 = 5;
    /// The two more rounds of an attempt with fencing on: reading and raising the counter.
    const FENCING_ROUNDS: u32 = 2;

    /// The longest one attempt of a blocking acquire can take: a few node timeouts (5, or 7
    /// with fencing), for the lock round, the rollback of a failed attempt, the set-up of
    /// the waits and, with fencing, minting the token. A client that is itself stalled
    /// (CPU starvation, a pause) can take longer; nothing bounds that.
    pub fn attempt_bound(&self) -> Duration {
        let rounds = if self.fencing {
            Self::ATTEMPT_ROUNDS + Self::FENCING_ROUNDS
        } else {
            Self::ATTEMPT_ROUNDS
        };
        self.node_timeout.saturating_mul(rounds)
    }

    /// The longest [`worst_case_acquire`](Self::worst_case_acquire) accepted without an
    /// acquire timeout: [`MAX_BLOCKING_ACQUIRE`](Self::MAX_BLOCKING_ACQUIRE) (1 hour), or
    /// [`MAX_BLOCKING_ACQUIRE_TTLS`](Self::MAX_BLOCKING_ACQUIRE_TTLS) TTLs if that is
    /// longer (TTLs over 12 minutes).
    pub fn max_blocking_acquire(&self) -> Duration {
        self.ttl
            .saturating_mul(Self::MAX_BLOCKING_ACQUIRE_TTLS)
            .max(Self::MAX_BLOCKING_ACQUIRE)
    }

    /// The longest a blocking acquire can take by its retry settings:
    /// `retry_count × (retry_delay + retry_jitter) + (retry_count + 1) × attempt_bound()`;
    /// `None` when that overflows a `Duration`. An
    /// [`acquire_timeout`](Self::acquire_timeout) ends it sooner. Not counted: waiting for
    /// the turn behind other blocking acquires of the same resources in this process, each
    /// bounded in the same way, and client stalls.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use quorumlock::LockConfig;
    /// // The defaults: 3 waits of up to 300 ms, 4 attempts of up to 5 × 50 ms.
    /// let config = LockConfig::default();
    /// assert_eq!(config.worst_case_acquire(), Some(Duration::from_millis(3 * 300 + 4 * 250)));
    /// ```
    pub fn worst_case_acquire(&self) -> Option<Duration> {
        let longest_wait = self.retry_delay.checked_add(self.retry_jitter)?;
        let waits = longest_wait.checked_mul(self.retry_count)?;
        // `retry_count + 1` attempts, without overflowing a `u32` at `u32::MAX` retries.
        let attempt = self.attempt_bound();
        let attempts = attempt
            .checked_mul(self.retry_count)?
            .checked_add(attempt)?;
        waits.checked_add(attempts)
    }

    /// The deadline of a blocking acquire that starts at `now`, from the configured
    /// acquire timeout.
    pub(crate) fn acquire_deadline(&self, now: Instant) -> Option<Instant> {
        self.acquire_timeout
            .and_then(|timeout| now.checked_add(timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::ms;
    use crate::error::ConfigError;

    #[test]
    fn accepts_retries_up_to_the_bound_and_counts_the_attempts() {
        // One retry of up to an hour less the two attempts' bound is just allowed...
        let attempts = LockConfig::default().attempt_bound() * 2;
        let delay = LockConfig::MAX_BLOCKING_ACQUIRE - attempts;
        let build = |delay| {
            LockConfig::builder()
                .retry_count(1)
                .retry_delay(delay)
                .retry_jitter(Duration::ZERO)
                .build()
        };
        let config = build(delay).unwrap();
        assert_eq!(
            config.worst_case_acquire(),
            Some(LockConfig::MAX_BLOCKING_ACQUIRE)
        );
        // ...one millisecond more is not: the attempts count, not only the waits.
        assert!(matches!(
            build(delay + ms(1)),
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        // A long TTL allows five TTLs: a 1-day lock may wait five days.
        let long = LockConfig::builder()
            .ttl(Duration::from_secs(86_400))
            .retry_count(1)
            .retry_delay(Duration::from_secs(4 * 86_400))
            .retry_jitter(Duration::ZERO)
            .build();
        assert!(long.is_ok(), "{long:?}");
        let too_long = long.unwrap().to_builder().retry_count(2).build();
        assert!(matches!(
            too_long,
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        // Fencing adds two rounds to each attempt.
        let fenced = LockConfig::builder().fencing(true).build().unwrap();
        assert_eq!(fenced.attempt_bound(), ms(7 * 50));
        assert_eq!(LockConfig::default().attempt_bound(), ms(5 * 50));
    }

    #[test]
    fn the_acquire_timeout_sets_the_deadline_of_every_blocking_acquire() {
        let now = tokio::time::Instant::now();
        assert_eq!(LockConfig::default().acquire_deadline(now), None);
        let config = LockConfig::builder()
            .acquire_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(
            config.acquire_deadline(now),
            Some(now + Duration::from_secs(5))
        );
    }
}
