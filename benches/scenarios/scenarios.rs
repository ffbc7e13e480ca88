//! The scenarios: which nodes each locks on, the load it puts on them, for how long,
//! and which contenders run it; and what every run of them must show.

use std::collections::BTreeMap;
use std::time::Duration;

use quorumlock::LockConfig;

use crate::clients::Contender;
use crate::stats::{Outcome, Run};

/// The five nodes; node 4 is the one slowed down (scenario 4) or frozen (scenario 5).
pub const NODES: usize = 5;
/// The node slowed down or frozen.
pub const SLOW_NODE: usize = 4;
/// Latency added to every request to the slow node (client to node direction).
pub const ADDED_LATENCY: Duration = Duration::from_millis(20);

/// Which nodes a scenario locks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    All,
    /// Node 4 behind the latency proxy.
    OneSlow,
    /// Node 4 frozen (SIGSTOP) during the measured window.
    OneFrozen,
    /// Node 0 only.
    Single,
}

/// What a scenario does on the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// `tasks` tasks, each acquiring and releasing a fresh resource in a loop.
    Cycles { tasks: usize },
    /// `tasks` clients contending for one lock, each doing a read-modify-write of a counter
    /// under it (`Contender::NoLock`: one client, with no lock, the ceiling); with `shared`,
    /// `tasks` tasks sharing one client (one lock object, one process).
    Contended { tasks: usize, shared: bool },
}

/// One scenario: its nodes and load, its measured window (before `--scale`), and its
/// contenders.
pub struct Scenario {
    pub id: &'static str,
    pub title: &'static str,
    pub nodes: Nodes,
    pub load: Load,
    pub window: Duration,
    pub contenders: &'static [Contender],
}

/// Every scenario, in the order they run and are reported.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        id: "s1",
        title: "1. uncontended acquire+release, 1 task, 5 nodes",
        nodes: Nodes::All,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s2",
        title: "2. 64 tasks, distinct resources, 5 nodes",
        nodes: Nodes::All,
        load: Load::Cycles { tasks: 64 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s3",
        title: "3. 8 clients contending for one lock (counter RMW), 5 nodes",
        nodes: Nodes::All,
        load: Load::Contended {
            tasks: 8,
            shared: false,
        },
        window: Duration::from_millis(2_000),
        // No lock: the ceiling, one client doing the same GET + SET with no lock at all.
        // quorumlock-unfair: the same without the fair queue, waiters racing.
        contenders: &[
            Contender::Quorumlock,
            Contender::Rslock,
            Contender::QuorumlockUnfair,
            Contender::NoLock,
        ],
    },
    Scenario {
        id: "s3b",
        title: "3b. 8 tasks sharing one lock object (counter RMW), 5 nodes",
        nodes: Nodes::All,
        load: Load::Contended {
            tasks: 8,
            shared: true,
        },
        window: Duration::from_millis(2_000),
        // rslock: the 8 tasks share one LockManager. No lock: the same ceiling as in 3.
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::NoLock],
    },
    Scenario {
        id: "s4",
        title: "4. one of 5 nodes with +20 ms latency, 1 task",
        nodes: Nodes::OneSlow,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s5",
        title: "5. one of 5 nodes frozen (SIGSTOP), 1 task",
        nodes: Nodes::OneFrozen,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock],
    },
    Scenario {
        id: "s6",
        title: "6. single node: RedisLock vs SET NX PX + compare-and-delete, 1 task",
        nodes: Nodes::Single,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Floor, Contender::Rslock],
    },
];

/// The runs of each scenario and contender, in the order they ran.
pub type Results = BTreeMap<(&'static str, Contender), Vec<Run>>;

/// What must hold in every run, smoke or full: quorumlock and the floor complete without
/// errors, and the contended counter is exact for every contender that completed.
pub fn smoke_checks(scenario: &Scenario, contender: Contender, run: &Run) -> Vec<String> {
    let mut failures = Vec::new();
    let name = format!("{} {}", scenario.id, contender.label());
    if contender != Contender::Rslock {
        if run.outcome != Outcome::Completed {
            failures.push(format!("{name}: did not complete"));
        }
        if run.ops == 0 {
            failures.push(format!("{name}: no operation completed"));
        }
        if run.errors > 0 {
            failures.push(format!("{name}: {} operations failed", run.errors));
        }
    }
    if let Some(Err(err)) = &run.check {
        failures.push(format!("{name}: {err}"));
    }
    if let Some(Err(err)) = &run.keys_left {
        failures.push(format!("{name}: {err}"));
    }
    failures
}

/// The lock configuration every contender of `scenario` runs with.
pub fn config_for(scenario: &Scenario) -> LockConfig {
    match scenario.load {
        // Defaults, except that nobody gives up while waiting: a deadline no run reaches
        // is what lets the retries be counted no more.
        Load::Contended { .. } => LockConfig::builder()
            .retry_count(1_000_000)
            .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
            .build()
            .expect("config"),
        Load::Cycles { .. } => LockConfig::default(),
    }
}
