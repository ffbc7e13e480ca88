//! A [`Link`]'s watch of its server's clock: one `TIME` a second on the open connection,
//! judged by [`ClockWatch`](crate::backend::clock::ClockWatch), and the abstention that
//! follows an anomaly.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

use super::{Link, State};
use crate::backend::abstention::{Abstention, AbstentionCause};
use crate::backend::clock::{server_time, ClockAnomaly, Sample, SAMPLE_INTERVAL};
use crate::backend::identity::Rejection;
use crate::metrics::Counters;

impl Link {
    /// The node's abstention for what its clock did, while it lasts.
    pub(super) fn clock_abstains(&self) -> Option<Abstention> {
        let clock = self.clock.as_ref()?;
        let held = self
            .clock_abstention
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (until, anomaly) = held.as_ref()?;
        let remaining = until.checked_duration_since(Instant::now())?;
        Some(Abstention {
            remaining,
            cause: AbstentionCause::Clock {
                anomaly: anomaly.clone(),
                window: clock.abstain_for(),
            },
        })
    }

    /// Samples the server's clock on connection `generation` once a
    /// [`SAMPLE_INTERVAL`], until that connection is given up; a clock found wrong makes
    /// the node abstain (see [`clock`](super::clock)). One `TIME` a second: a command the
    /// server answers from memory, beside the lock's requests, never in a round's way.
    pub(super) async fn watch_clock(link: std::sync::Weak<Self>, generation: u64) {
        loop {
            tokio::time::sleep(SAMPLE_INTERVAL).await;
            let Some(this) = link.upgrade() else {
                return;
            };
            let Some(clock) = &this.clock else {
                return;
            };
            let connection = match &*this.lock_state() {
                State::Up {
                    connection,
                    generation: open,
                } if *open == generation => connection.clone(),
                _ => return,
            };
            let mut connection = connection;
            let sent = Instant::now();
            let time = redis::cmd("TIME");
            let reply = tokio::time::timeout(
                this.settings.silence_limit,
                connection.send_packed_command(&time),
            )
            .await;
            let received = Instant::now();
            // No reply in time: the silence check's business, not the clock's.
            let Some(server) = reply
                .ok()
                .and_then(Result::ok)
                .as_ref()
                .and_then(server_time)
            else {
                continue;
            };
            let sample = Sample {
                sent,
                received,
                server,
            };
            if let Some(anomaly) = clock.observe(sample) {
                this.abstain_for_clock(generation, anomaly, clock.abstain_for());
                return;
            }
        }
    }

    /// Makes the node abstain for `window` for `anomaly`: connection `generation` is given
    /// up, and no new one is taken into use before the window ends.
    pub(super) fn abstain_for_clock(
        &self,
        generation: u64,
        anomaly: ClockAnomaly,
        window: Duration,
    ) {
        Counters::bump(&self.counters.clock_anomalies);
        let until = Instant::now() + window;
        *self
            .clock_abstention
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((until, anomaly.clone()));
        let abstention = Abstention {
            remaining: window,
            cause: AbstentionCause::Clock { anomaly, window },
        };
        tracing::warn!(node = %self.name, %abstention, "node clock misbehaved; it counts as failed until then");
        let mut state = self.lock_state();
        if matches!(&*state, State::Up { generation: open, .. } if *open == generation) {
            self.open.store(false, Ordering::Relaxed);
            *state = State::Down {
                retry_at: until,
                why: Rejection::Abstaining(abstention),
                failures: 0,
                queue_next: false,
            };
            self.changed.notify_waiters();
        }
    }
}
