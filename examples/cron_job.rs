//! A cron job that runs on one host only, at every tick of its schedule.
//!
//! Four "hosts" (tasks, each with its own `Redlock` client and so its own connections) run
//! the same schedule: every 400 ms, each asks for the lock named after the tick
//! (`cron:report:tick-N`) and runs the report only if it got it. One host's clock is 100 ms
//! late, so it fires after the others. The winner does not release the lock when its job
//! ends: the key stays until its TTL, so a late host still finds the tick taken.
//!
//! On the way, two of the five lock nodes are killed before tick 2 (the ticks go on), tick
//! 3's job runs longer than the TTL (a watchdog extends its lock on the three nodes left),
//! and a third node is killed before the last tick (no majority: that tick is skipped, but
//! still never run twice).
//!
//! Checked at the end: every tick ran exactly once while a majority of nodes was up, and no
//! tick ever ran twice. The example exits non-zero otherwise.
//!
//! ```text
//! cargo run --example cron_job      # starts 5 local Redis nodes
//! QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379 cargo run --example cron_job
//! ```
//!
//! With `QUORUMLOCK_NODES` set, no node is killed, and every tick must run exactly once.

mod common;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Nodes, Result};
use quorumlock::{AutoExtend, LockConfig, LockError, LockGuard, Redlock};
use tokio::time::Instant;

const HOSTS: usize = 4;
const TICKS: u32 = 8;
const PERIOD: Duration = Duration::from_millis(400);
/// The last host's clock runs this far behind the others'.
const LATE_HOST_SKEW: Duration = Duration::from_millis(100);
/// Longer than a normal job. It must also outlast the spread between the hosts' attempts at
/// one tick (clock skew plus retries), because the key is what tells a late host that the
/// tick already ran.
const TTL: Duration = Duration::from_secs(1);
const JOB: Duration = Duration::from_millis(100);
/// Two nodes die before this tick (a minority), and a third before the last tick.
const MINORITY_DOWN_TICK: u32 = 2;
/// This tick's job takes longer than the TTL: the watchdog keeps its lock alive (on the
/// three nodes left), and it ends before the third node dies.
const LONG_JOB_TICK: u32 = 3;
const LONG_JOB: Duration = Duration::from_millis(1200);

/// What each host did at each tick: (tick, host, what happened).
type Journal = Arc<Mutex<Vec<(u32, usize, Attempt)>>>;

