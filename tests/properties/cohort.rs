//! Cohorts on the simulated cluster: tasks of one process that share a lock pass it among
//! themselves, while clients of other processes wait for it on the nodes.
//!
//! Each schedule runs, on tokio's paused clock, `local` tasks sharing one `Redlock` (one
//! process) and `remote` clients with one each, all taking the same lock, holding it a
//! while, some giving up their wait early (their acquisition future dropped, perhaps just
//! as a lock was passed to it). Every critical section is recorded, with the token its
//! guard held, and checked:
//!
//! - exclusion: no two critical sections overlap, local or remote;
//! - bounded runs: a run of local holders (consecutive holders with one token: one
//!   acquisition on the nodes, then passes) has at most `passes + 1` holders, and every
//!   pass happens within the window of the run's first holder; after it, the lock goes
//!   back to the nodes, where the remote clients get their chance;
//! - the count: the lock's `passed` counter is the number of holders that got the lock by
//!   pass;
//! - nothing left behind: once every client is done, no node holds the key, well before
//!   its TTL could have expired it.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use quorumlock::sim::SimCluster;
use quorumlock::{LockConfig, Redlock};
use tokio::time::Instant;

use crate::harness;

/// The lock's TTL: far above what any schedule holds, so that nothing expires by itself.
const TTL: Duration = Duration::from_secs(4);
const RESOURCE: &str = "shared";

/// One client's turn at the lock.
#[derive(Debug, Clone)]
pub struct Op {
    /// Pause before asking, in ms.
    pause: u64,
    /// How long it holds the lock, in ms.
    hold: u64,
    /// Gives up waiting after this many ms (its acquire future dropped).
    give_up: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct CohortSchedule {
    /// Each node's request delay, in ms.
    delays: Vec<u64>,
    passes: u32,
    window: u64,
    /// The tasks of the one process that shares a lock.
    local: Vec<Vec<Op>>,
    /// The clients of other processes, one lock each.
    remote: Vec<Vec<Op>>,
}

impl fmt::Display for CohortSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes, delays {:?} ms, passes {}, window {} ms",
            self.delays.len(),
            self.delays,
            self.passes,
            self.window
        )?;
        for (who, ops) in [("local", &self.local), ("remote", &self.remote)] {
            for (i, ops) in ops.iter().enumerate() {
                write!(f, "  {who} {i}:")?;
                for op in ops {
                    write!(f, " [pause {} hold {}", op.pause, op.hold)?;
                    if let Some(give_up) = op.give_up {
                        write!(f, " give up {give_up}")?;
                    }
                    write!(f, "]")?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

fn op() -> impl Strategy<Value = Op> {
    (0u64..10, 0u64..15, prop::option::weighted(0.25, 1u64..30)).prop_map(
        |(pause, hold, give_up)| Op {
            pause,
            hold,
            give_up,
        },
    )
}

fn schedule() -> impl Strategy<Value = CohortSchedule> {
    (
        prop::sample::select(vec![1usize, 3, 5]),
        1u32..5,
        1u64..40,
        prop::collection::vec(prop::collection::vec(op(), 1..6), 2..5),
        prop::collection::vec(prop::collection::vec(op(), 1..4), 0..3),
    )
        .prop_flat_map(|(nodes, passes, window, local, remote)| {
            prop::collection::vec(0u64..4, nodes).prop_map(move |delays| CohortSchedule {
                delays,
                passes,
                window,
                local: local.clone(),
                remote: remote.clone(),
            })
        })
}

/// One critical section.
#[derive(Debug, Clone)]
struct Section {
    local: bool,
    token: String,
    got: Instant,
    /// Order of the events, since several happen at one virtual instant.
    got_seq: u64,
    released_seq: u64,
}

#[derive(Default)]
struct Record {
    seq: u64,
    sections: Vec<Section>,
}

impl Record {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

fn config(schedule: &CohortSchedule) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(100_000)
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(60))
        .cohort_passes(schedule.passes)
        .cohort_window(Duration::from_millis(schedule.window))
        .build()
        .expect("valid cohort config")
}

/// Runs `ops` on `lock`, recording each critical section.
async fn client(lock: Redlock, local: bool, ops: Vec<Op>, record: Rc<RefCell<Record>>) {
    for op in ops {
        tokio::time::sleep(Duration::from_millis(op.pause)).await;
        let acquire = lock.acquire(RESOURCE);
        let guard = match op.give_up {
            None => acquire.await,
            Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), acquire).await {
                Ok(acquired) => acquired,
                Err(_) => continue,
            },
        }
        .expect("acquire");
        let got = Instant::now();
        let got_seq = record.borrow_mut().next();
        tokio::time::sleep(Duration::from_millis(op.hold)).await;
        let released_seq = record.borrow_mut().next();
        record.borrow_mut().sections.push(Section {
            local,
            token: guard.token().as_str().to_owned(),
            got,
            got_seq,
            released_seq,
        });
        guard.release().await.expect("release");
    }
}

