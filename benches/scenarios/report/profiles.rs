//! The network profiles: each scenario's ratios against rslock with their spread over the
//! repetitions, the rounds per acquisition, and the physical bound of the profile, its
//! round trips times the injected delay (plus this run's loopback round trip).

use std::fmt::Write as _;

use super::Report;
use crate::clients::Contender;
use crate::delay::Profile;
use crate::physical::Physical;
use crate::scenarios::{Results, SCENARIOS};
use crate::stats::{self, fmt_rate, fmt_us, Run, Spread, Summary};

/// The scenarios' runs in one delayed profile.
pub struct ProfileRun {
    pub profile: Profile,
    pub results: Results,
    /// PING through the delay line, per node.
    pub ping: Physical,
}

/// The bounds of one profile: the loopback round trips of this run plus the delay.
struct Bounds {
    /// One round trip to the node that completes a quorum, through the delay, in µs.
    quorum_rtt_us: f64,
    /// One round trip to node 0, which holds scenario 3's counter (not behind the delay).
    counter_rtt_us: f64,
    /// One way, in µs.
    each_way_us: f64,
}

impl Bounds {
    fn of(loopback: &Physical, profile: Profile) -> Option<Bounds> {
        let each_way_us = profile.each_way.as_secs_f64() * 1e6;
        Some(Bounds {
            quorum_rtt_us: loopback.quorum_rtt_us()? + 2.0 * each_way_us,
            counter_rtt_us: *loopback.ping_p50_us.first()?,
            each_way_us,
        })
    }

    /// Scenario 1's p50: an acquire and a release, one round trip each.
    fn cycle_us(&self) -> f64 {
        2.0 * self.quorum_rtt_us
    }

    /// Scenario 3's ops/s with the reservation's hand-off (`direct_grant(false)`, and the
    /// versions before the grant): three round trips to the quorum (the release, its
    /// announcement, the next claim) plus the counter's GET and SET.
    fn three_rounds_ops(&self) -> f64 {
        1e6 / (3.0 * self.quorum_rtt_us + 2.0 * self.counter_rtt_us)
    }

    /// Scenario 3's ops/s with a direct grant: two one-way delays (the release reaching
    /// the nodes, the grant reaching the waiter) plus the counter's GET and SET.
    fn two_delays_ops(&self) -> f64 {
        let one_way = self.each_way_us + (self.quorum_rtt_us - 2.0 * self.each_way_us) / 2.0;
        1e6 / (2.0 * one_way + 2.0 * self.counter_rtt_us)
    }
}

fn spread_of(
    results: &Results,
    id: &str,
    theirs: Contender,
    metric: fn(&Run) -> Option<f64>,
) -> Option<Spread> {
    let runs = |contender| {
        results
            .get(&(id, contender))
            .map_or(&[][..], |runs| runs.as_slice())
    };
    Spread::of(stats::paired_ratios(
        runs(Contender::Quorumlock),
        runs(theirs),
        metric,
    ))
}

impl Report<'_> {
    /// One table per profile (loopback first, from the main results), then the targets
    /// of the delayed profiles.
    pub(super) fn write_profiles(&self, out: &mut String) {
        if self.profiles.is_empty() {
            return;
        }
        let Some(loopback) = self.physical else {
            return;
        };
        let _ = writeln!(
            out,
            "\n#### Network profiles (every node behind a delay each way, the peers too; ratios quorumlock / rslock: median of per-repetition ratios, then least–largest)\n"
        );
        let _ = writeln!(
            out,
            "| profile | scenario | quorumlock ops/s | rslock ops/s | ops/s | p50 | p99 | CPU/op | rounds per acquisition | bound | ours / bound |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
        let mut all: Vec<(Profile, &Results)> = Vec::new();
        if !self.results.is_empty() {
            all.push((Profile::LOOPBACK, self.results));
        }
        all.extend(self.profiles.iter().map(|run| (run.profile, &run.results)));
        for (profile, results) in &all {
            let Some(bounds) = Bounds::of(loopback, *profile) else {
                continue;
            };
            for scenario in SCENARIOS {
                let Some(ours) = results.get(&(scenario.id, Contender::Quorumlock)) else {
                    continue;
                };
                let theirs = results
                    .get(&(scenario.id, Contender::Rslock))
                    .map(|runs| Summary::of(runs));
                let ours_summary = Summary::of(ours);
                let ratio = |metric: fn(&Run) -> Option<f64>| {
                    spread_of(results, scenario.id, Contender::Rslock, metric)
                        .map_or("–".to_owned(), Spread::ratio)
                };
                let rounds = Spread::of(ours.iter().filter_map(|run| run.rounds_per_acquire))
                    .map_or("–".to_owned(), Spread::plain);
                let (bound, share) = match scenario.id {
                    "s1" => (
                        format!("p50 {}", fmt_us(Some(bounds.cycle_us()))),
                        ours_summary
                            .p50_us
                            .map(|p50| format!("p50 {:.2}x", p50 / bounds.cycle_us())),
                    ),
                    "s3" => (
                        format!(
                            "{} (3 round trips), {} (2 delays)",
                            fmt_rate(Some(bounds.three_rounds_ops())),
                            fmt_rate(Some(bounds.two_delays_ops()))
                        ),
                        ours_summary.ops_per_sec.map(|ops| {
                            format!(
                                "{:.2}x, {:.2}x",
                                ops / bounds.three_rounds_ops(),
                                ops / bounds.two_delays_ops()
                            )
                        }),
                    ),
                    _ => ("–".to_owned(), None),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    profile.label(),
                    scenario.id,
                    fmt_rate(ours_summary.ops_per_sec),
                    fmt_rate(theirs.and_then(|t| t.ops_per_sec)),
                    ratio(|run| Some(run.ops_per_sec())),
                    ratio(|run| run.quantile_us(0.5)),
                    ratio(|run| run.quantile_us(0.99)),
                    ratio(|run| run.cpu_us_per_op),
                    rounds,
                    bound,
                    share.unwrap_or("–".to_owned()),
                );
            }
        }
        for run in self.profiles {
            let Some(bounds) = Bounds::of(loopback, run.profile) else {
                continue;
            };
            let ops = spread_of(&run.results, "s3", Contender::Rslock, |run| {
                Some(run.ops_per_sec())
            });
            let of_bound = Spread::of(
                run.results
                    .get(&("s3", Contender::Quorumlock))
                    .into_iter()
                    .flatten()
                    .map(|r| r.ops_per_sec() / bounds.two_delays_ops()),
            );
            let verdict = |value: Option<Spread>, limit: f64| match value {
                Some(v) if v.median >= limit => "met",
                _ => "**missed**",
            };
            let _ = writeln!(
                out,
                "\n{}: PING p50 through the delay line per node {}. Scenario 3 ops/s vs rslock {} \
                 (target ≥ 1.5x at 1 ms: {}); vs the two-delay bound {} (target ≥ 0.6x: {}).",
                run.profile.label(),
                run.ping.describe(),
                ops.map_or("–".to_owned(), Spread::ratio),
                verdict(ops, 1.5),
                of_bound.map_or("–".to_owned(), Spread::ratio),
                verdict(of_bound, 0.6),
            );
        }
        let _ = writeln!(
            out,
            "\nBounds: a round trip is this run's loopback PING p50 plus twice the delay. \
             Scenario 1: two round trips to the node that completes a quorum. Scenario 3: \
             the reservation's hand-off, three such round trips, or the direct grant's two \
             one-way delays, plus the counter's GET and SET on node 0, which is not behind the delay \
             (it is the work under the lock, not the lock)."
        );
    }
}
