//! [`ClockWatch`]: a node's server clock, sampled against the client's monotonic clock, and
//! the rules that tell a clock a lock cannot trust: a step, a rate outside the drift
//! allowance, a clock that stands still.
//!
//! Redis expires keys by its own wall clock, and Redlock's validity assumes that clock
//! runs at about the client's rate (A1 of docs/safety.md). A node whose clock steps forward
//! or runs fast expires a holder's key early, and a second client can then form a quorum
//! with it. The link samples `TIME` on its open connection once a
//! [`SAMPLE_INTERVAL`]; each sample is bracketed by the client's monotonic instants of the
//! request and the reply, so the server's reading is known to fall between them, and every
//! rule allows for that uncertainty before it blames the clock.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How often a link samples its server's clock.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// The span over which the rate is judged: long enough that a rate just outside the drift
/// factor shows above the round trips' uncertainty.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// What a lock tolerates of a server clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockRules {
    /// The largest step, either way, beyond the round trip's uncertainty: the lock's drift
    /// allowance.
    pub(crate) step: Duration,
    /// The largest rate error, as a fraction: the lock's drift factor.
    pub(crate) rate: f64,
    /// How long a node abstains after an anomaly: the longest lease plus its drift, as
    /// after a restart, since every key it holds may have expired early.
    pub(crate) abstain_for: Duration,
}

/// One reading of the server clock: `server` (since the Unix epoch) was read after `sent`
/// and before `received`, on the client's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) sent: Instant,
    pub(crate) received: Instant,
    pub(crate) server: Duration,
}

/// What was wrong with a server clock.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClockAnomaly {
    /// It moved by `server` while the client's clock moved by between `client_min` and
    /// `client_max`: a step forward or back.
    Step {
        server: Duration,
        backwards: bool,
        client_min: Duration,
        client_max: Duration,
    },
    /// It ran at `rate` times the client's clock over `over`.
    Rate { rate: f64, over: Duration },
    /// It did not advance over `over` of the client's time.
    Stopped { over: Duration },
}

impl fmt::Display for ClockAnomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClockAnomaly::Step {
                server,
                backwards,
                client_min,
                client_max,
            } => write!(
                f,
                "its clock stepped {}: it moved {} {:.3} s while the client's moved \
                 {:.3}-{:.3} s",
                if *backwards { "back" } else { "forward" },
                if *backwards { "back" } else { "by" },
                server.as_secs_f64(),
                client_min.as_secs_f64(),
                client_max.as_secs_f64(),
            ),
            ClockAnomaly::Rate { rate, over } => write!(
                f,
                "its clock ran at {rate:.4}x the client's over {:.1} s",
                over.as_secs_f64()
            ),
            ClockAnomaly::Stopped { over } => write!(
                f,
                "its clock did not advance over {:.3} s",
                over.as_secs_f64()
            ),
        }
    }
}

/// The samples of one link's server clock, and the rules they are judged by.
#[derive(Debug)]
pub(crate) struct ClockWatch {
    rules: ClockRules,
    /// The samples of the current connection's clock, oldest first, spanning about
    /// [`RATE_WINDOW`].
    samples: Mutex<VecDeque<Sample>>,
}

impl ClockWatch {
    pub(crate) fn new(rules: ClockRules) -> Self {
        ClockWatch {
            rules,
            samples: Mutex::default(),
        }
    }

    /// How long a node abstains after an anomaly.
    pub(crate) fn abstain_for(&self) -> Duration {
        self.rules.abstain_for
    }

    /// Forgets every sample: a new connection may reach a restarted server, whose clock
    /// need not continue the old one's readings.
    pub(crate) fn reset(&self) {
        self.lock().clear();
    }

    /// Takes `sample` in, and says what is wrong with the clock, if anything (the samples
    /// are then forgotten: the next judgement starts afresh).
    pub(crate) fn observe(&self, sample: Sample) -> Option<ClockAnomaly> {
        let mut samples = self.lock();
        let anomaly = samples
            .back()
            .and_then(|last| self.step(last, &sample))
            .or_else(|| samples.front().and_then(|first| self.rate(first, &sample)));
        if anomaly.is_some() {
            samples.clear();
            return anomaly;
        }
        samples.push_back(sample);
        // The oldest sample kept is the youngest one at least a window old, so the rate is
        // judged over about a window.
        while samples.len() > 1
            && sample.sent.saturating_duration_since(samples[1].received) >= RATE_WINDOW
        {
            samples.pop_front();
        }
        None
    }

    /// Between two samples, the server's clock must have moved by what the client's did,
    /// within the round trips' uncertainty and the step allowance.
    fn step(&self, last: &Sample, next: &Sample) -> Option<ClockAnomaly> {
        let client_min = next.sent.saturating_duration_since(last.received);
        let client_max = next.received.saturating_duration_since(last.sent);
        let allowance = self.rules.step;
        match next.server.checked_sub(last.server) {
            None => Some(ClockAnomaly::Step {
                server: last.server - next.server,
                backwards: true,
                client_min,
                client_max,
            }),
            Some(moved) if moved.is_zero() && client_min > allowance => {
                Some(ClockAnomaly::Stopped { over: client_min })
            }
            Some(moved)
                if moved > client_max.saturating_add(allowance)
                    || moved.saturating_add(allowance) < client_min =>
            {
                Some(ClockAnomaly::Step {
                    server: moved,
                    backwards: moved < client_min,
                    client_min,
                    client_max,
                })
            }
            Some(_) => None,
        }
    }

