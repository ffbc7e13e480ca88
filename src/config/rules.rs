//! The rules every [`LockConfig`] must pass, checked once when it is built, so that a lock
//! never runs with settings that make no sense: a zero or sub-millisecond TTL, a drift
//! allowance or node timeout that eats the validity, retries that spin or never end.

use super::LockConfig;
use crate::error::ConfigError;

impl LockConfig {
    /// Checks every rule; the first one broken is the error.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let ttl = self.ttl;
        if ttl.is_zero() {
            return Err(ConfigError::ZeroTtl);
        }
        if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ConfigError::SubMillisecondTtl { ttl });
        }
        if ttl > Self::MAX_TTL {
            return Err(ConfigError::TtlTooLong {
                ttl,
                max: Self::MAX_TTL,
            });
        }
        if !self.drift_factor.is_finite() || !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::InvalidDriftFactor {
                factor: self.drift_factor,
            });
        }
        if self.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout);
        }
        let max_node_timeout = ttl / Self::MAX_NODE_TIMEOUT_SHARE;
        if self.node_timeout > max_node_timeout {
            return Err(ConfigError::NodeTimeoutTooLong {
                node_timeout: self.node_timeout,
                ttl,
                max: max_node_timeout,
            });
        }
        // A round may take a whole node timeout: the validity must outlast it.
        if self.max_validity() <= self.node_timeout {
            return Err(ConfigError::NoValidityLeft {
                ttl,
                drift: self.drift_allowance(),
                node_timeout: self.node_timeout,
            });
        }
        if self.retry_count > 0 && self.retry_delay.is_zero() {
            return Err(ConfigError::ZeroRetryDelay);
        }
        if self.retry_jitter > self.retry_delay {
            return Err(ConfigError::JitterExceedsDelay {
                jitter: self.retry_jitter,
                delay: self.retry_delay,
            });
        }
        if let Some(prefix) = &self.key_prefix {
            if prefix.len() > Self::MAX_KEY_PREFIX_LEN {
                return Err(ConfigError::KeyPrefixTooLong {
                    len: prefix.len(),
                    max: Self::MAX_KEY_PREFIX_LEN,
                });
            }
        }
        self.fencing_counters.validate()?;
        self.validate_cohort()?;
        self.validate_lock_delay()?;
        self.validate_wait()
    }

    /// A blocking acquire must end: by its deadline when it has one, else by its retries.
    fn validate_wait(&self) -> Result<(), ConfigError> {
        match self.acquire_timeout {
            Some(timeout) => {
                if timeout.is_zero() {
                    return Err(ConfigError::ZeroAcquireTimeout);
                }
                if timeout > Self::MAX_ACQUIRE_TIMEOUT {
                    return Err(ConfigError::AcquireTimeoutTooLong {
                        timeout,
                        max: Self::MAX_ACQUIRE_TIMEOUT,
                    });
                }
            }
            None => {
                let worst_case = self.worst_case_acquire();
                let max = self.max_blocking_acquire();
                if worst_case.is_none_or(|worst| worst > max) {
                    return Err(ConfigError::RetriesUnbounded {
                        retry_count: self.retry_count,
                        retry_delay: self.retry_delay,
                        retry_jitter: self.retry_jitter,
                        attempt: self.attempt_bound(),
                        worst_case,
                        max,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::ms;
    use std::time::Duration;

    #[test]
    fn rejects_zero_sub_millisecond_and_huge_ttls() {
        let build = |ttl| LockConfig::builder().ttl(ttl).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroTtl));
        assert!(matches!(
            build(Duration::from_micros(1_000_500)),
            Err(ConfigError::SubMillisecondTtl { .. })
        ));
        assert!(matches!(
            build(LockConfig::MAX_TTL + ms(1)),
            Err(ConfigError::TtlTooLong { .. })
        ));
        assert!(build(LockConfig::MAX_TTL).is_ok());
    }

    #[test]
    fn rejects_drift_factors_outside_zero_to_one() {
        for factor in [-0.1, 1.0, 7.0, f64::NAN, f64::INFINITY] {
            let result = LockConfig::builder().drift_factor(factor).build();
            assert!(
                matches!(result, Err(ConfigError::InvalidDriftFactor { .. })),
                "{factor}: {result:?}"
            );
        }
        assert!(LockConfig::builder().drift_factor(0.0).build().is_ok());
    }

    #[test]
    fn rejects_drift_that_eats_the_ttl() {
        let result = LockConfig::builder()
            .ttl(ms(100))
            .node_timeout(ms(5))
            .drift_factor(0.99)
            .build();
        assert!(matches!(result, Err(ConfigError::NoValidityLeft { .. })));
        // A 2 ms TTL cannot even cover the 2 ms drift floor.
        let result = LockConfig::builder()
            .ttl(ms(2))
            .node_timeout(Duration::from_micros(100))
            .build();
        assert!(matches!(result, Err(ConfigError::NoValidityLeft { .. })));
    }

    #[test]
    fn rejects_node_timeouts_that_are_zero_or_not_well_below_the_ttl() {
        let build = |timeout| LockConfig::builder().node_timeout(timeout).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroNodeTimeout));
        assert!(matches!(
            build(ms(3001)),
            Err(ConfigError::NodeTimeoutTooLong { .. })
        ));
        assert!(build(ms(3000)).is_ok());
    }

    #[test]
    fn rejects_spinning_retries_and_oversized_jitter() {
        let result = LockConfig::builder()
            .retry_delay(Duration::ZERO)
            .retry_jitter(Duration::ZERO)
            .build();
        assert_eq!(result, Err(ConfigError::ZeroRetryDelay));
        // Without retries a zero delay is never used, so it is fine.
        let no_retries = LockConfig::builder()
            .retry_count(0)
            .retry_delay(Duration::ZERO)
            .retry_jitter(Duration::ZERO)
            .build();
        assert!(no_retries.is_ok());
        let result = LockConfig::builder().retry_jitter(ms(201)).build();
        assert!(matches!(
            result,
            Err(ConfigError::JitterExceedsDelay { .. })
        ));
    }

    #[test]
    fn rejects_oversized_key_prefix() {
        let result = LockConfig::builder().key_prefix("p".repeat(257)).build();
        assert!(matches!(result, Err(ConfigError::KeyPrefixTooLong { .. })));
    }

    #[test]
    fn rejects_retries_that_could_run_for_months() {
        // Four billion retries 1 ms apart: about 50 days of waits alone.
        let err = LockConfig::builder()
            .retry_count(u32::MAX)
            .retry_delay(ms(1))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap_err();
        let ConfigError::RetriesUnbounded {
            retry_count,
            worst_case,
            max,
            ..
        } = &err
        else {
            panic!("expected RetriesUnbounded, got {err:?}");
        };
        assert_eq!(*retry_count, u32::MAX);
        assert!(worst_case.is_some_and(|worst| worst > Duration::from_secs(49 * 86_400)));
        assert_eq!(*max, LockConfig::MAX_BLOCKING_ACQUIRE);
        let text = err.to_string();
        for needle in ["4294967295 retries", "1ms", "3600s", "acquire_timeout"] {
            assert!(text.contains(needle), "{needle:?} missing: {text}");
        }
    }

    #[test]
    fn rejects_a_retry_delay_that_never_ends() {
        let err = LockConfig::builder()
            .retry_delay(Duration::MAX)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::RetriesUnbounded {
                    worst_case: None,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("could take forever"), "{err}");
    }

    #[test]
    fn an_acquire_timeout_lifts_the_bound_on_the_retries() {
        let config = LockConfig::builder()
            .retry_count(u32::MAX)
            .retry_delay(ms(1))
            .retry_jitter(Duration::ZERO)
            .acquire_timeout(Duration::from_secs(4 * 3600))
            .build()
            .unwrap();
        assert_eq!(
            config.acquire_timeout(),
            Some(Duration::from_secs(4 * 3600))
        );
        // Taking the deadline away again brings the check back.
        assert!(matches!(
            config.to_builder().acquire_timeout(None).build(),
            Err(ConfigError::RetriesUnbounded { .. })
        ));
        let build = |timeout| LockConfig::builder().acquire_timeout(timeout).build();
        assert_eq!(build(Duration::ZERO), Err(ConfigError::ZeroAcquireTimeout));
        assert!(matches!(
            build(LockConfig::MAX_ACQUIRE_TIMEOUT + ms(1)),
            Err(ConfigError::AcquireTimeoutTooLong { .. })
        ));
        assert!(build(LockConfig::MAX_ACQUIRE_TIMEOUT).is_ok());
        assert_eq!(LockConfig::default().acquire_timeout(), None);
    }

    #[test]
    fn errors_explain_themselves() {
        let err = LockConfig::builder()
            .node_timeout(Duration::from_secs(5))
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("node timeout"), "{text}");
        assert!(text.contains("3s"), "{text}");
    }
}