#[derive(Debug, Clone, PartialEq)]
enum Attempt {
    /// Won the tick's lock and ran the job (`finished`: the job ran to its end).
    Ran { finished: bool },
    /// Another host had the tick.
    Held,
    /// Too few nodes answered; `refused` of them said another host holds it.
    NoQuorum { refused: usize },
    /// The nodes answered too slowly.
    TooSlow,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result {
    // QUORUMLOCK_NODES=redis://host1:6379,... or 5 local nodes (stopped when `cluster` drops).
    let Nodes { urls, mut cluster } = common::lock_nodes(5).await?;
    let config = LockConfig::builder()
        .ttl(TTL)
        // Dropping the guard after the job leaves the key until its TTL (see `TTL`).
        .auto_release(false)
        // When hosts fire at the same instant their votes can split with no winner; a few
        // quick retries, spread by jitter, settle it within the tick.
        .retry_count(3)
        .retry_delay(Duration::from_millis(25))
        .retry_jitter(Duration::from_millis(25))
        .build()?;
    println!(
        "{HOSTS} hosts fire a report every {PERIOD:?} ({TICKS} ticks); host-{HOSTS}'s clock is \
         {LATE_HOST_SKEW:?} late; lock TTL {TTL:?}, {} nodes",
        urls.len()
    );

    let journal = Journal::default();
    let start = Instant::now();
    let mut hosts = Vec::new();
    for id in 1..=HOSTS {
        // A host is a separate machine: its own client, its own connections.
        let lock = Redlock::connect(&urls, config.clone()).await?;
        let skew = if id == HOSTS {
            LATE_HOST_SKEW
        } else {
            Duration::ZERO
        };
        hosts.push(tokio::spawn(host(id, lock, start, skew, journal.clone())));
    }

    // The faults, shortly before a tick (once the hosts are done with the previous one).
    let mut majority_up_until = TICKS;
    if let Some(cluster) = cluster.as_mut() {
        tokio::time::sleep_until(start + PERIOD * MINORITY_DOWN_TICK - PERIOD / 6).await;
        cluster.node_mut(3).kill().await?;
        cluster.node_mut(4).kill().await?;
        println!("{}  -- killed nodes 4 and 5: 3 of 5 left", at(start));
        tokio::time::sleep_until(start + PERIOD * (TICKS - 1) - PERIOD / 6).await;
        cluster.node_mut(2).kill().await?;
        println!("{}  -- killed node 3: 2 of 5 left, no majority", at(start));
        majority_up_until = TICKS - 1;
    }
    for host in hosts {
        host.await??;
    }

    let journal = journal.lock().unwrap().clone();
    check(&journal, majority_up_until)
}

/// One host's scheduler: at each tick, try to take the tick and run the job.
async fn host(
    id: usize,
    lock: Redlock,
    start: Instant,
    skew: Duration,
    journal: Journal,
) -> Result {
    let mut jobs = Vec::new();
    for tick in 0..TICKS {
        tokio::time::sleep_until(start + PERIOD * tick + skew).await;
        // The name is the schedule slot, not the time the host fired: every host agrees on it.
        let attempt = match lock.acquire(&format!("cron:report:tick-{tick}")).await {
            Ok(guard) => {
                jobs.push(tokio::spawn(job(id, tick, guard, start, journal.clone())));
                continue; // the job records its own outcome
            }
            Err(LockError::Held { .. }) => Attempt::Held,
            // With nodes down, a host that lost the race often hears too few nodes to tell
            // "held" from "unavailable": the round stops once a quorum is out of reach.
            Err(LockError::NoQuorum { tally, .. }) => Attempt::NoQuorum {
                refused: tally.refused.len(),
            },
            // A quorum agreed, but too late to leave any validity (an overloaded machine).
            Err(LockError::ValidityExhausted { .. }) => Attempt::TooSlow,
            Err(err) => return Err(err.into()),
        };
        journal.lock().unwrap().push((tick, id, attempt));
    }
    for job in jobs {
        job.await?;
    }
    Ok(())
}

/// The report itself, under the tick's lock.
async fn job(id: usize, tick: u32, mut guard: LockGuard, start: Instant, journal: Journal) {
    let length = if tick == LONG_JOB_TICK { LONG_JOB } else { JOB };
    println!(
        "{}  tick {tick}: host-{id} runs the report ({length:?})",
        at(start)
    );
    // Extends every third of the TTL for as long as the job runs; a short job ends first.
    guard
        .auto_extend(AutoExtend::default())
        .expect("the default interval is never refused");
    let lost = guard.lost();
    let finished = tokio::select! {
        () = tokio::time::sleep(length) => true,
        end = lost => {
            println!("{}  tick {tick}: host-{id} stopped the report: {end}", at(start));
            false
        }
    };
    if length > TTL && finished {
        println!(
            "{}  tick {tick}: host-{id} finished the long report, its lock extended past \
             the {TTL:?} TTL",
            at(start)
        );
    }
    journal
        .lock()
        .unwrap()
        .push((tick, id, Attempt::Ran { finished }));
    // Dropped, not released: with `auto_release(false)` the key lives out its TTL.
    drop(guard);
}

/// Prints what each host did at each tick, and checks: exactly one run per tick while a
/// majority was up, never two.
fn check(journal: &[(u32, usize, Attempt)], majority_up_until: u32) -> Result {
    let mut header = "\ntick".to_owned();
    for host in 1..=HOSTS {
        let late = if host == HOSTS { " (late)" } else { "" };
        header += &format!("  {:<20}", format!("host-{host}{late}"));
    }
    println!("{}", header.trim_end());
    let mut failures = Vec::new();
    for tick in 0..TICKS {
        let mut row = format!("{tick:>4}");
        let mut runs = 0;
        for host in 1..=HOSTS {
            let cell = match journal.iter().find(|(t, h, _)| *t == tick && *h == host) {
                Some((_, _, Attempt::Ran { finished })) => {
                    runs += 1;
                    if !finished {
                        failures.push(format!("tick {tick}'s job lost its lock"));
                    }
                    "RAN THE JOB".to_owned()
                }
                Some((_, _, Attempt::Held)) => "held".to_owned(),
                Some((_, _, Attempt::TooSlow)) => "too slow".to_owned(),
                Some((_, _, Attempt::NoQuorum { refused })) => {
                    format!("no quorum, {refused} refused")
                }
                None => "?".to_owned(),
            };
            row += &format!("  {cell:<20}");
        }
        println!("{}", row.trim_end());
        let expected = usize::from(tick < majority_up_until);
        if runs != expected {
            failures.push(format!("tick {tick} ran {runs} times, expected {expected}"));
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    println!(
        "OK: ticks 0-{} ran exactly once each while a majority of nodes was up{}; no tick ran \
         twice",
        majority_up_until - 1,
        if majority_up_until < TICKS {
            format!(", tick {majority_up_until} (no majority) was skipped")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The time since `start`, for the timeline.
fn at(start: Instant) -> String {
    format!("{:5.2}s", start.elapsed().as_secs_f64())
}