    /// Over at least [`RATE_WINDOW`], the server's clock must run at the client's rate
    /// within the drift factor, once the round trips' uncertainty is allowed for.
    fn rate(&self, first: &Sample, next: &Sample) -> Option<ClockAnomaly> {
        let client_min = next.sent.saturating_duration_since(first.received);
        if client_min < RATE_WINDOW {
            return None;
        }
        let client_max = next.received.saturating_duration_since(first.sent);
        let moved = next.server.checked_sub(first.server)?.as_secs_f64();
        let slowest = client_max.as_secs_f64() * (1.0 - self.rules.rate);
        let fastest = client_min.as_secs_f64() * (1.0 + self.rules.rate);
        if moved < slowest || moved > fastest {
            let over = (client_min + client_max) / 2;
            return Some(ClockAnomaly::Rate {
                rate: moved / over.as_secs_f64(),
                over,
            });
        }
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The server time of a `TIME` reply (seconds and microseconds, as strings), since the
/// Unix epoch.
pub(crate) fn server_time(reply: &redis::Value) -> Option<Duration> {
    let redis::Value::Array(fields) = reply else {
        return None;
    };
    let number = |value: Option<&redis::Value>| -> Option<u64> {
        match value? {
            redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
            redis::Value::Int(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    };
    let seconds = number(fields.first())?;
    let micros = number(fields.get(1))?;
    Some(Duration::from_secs(seconds) + Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn rules() -> ClockRules {
        ClockRules {
            step: 102 * MS,
            rate: 0.01,
            abstain_for: Duration::from_secs(10),
        }
    }

    /// Samples every second, with a 1 ms round trip, of a server clock that reads
    /// `server(i)` at the i-th.
    fn feed(watch: &ClockWatch, n: u32, server: impl Fn(u32) -> Duration) -> Vec<ClockAnomaly> {
        let start = Instant::now();
        (0..n)
            .filter_map(|i| {
                let sent = start + Duration::from_secs(u64::from(i));
                watch.observe(Sample {
                    sent,
                    received: sent + MS,
                    server: server(i),
                })
            })
            .collect()
    }

    const EPOCH: Duration = Duration::from_secs(1_800_000_000);

    #[test]
    fn a_clock_at_the_clients_rate_passes() {
        let watch = ClockWatch::new(rules());
        // Within the drift factor: 0.5 % fast, over 30 s.
        let found = feed(&watch, 30, |i| {
            EPOCH + Duration::from_secs(u64::from(i)).mul_f64(1.005)
        });
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_step_either_way_is_found_at_the_next_sample() {
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 6, |i| {
            let at = EPOCH + Duration::from_secs(u64::from(i));
            if i >= 3 {
                at + Duration::from_secs(3600)
            } else {
                at
            }
        });
        assert!(
            matches!(
                found[..],
                [ClockAnomaly::Step {
                    backwards: false,
                    ..
                }]
            ),
            "{found:?}"
        );
        assert!(
            found[0].to_string().contains("stepped forward"),
            "{}",
            found[0]
        );
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 4, |i| {
            EPOCH + Duration::from_secs(u64::from(i)) - MS * 500 * u32::from(i == 2)
        });
        assert!(
            matches!(
                found[..],
                [
                    ClockAnomaly::Step {
                        backwards: true,
                        ..
                    },
                    ..
                ]
            ),
            "{found:?}"
        );
    }

    #[test]
    fn a_step_within_the_allowance_passes() {
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 5, |i| {
            EPOCH + Duration::from_secs(u64::from(i)) + 50 * MS * u32::from(i >= 2)
        });
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_clock_three_times_fast_is_a_step_at_once() {
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 3, |i| EPOCH + Duration::from_secs(3 * u64::from(i)));
        assert!(
            matches!(found[..], [ClockAnomaly::Step { .. }, ..]),
            "{found:?}"
        );
    }

    #[test]
    fn a_clock_two_percent_fast_is_found_over_the_window() {
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 30, |i| {
            EPOCH + Duration::from_secs(u64::from(i)).mul_f64(1.02)
        });
        let ClockAnomaly::Rate { rate, .. } = found[0] else {
            panic!("{found:?}");
        };
        assert!((rate - 1.02).abs() < 0.002, "{rate}");
    }

    #[test]
    fn a_clock_that_stands_still_is_found() {
        let watch = ClockWatch::new(rules());
        let found = feed(&watch, 3, |_| EPOCH);
        assert!(
            matches!(found[..], [ClockAnomaly::Stopped { .. }, ..]),
            "{found:?}"
        );
        assert!(found[0].to_string().contains("did not advance"));
    }

    #[test]
    fn time_replies_are_read() {
        use redis::Value::{Array, BulkString};
        let reply = Array(vec![
            BulkString(b"1800000000".to_vec()),
            BulkString(b"250000".to_vec()),
        ]);
        assert_eq!(server_time(&reply), Some(EPOCH + 250 * MS));
        assert_eq!(server_time(&Array(vec![])), None);
    }
}
