//! The physical limit of this run: the loopback round trip to each node (`PING`, p50),
//! and the bounds it implies for the scenarios, measured in the same run as they are.

use std::time::Instant;

use quorumlock_testkit::measure;

use crate::stats;

/// PINGs per node, after a few not counted.
const PINGS: usize = 300;
const WARM_UP_PINGS: usize = 20;

/// Each node's loopback round trip, in node order.
pub struct Physical {
    pub ping_p50_us: Vec<f64>,
}

/// Times `PING` on one connection per node, one at a time (nothing else runs meanwhile).
pub async fn measure(urls: &[String]) -> Physical {
    let mut ping_p50_us = Vec::with_capacity(urls.len());
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("node URL");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("PING connection");
        let mut hist = measure::histogram();
        for i in 0..WARM_UP_PINGS + PINGS {
            let started = Instant::now();
            let _: String = redis::cmd("PING")
                .query_async(&mut connection)
                .await
                .expect("PING");
            if i >= WARM_UP_PINGS {
                measure::record(&mut hist, started.elapsed());
            }
        }
        ping_p50_us.push(stats::quantile_us(&hist, 0.5).expect("PINGs timed"));
    }
    Physical { ping_p50_us }
}

impl Physical {
    /// The round trip to the node that completes a quorum: the third fastest of five.
    pub fn quorum_rtt_us(&self) -> Option<f64> {
        let mut sorted = self.ping_p50_us.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied()
    }

    /// Scenario 1's bound: an acquire and a release, each one round trip to the quorum's
    /// slowest node.
    pub fn cycle_bound_us(&self) -> Option<f64> {
        self.quorum_rtt_us().map(|rtt| 2.0 * rtt)
    }

    /// Scenario 3's bound, in operations per second: per operation, the direct grant's
    /// hand-off chain (the release reaching the nodes, the grant's announcement reaching
    /// the waiter: two one-way delays, one round trip to the node that completes the
    /// quorum) and the counter's GET + SET (two round trips to node 0).
    pub fn handoff_bound_ops(&self) -> Option<f64> {
        let chain = self.quorum_rtt_us()? + 2.0 * self.ping_p50_us.first()?;
        (chain > 0.0).then(|| 1e6 / chain)
    }

    /// Scenario 3b's bound, in operations per second: a lock passed within the process
    /// costs no round trip, so only the counter's GET + SET remain.
    pub fn counter_bound_ops(&self) -> Option<f64> {
        let counter = 2.0 * self.ping_p50_us.first()?;
        (counter > 0.0).then(|| 1e6 / counter)
    }

    /// The round trips, for the report.
    pub fn describe(&self) -> String {
        self.ping_p50_us
            .iter()
            .map(|us| stats::fmt_us(Some(*us)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
