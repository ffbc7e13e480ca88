//! The bounds of in-process cohorts (see [`crate::DistributedLock`]'s "Cohorts" and
//! docs/design.md): how many times in a row, and for how long, a held lock may pass from
//! task to task of one process without going back to the nodes.

use std::time::Duration;

use super::LockConfig;
use crate::error::ConfigError;

impl LockConfig {
    /// Default [`cohort_passes`](Self::cohort_passes): 32 passes in a row.
    pub const DEFAULT_COHORT_PASSES: u32 = 32;
    /// Default [`cohort_window`](Self::cohort_window): 10 ms.
    pub const DEFAULT_COHORT_WINDOW: Duration = Duration::from_millis(10);
    /// The longest [`cohort_window`](Self::cohort_window) accepted: 1 s. Waiters in other
    /// processes wait about that long more per cohort; longer is almost always a unit
    /// mistake.
    pub const MAX_COHORT_WINDOW: Duration = Duration::from_secs(1);

    /// How many times in a row a held lock may pass to another blocking acquisition of the
    /// same resources in this process, without a round trip to the nodes; 0 turns cohorts
    /// off. After that many passes the lock is released to the nodes, where waiters of
    /// other processes get their turn.
    pub fn cohort_passes(&self) -> u32 {
        self.cohort_passes
    }

    /// How long after a lock was won on the nodes it may still pass from task to task of
    /// this process (see [`cohort_passes`](Self::cohort_passes)); a release after that goes
    /// to the nodes.
    pub fn cohort_window(&self) -> Duration {
        self.cohort_window
    }

    /// Whether a release may pass the lock to a task of this process that waits for it:
    /// when [`cohort_passes`](Self::cohort_passes) is not 0 and
    /// [`fencing`](Self::fencing) is off. With fencing every holder mints its own token on
    /// the nodes, so every hand-over goes through them.
    pub fn cohorts(&self) -> bool {
        self.cohort_passes > 0 && !self.fencing
    }

    /// The least validity a lock must have left to be passed on: half the longest
    /// validity, so that the next holder gets at least half of what an acquisition gives.
    pub(crate) fn min_pass_validity(&self) -> Duration {
        self.max_validity() / 2
    }

    /// With cohorts on, the window must be non-zero (0 passes is how to turn them off) and
    /// at most [`MAX_COHORT_WINDOW`](Self::MAX_COHORT_WINDOW).
    pub(super) fn validate_cohort(&self) -> Result<(), ConfigError> {
        let window = self.cohort_window;
        if self.cohort_passes > 0 && (window.is_zero() || window > Self::MAX_COHORT_WINDOW) {
            return Err(ConfigError::CohortWindowOutOfRange {
                window,
                max: Self::MAX_COHORT_WINDOW,
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
    fn cohorts_are_on_by_default_and_off_with_fencing_or_zero_passes() {
        let config = LockConfig::default();
        assert!(config.cohorts());
        assert_eq!(config.cohort_passes(), 32);
        assert_eq!(config.cohort_window(), ms(10));
        let fenced = LockConfig::builder().fencing(true).build().unwrap();
        assert!(!fenced.cohorts());
        let off = LockConfig::builder().cohort_passes(0).build().unwrap();
        assert!(!off.cohorts());
    }

    #[test]
    fn the_window_must_be_non_zero_and_at_most_a_second() {
        for window in [Duration::ZERO, ms(1_001)] {
            let err = LockConfig::builder()
                .cohort_window(window)
                .build()
                .unwrap_err();
            assert_eq!(
                err,
                ConfigError::CohortWindowOutOfRange {
                    window,
                    max: LockConfig::MAX_COHORT_WINDOW
                }
            );
            assert!(err.to_string().contains("cohort_passes(0)"), "{err}");
        }
        // Without cohorts the window is not used, and not checked.
        let off = LockConfig::builder()
            .cohort_passes(0)
            .cohort_window(Duration::ZERO)
            .build();
        assert!(off.is_ok());
        assert!(LockConfig::builder()
            .cohort_window(LockConfig::MAX_COHORT_WINDOW)
            .build()
            .is_ok());
    }

    #[test]
    fn a_pass_needs_half_the_longest_validity() {
        let config = LockConfig::default();
        assert_eq!(config.min_pass_validity(), ms(29_698 / 2));
    }
}