fn run(schedule: &CohortSchedule) -> (Vec<Section>, u64, Vec<Option<quorumlock::LockToken>>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let local_set = tokio::task::LocalSet::new();
    local_set.block_on(&runtime, async {
        let cluster = SimCluster::new(schedule.delays.len());
        for (node, delay) in cluster.nodes().iter().zip(&schedule.delays) {
            node.set_request_delay(Duration::from_millis(*delay));
        }
        let config = config(schedule);
        let record = Rc::new(RefCell::new(Record::default()));
        let shared = cluster.redlock_for("local", config.clone()).expect("lock");
        let mut tasks = Vec::new();
        for ops in &schedule.local {
            let task = client(shared.clone(), true, ops.clone(), Rc::clone(&record));
            tasks.push(tokio::task::spawn_local(task));
        }
        for (i, ops) in schedule.remote.iter().enumerate() {
            let lock = cluster
                .redlock_for(&format!("remote-{i}"), config.clone())
                .expect("lock");
            let task = client(lock, false, ops.clone(), Rc::clone(&record));
            tasks.push(tokio::task::spawn_local(task));
        }
        for task in tasks {
            task.await.expect("client task");
        }
        // Background releases and rollbacks take a few node delays, far below the TTL.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sections = record.borrow().sections.clone();
        (sections, shared.metrics().passed, cluster.holders(RESOURCE))
    })
}

/// The checks of the module documentation.
fn check(schedule: CohortSchedule) -> Result<(), String> {
    let (mut sections, passed, holders) = run(&schedule);
    sections.sort_by_key(|section| section.got_seq);
    for pair in sections.windows(2) {
        if pair[0].released_seq > pair[1].got_seq {
            return Err(format!("overlap: {:?} and {:?}", pair[0], pair[1]));
        }
    }
    let window = Duration::from_millis(schedule.window);
    let mut by_pass = 0;
    let mut run_start = 0;
    for (i, section) in sections.iter().enumerate() {
        let continues = i > 0 && sections[i - 1].token == section.token;
        if !continues {
            run_start = i;
            continue;
        }
        if !section.local || !sections[i - 1].local {
            return Err(format!("a token crossed processes: {section:?}"));
        }
        by_pass += 1;
        let first = &sections[run_start];
        if i - run_start > schedule.passes as usize {
            return Err(format!("a run of {} holders", i - run_start + 1));
        }
        if section.got.duration_since(first.got) >= window {
            return Err(format!(
                "passed {:?} after the run began, window {window:?}",
                section.got.duration_since(first.got)
            ));
        }
    }
    if by_pass != passed {
        return Err(format!(
            "{by_pass} holders by pass, {passed} passes counted"
        ));
    }
    if holders.iter().any(Option::is_some) {
        return Err(format!("the lock was left on the nodes: {holders:?}"));
    }
    Ok(())
}

/// Local passes with remote waiters: exclusion, bounded runs, nothing left behind. A
/// schedule runs many clients over nodes that run the real scripts, about ten times the
/// cost of the other properties' schedules: it runs a fifth of their cases (200 by
/// default; `QUORUMLOCK_PROPTEST_CASES=100000` runs 20,000).
#[test]
fn cohort_passes_are_exclusive_bounded_and_leave_nothing() {
    harness::check_cases(
        "cohort_passes_are_exclusive_bounded_and_leave_nothing",
        module_path!(),
        (harness::cases() / 5).max(1),
        schedule(),
        check,
    );
}
