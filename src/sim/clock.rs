//! [`NodeClock`]: a simulated node's own clock, derived from tokio's clock.

use std::time::Duration;

use tokio::time::Instant;

/// A node's clock: a reading that advances at `rate` times the speed of tokio's clock (the
/// virtual clock under a paused runtime) and can be jumped.
///
/// The reading is a [`Duration`] since the node's clock started; it is continuous across
/// rate changes, and only jumps move it abruptly.
#[derive(Debug, Clone)]
pub(crate) struct NodeClock {
    /// The tokio instant of the last rebase.
    base_real: Instant,
    /// The node's reading at `base_real`.
    base_node: Duration,
    /// Node seconds per real second.
    rate: f64,
}

impl NodeClock {
    /// A clock reading zero at `now`, running at the real rate.
    pub(crate) fn new(now: Instant) -> Self {
        NodeClock {
            base_real: now,
            base_node: Duration::ZERO,
            rate: 1.0,
        }
    }

    /// The reading at the real instant `now` (instants before the last rebase read as it).
    pub(crate) fn read(&self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.base_real);
        self.base_node.saturating_add(scale(elapsed, self.rate))
    }

    /// Node seconds per real second.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// Runs at `rate` from `now` on, without moving the reading.
    pub(crate) fn set_rate(&mut self, now: Instant, rate: f64) {
        self.rebase(now);
        self.rate = rate;
    }

    /// Moves the reading forward by `by` at `now`.
    pub(crate) fn jump_forward(&mut self, now: Instant, by: Duration) {
        self.rebase(now);
        self.base_node = self.base_node.saturating_add(by);
    }

    /// Moves the reading back by `by` at `now` (not below zero).
    pub(crate) fn jump_back(&mut self, now: Instant, by: Duration) {
        self.rebase(now);
        self.base_node = self.base_node.saturating_sub(by);
    }

    fn rebase(&mut self, now: Instant) {
        self.base_node = self.read(now);
        self.base_real = self.base_real.max(now);
    }
}

/// `elapsed * rate`, exact at the real rate, saturating instead of overflowing.
fn scale(elapsed: Duration, rate: f64) -> Duration {
    if rate == 1.0 {
        return elapsed;
    }
    Duration::try_from_secs_f64(elapsed.as_secs_f64() * rate).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_changes_keep_the_reading_continuous() {
        let start = Instant::now();
        let mut clock = NodeClock::new(start);
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(clock.read(at(100)), Duration::from_millis(100));
        clock.set_rate(at(100), 2.0);
        assert_eq!(clock.read(at(100)), Duration::from_millis(100));
        assert_eq!(clock.read(at(150)), Duration::from_millis(200));
        clock.set_rate(at(150), 0.5);
        assert_eq!(clock.read(at(250)), Duration::from_millis(250));
        clock.jump_forward(at(250), Duration::from_secs(1));
        assert_eq!(clock.read(at(250)), Duration::from_millis(1250));
        clock.jump_back(at(250), Duration::from_secs(5));
        assert_eq!(clock.read(at(250)), Duration::ZERO);
        assert_eq!(clock.rate(), 0.5);
    }
}
