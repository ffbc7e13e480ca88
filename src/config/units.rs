//! Durations in the whole units that Redis and the traces take.

use std::time::Duration;

/// Whole milliseconds, saturating: what Redis `PX` takes, and the `_ms` trace fields.
/// Validation keeps TTLs whole milliseconds and at most 30 days, so a TTL loses nothing.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whole microseconds, saturating: latencies and the `_us` trace fields.
pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
