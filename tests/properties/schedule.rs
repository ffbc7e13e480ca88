//! Schedules: what the clients do and what happens to the nodes, on a virtual timeline,
//! and the proptest strategies that generate them.
//!
//! Every duration is in milliseconds of virtual time and scaled to the TTL when generated,
//! so the same shapes appear with a 20 ms TTL and with a 30-day one.

use std::fmt;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;
use quorumlock::LockConfig;

/// A whole simulation: the cluster, the lock settings, the clients and the faults.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// How many nodes (1 to 5).
    pub nodes: usize,
    /// The lock's TTL.
    pub ttl_ms: u64,
    /// The lock's clock-drift factor.
    pub drift_factor: f64,
    /// The per-node timeout.
    pub node_timeout_ms: u64,
    /// Retries of a blocking acquire after its first attempt.
    pub retry_count: u32,
    /// The mean wait between attempts.
    pub retry_delay_ms: u64,
    /// The jitter around it (zero keeps a run exactly replayable).
    pub retry_jitter_ms: u64,
    /// Whether acquisitions mint fencing tokens.
    pub fencing: bool,
    /// Each node's state at the start.
    pub setup: Vec<NodeSetup>,
    /// Each client's sessions, run one after the other.
    pub clients: Vec<Vec<Session>>,
    /// Node faults, at virtual times from the start.
    pub faults: Vec<TimedFault>,
    /// Whether the nodes announce releases (then a waiter of the direct grant hears of its
    /// grants, and others wake on the releases); off, every waiter learns what a release
    /// did from its next attempt.
    pub announce: bool,
    /// Whether a fair lock's waiters take grants ([`LockConfig::direct_grant`]); off, the
    /// releases reserve (the protocol before the direct grant).
    pub direct_grant: bool,
}

/// A node at the start of the run.
#[derive(Clone, Debug)]
pub struct NodeSetup {
    /// Its clock rate (1.0 is exact).
    pub rate: f64,
    /// Its request delay.
    pub request_delay_ms: u64,
    /// Its reply delay.
    pub reply_delay_ms: u64,
    /// How long each connection to it takes to be made (on first use and after a crash):
    /// requests made meanwhile wait for it.
    pub connect_delay_ms: u64,
}

/// One acquisition by a client and what it does with the lock.
#[derive(Clone, Debug)]
pub struct Session {
    /// The wait before the attempt (at least 1 ms).
    pub wait_ms: u64,
    /// The resource: `r0` or `r1`.
    pub resource: u8,
    /// `acquire` (bounded retries) rather than `try_acquire` (one attempt).
    pub blocking: bool,
    /// Abandons the acquisition (drops its future) after this long, if still running.
    pub cancel_after_ms: Option<u64>,
    /// At `cancel_after_ms`, the client dies instead: the acquisition is neither polled nor
    /// dropped again (its place in line is left to lapse), and the client does nothing
    /// more.
    pub dies: bool,
    /// What the holder does while holding, in order.
    pub holds: Vec<Hold>,
    /// How the holder lets go.
    pub end: End,
}

/// A stretch of holding: work (or a pause, possibly beyond the validity), then maybe a
/// look at the lease and a refresh.
#[derive(Clone, Debug)]
pub struct Hold {
    /// How long the holder works or is paused.
    pub ms: u64,
    /// Asks `is_acquired` afterwards, with `is_expired` and `validity`.
    pub check: bool,
    /// Refreshes afterwards.
    pub refresh: bool,
}

/// How a holder lets go of its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// `release().await`.
    Release,
    /// Drops the guard (background release).
    Drop,
    /// Keeps the guard until the end of the run without releasing: a client that died.
    Vanish,
}

/// A fault on one node at a virtual time.
#[derive(Clone, Debug)]
pub struct TimedFault {
    /// When, from the start.
    pub at_ms: u64,
    /// Which node (taken modulo the number of nodes).
    pub node: usize,
    /// What.
    pub fault: Fault,
}

/// What can happen to a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Down for `down_ms`, then restarted with or without its data. An outage that
    /// starts while the node is already down is ignored.
    Outage {
        /// How long the node stays down.
        down_ms: u64,
        /// Whether it keeps its keys (persistence) or comes back empty.
        keep_data: bool,
    },
    /// Its clock runs at this rate from now on.
    Rate(f64),
    /// Its clock jumps forward.
    Jump(u64),
    /// Its clock jumps back.
    JumpBack(u64),
    /// Requests take this long to reach it from now on.
    RequestDelay(u64),
    /// Replies take this long from now on.
    ReplyDelay(u64),
    /// Requests vanish (on) or not (off).
    LoseReplies(bool),
    /// Requests are applied but their replies vanish (on) or not (off).
    ApplyButLoseReply(bool),
    /// Every key is lost (`FLUSHALL`).
    Flush,
    /// The node forgets its cached scripts (`SCRIPT FLUSH`).
    FlushScripts,
}

/// A step of the fault timeline, after outages are split into a crash and a restart.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The node crashes.
    Crash,
    /// The node restarts.
    Restart {
        /// With its data or empty.
        keep_data: bool,
    },
    /// Any other fault.
    Fault(Fault),
}

impl Schedule {
    /// The lock configuration of every client.
    pub fn config(&self) -> LockConfig {
        LockConfig::builder()
            .ttl(ms(self.ttl_ms))
            .drift_factor(self.drift_factor)
            .node_timeout(ms(self.node_timeout_ms))
            .retry_count(self.retry_count)
            .retry_delay(ms(self.retry_delay_ms))
            .retry_jitter(ms(self.retry_jitter_ms))
            .fencing(self.fencing)
            .direct_grant(self.direct_grant)
            .build()
            .unwrap_or_else(|error| panic!("the generator made an invalid configuration: {error}"))
    }

    /// The fault timeline: `(time, node, step)`, in time order (the schedule's order among
    /// equal times).
    pub fn timeline(&self) -> Vec<(u64, usize, Step)> {
        let mut faults: Vec<&TimedFault> = self.faults.iter().collect();
        faults.sort_by_key(|fault| fault.at_ms);
        let mut down_until = vec![None::<u64>; self.nodes];
        let mut steps = Vec::new();
        for fault in faults {
            let node = fault.node % self.nodes;
            // A node whose outage ended is up again.
            if down_until[node].is_some_and(|end| end <= fault.at_ms) {
                down_until[node] = None;
            }
            match &fault.fault {
                Fault::Outage { down_ms, keep_data } => {
                    if down_until[node].is_none() {
                        down_until[node] = Some(fault.at_ms + down_ms);
                        steps.push((fault.at_ms, node, Step::Crash));
                        steps.push((
                            fault.at_ms + down_ms,
                            node,
                            Step::Restart {
                                keep_data: *keep_data,
                            },
                        ));
                    }
                }
                other => steps.push((fault.at_ms, node, Step::Fault(other.clone()))),
            }
        }
        steps.sort_by_key(|(at, _, _)| *at);
        steps
    }

    /// How long the requests a run's clients leave in flight or in the background (rollbacks,
    /// releases of dropped guards, queue exits) take at most to land once the clients are
    /// done: a few node timeouts each, behind the slowest delays and connections.
    pub fn settle(&self) -> Duration {
        let setups = self
            .setup
            .iter()
            .map(|node| node.request_delay_ms + node.reply_delay_ms + node.connect_delay_ms);
        let faults = self.faults.iter().map(|fault| match fault.fault {
            Fault::RequestDelay(delay) | Fault::ReplyDelay(delay) => delay,
            _ => 0,
        });
        let slowest: u64 = setups.chain(faults).max().unwrap_or(0);
        ms(8 * (self.node_timeout_ms + 2 * slowest) + 1)
    }

    /// Whether a node may lose its fencing counters: a restart without data, or a flush.
    pub fn loses_counters(&self) -> bool {
        self.faults.iter().any(|fault| {
            matches!(
                fault.fault,
                Fault::Flush
                    | Fault::Outage {
                        keep_data: false,
                        ..
                    }
            )
        })
    }

    /// Whether the run breaks the assumptions of time-bounded exclusion: a clock faster
    /// than the drift allows, a forward jump, or a node losing keys (a flush, or a restart
    /// without data less than a TTL after the crash).
    pub fn breaks_assumptions(&self) -> bool {
        let max_rate = 1.0 + self.drift_factor;
        self.setup.iter().any(|node| node.rate > max_rate)
            || self.faults.iter().any(|fault| match &fault.fault {
                Fault::Rate(rate) => *rate > max_rate,
                Fault::Jump(by) => *by > 0,
                Fault::Flush => true,
                Fault::Outage { down_ms, keep_data } => !keep_data && *down_ms < self.ttl_ms,
                _ => false,
            })
    }
}

/// Milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Which faults a generator may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Within the model's assumptions: clocks at most `1 + drift_factor` fast, no forward
    /// jumps, no lost keys (restarts without data only after a TTL down). Everything else
    /// goes: crashes, delays, lost requests and replies, slow clocks, backward jumps.
    Safe,
    /// Anything, including fast clocks, forward jumps, flushes and immediate restarts
    /// without data.
    Any,
    /// Safe, plus frequent forward clock jumps of a quarter TTL to two TTLs.
    ClockJumps,
    /// Safe, plus frequent crashes with an immediate restart without data.
    Amnesia,
    /// Nothing that loses a request or a key: delays, and replies lost after the node
    /// applied the request; so every request that was sent lands, and what a run leaves on
    /// the nodes is what the clients left there.
    Tidy,
    /// As tidy, with script-cache flushes instead of lost replies (a lost reply to a call
    /// answered `NOSCRIPT` would leave the call undone, rightly: the client cannot know).
    ScriptLoss,
}

/// The generator's knobs.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    /// Which faults.
    pub kind: Kind,
    /// Random retry jitter (then a blocking acquire's waits are not replayable exactly).
    pub jitter: bool,
    /// Extra weight on pauses beyond the validity and on checks and refreshes.
    pub long_holds: bool,
    /// Many sessions that all want `r0` at about the same time, retrying quickly.
    pub contention: bool,
    /// Node clocks at the edge of the model: often all as fast as the drift allows.
    pub edge_rates: bool,
    /// Fencing tokens on: always (`Some(true)`), never, or either (`None`).
    pub fencing: Option<bool>,
    /// Restarts always keep the data (the fencing counters must never be lost).
    pub persistent: bool,
    /// Blocking acquisitions in line for one resource: quick retries, many of them, some
    /// acquisitions abandoned and some clients dying while they wait.
    pub fair_queue: bool,
    /// Cold connections: each node often takes a while to connect to.
    pub cold_connections: bool,
}

impl Profile {
    /// A profile of `kind` with the default emphasis.
    pub fn new(kind: Kind) -> Self {
        Profile {
            kind,
            jitter: false,
            long_holds: false,
            contention: false,
            edge_rates: false,
            fencing: None,
            persistent: false,
            fair_queue: false,
            cold_connections: false,
        }
    }
}

/// The 30-day maximum TTL, in milliseconds.
const MAX_TTL_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Schedules of the given profile.
pub fn schedules(profile: Profile) -> impl Strategy<Value = Schedule> {
    let nodes = if matches!(profile.kind, Kind::ClockJumps | Kind::Amnesia) {
        select(vec![3usize, 3, 5]).boxed()
    } else {
        select(vec![1usize, 2, 3, 3, 3, 4, 5, 5]).boxed()
    };
    let ttl = prop_oneof![
        12 => 20u64..=5_000,
        1 => Just(MAX_TTL_MS),
    ];
    let drift = select(vec![0.01, 0.01, 0.01, 0.01, 0.0, 0.05]);
    (nodes, ttl, drift).prop_flat_map(move |(nodes, ttl, drift)| {
        let jitter_permille = if profile.jitter {
            (0u64..=1000).boxed()
        } else {
            Just(0).boxed()
        };
        // Contenders retry quickly, so that they take a lock as soon as it frees.
        let delay = if profile.contention || profile.fair_queue {
            (1..=(ttl / 50).max(1)).boxed()
        } else {
            (1..=(ttl / 4).max(1)).boxed()
        };
        let fencing = match profile.fencing {
            Some(on) => Just(on).boxed(),
            None => any::<bool>().boxed(),
        };
        // Many retries, except under the 30-day TTL (the whole wait must stay within bounds).
        let retries = if profile.fair_queue && ttl < MAX_TTL_MS {
            (2u32..=8).boxed()
        } else {
            (0u32..=3).boxed()
        };
        // The fair queue's runs hear announcements half the time, and take grants three
        // times in four (else the releases reserve, as before the direct grant).
        let (announce, direct_grant) = if profile.fair_queue {
            (
                any::<bool>().boxed(),
                prop_oneof![3 => Just(true), 1 => Just(false)].boxed(),
            )
        } else {
            (Just(false).boxed(), Just(true).boxed())
        };
        (
            1..=(ttl / 10).max(1),
            retries,
            delay,
            jitter_permille,
            fencing,
            collection_of_setups(profile, nodes, ttl, drift),
            clients(profile, ttl),
            faults(profile, nodes, ttl, drift),
            announce,
            direct_grant,
        )
            .prop_map(
                move |(
                    timeout,
                    retries,
                    delay,
                    jitter,
                    fencing,
                    setup,
                    clients,
                    faults,
                    announce,
                    direct_grant,
                )| {
                    Schedule {
                        nodes,
                        ttl_ms: ttl,
                        drift_factor: drift,
                        node_timeout_ms: timeout,
                        retry_count: retries,
                        retry_delay_ms: delay,
                        retry_jitter_ms: delay * jitter / 1000,
                        fencing,
                        setup,
                        clients,
                        faults,
                        announce,
                        direct_grant,
                    }
                },
            )
    })
}

fn collection_of_setups(
    profile: Profile,
    nodes: usize,
    ttl: u64,
    drift: f64,
) -> impl Strategy<Value = Vec<NodeSetup>> {
    let delay = prop_oneof![3 => Just(0u64), 1 => 0..=ttl / 5];
    let connect = if profile.cold_connections {
        prop_oneof![1 => Just(0u64), 3 => 0..=ttl / 5].boxed()
    } else {
        prop_oneof![9 => Just(0u64), 1 => 0..=ttl / 5].boxed()
    };
    let setup = (rate(profile.kind, drift), delay.clone(), delay, connect).prop_map(
        |(rate, request_delay_ms, reply_delay_ms, connect_delay_ms)| NodeSetup {
            rate,
            request_delay_ms,
            reply_delay_ms,
            connect_delay_ms,
        },
    );
    let edge = profile.edge_rates;
    // The fastest clock the model allows (for `Any`, the same: at the edge, not beyond).
    let fastest = 1.0 + drift;
    (proptest::collection::vec(setup, nodes), any::<bool>()).prop_map(
        move |(mut setups, all_fast)| {
            if edge && all_fast {
                for setup in &mut setups {
                    setup.rate = fastest;
                }
            }
            setups
        },
    )
}

/// A clock rate: exact most of the time, else slow, or fast within (or, for `Any`,
/// beyond) the drift allowance.
fn rate(kind: Kind, drift: f64) -> BoxedStrategy<f64> {
    // Permille, so that rates shrink towards round values.
    let fastest = 1000 + (drift * 1000.0).floor() as u64;
    let off = match kind {
        Kind::Any => (500u64..=3000).boxed(),
        _ => (500u64..=fastest).boxed(),
    };
    prop_oneof![
        2 => Just(1.0),
        1 => off.prop_map(|permille| permille as f64 / 1000.0),
    ]
    .boxed()
}

fn clients(profile: Profile, ttl: u64) -> impl Strategy<Value = Vec<Vec<Session>>> {
    let busy = profile.contention || profile.fair_queue;
    let clients = if busy { 2..=4 } else { 1..=4 };
    let sessions = if busy { 2..=4 } else { 1..=4 };
    proptest::collection::vec(
        proptest::collection::vec(session(profile, ttl), sessions),
        clients,
    )
}

fn session(profile: Profile, ttl: u64) -> impl Strategy<Value = Session> {
    // At least 1 ms, so that one acquisition's requests never share an instant with the
    // previous one's return (the checks attribute requests to acquisitions by time).
    let busy = profile.contention || profile.fair_queue;
    let wait = if busy {
        (1..=(ttl / 2).max(1)).boxed()
    } else {
        (1..=ttl * 3 / 2).boxed()
    };
    let resource = if busy {
        Just(0u8).boxed()
    } else {
        prop_oneof![4 => Just(0u8), 1 => Just(1u8)].boxed()
    };
    let cancel = if profile.fair_queue {
        prop_oneof![2 => Just(None), 1 => (0..=ttl).prop_map(Some)].boxed()
    } else {
        prop_oneof![9 => Just(None), 1 => (0..=ttl / 5).prop_map(Some)].boxed()
    };
    let blocking = if profile.fair_queue {
        prop_oneof![9 => Just(true), 1 => Just(false)].boxed()
    } else {
        any::<bool>().boxed()
    };
    // Nobody dies in a tidy run: a dead waiter's place is left to lapse, by design.
    let tidy = matches!(profile.kind, Kind::Tidy | Kind::ScriptLoss);
    let dies = if profile.fair_queue && !tidy {
        prop_oneof![3 => Just(false), 1 => Just(true)].boxed()
    } else {
        Just(false).boxed()
    };
    // A tidy run leaves nothing behind: its holders let go.
    let end = if tidy {
        prop_oneof![2 => Just(End::Release), 1 => Just(End::Drop)].boxed()
    } else {
        prop_oneof![6 => Just(End::Release), 3 => Just(End::Drop), 1 => Just(End::Vanish)].boxed()
    };
    let hold_ms = if profile.long_holds {
        prop_oneof![1 => 0..=ttl / 2, 2 => ttl * 9 / 10..=ttl * 2].boxed()
    } else {
        (0..=ttl * 6 / 5).boxed()
    };
    let hold = (hold_ms, any::<bool>(), any::<bool>()).prop_map(|(ms, check, refresh)| Hold {
        ms,
        check,
        refresh,
    });
    (
        wait,
        resource,
        blocking,
        (cancel, dies),
        proptest::collection::vec(hold, 0..=3),
        end,
    )
        .prop_map(
            |(wait_ms, resource, blocking, (cancel_after_ms, dies), holds, end)| Session {
                wait_ms,
                resource,
                blocking,
                dies: dies && cancel_after_ms.is_some(),
                cancel_after_ms,
                holds,
                end,
            },
        )
}

fn faults(
    profile: Profile,
    nodes: usize,
    ttl: u64,
    drift: f64,
) -> impl Strategy<Value = Vec<TimedFault>> {
    let count = match profile.kind {
        Kind::ClockJumps | Kind::Amnesia => 2..=8,
        _ => 0..=8,
    };
    let at = 0..=ttl * 8;
    let timed = (
        at,
        0..nodes,
        fault(profile.kind, ttl, drift, profile.persistent),
    )
        .prop_map(|(at_ms, node, fault)| TimedFault { at_ms, node, fault });
    proptest::collection::vec(timed, count)
}

fn fault(kind: Kind, ttl: u64, drift: f64, persistent: bool) -> BoxedStrategy<Fault> {
    let delay = 0..=ttl / 5;
    let safe = prop_oneof![
        2 => (0..=ttl * 2).prop_map(|down_ms| Fault::Outage { down_ms, keep_data: true }),
        1 => (ttl..=ttl * 3).prop_map(move |down_ms| Fault::Outage {
            down_ms,
            keep_data: persistent,
        }),
        1 => rate(Kind::Safe, drift).prop_map(Fault::Rate),
        1 => (0..=ttl).prop_map(Fault::JumpBack),
        1 => delay.clone().prop_map(Fault::RequestDelay),
        1 => delay.prop_map(Fault::ReplyDelay),
        1 => any::<bool>().prop_map(Fault::LoseReplies),
        1 => any::<bool>().prop_map(Fault::ApplyButLoseReply),
        1 => Just(Fault::FlushScripts),
    ];
    match kind {
        Kind::Safe => safe.boxed(),
        Kind::Tidy => prop_oneof![
            1 => (0..=ttl / 50).prop_map(Fault::RequestDelay),
            1 => (0..=ttl / 50).prop_map(Fault::ReplyDelay),
            2 => any::<bool>().prop_map(Fault::ApplyButLoseReply),
        ]
        .boxed(),
        Kind::ScriptLoss => prop_oneof![
            1 => (0..=ttl / 50).prop_map(Fault::RequestDelay),
            1 => (0..=ttl / 50).prop_map(Fault::ReplyDelay),
            3 => Just(Fault::FlushScripts),
        ]
        .boxed(),
        Kind::Any => prop_oneof![
            4 => safe,
            1 => (0..=ttl * 2, any::<bool>())
                .prop_map(|(down_ms, keep_data)| Fault::Outage { down_ms, keep_data }),
            1 => rate(Kind::Any, drift).prop_map(Fault::Rate),
            1 => (0..=ttl * 2).prop_map(Fault::Jump),
            1 => Just(Fault::Flush),
        ]
        .boxed(),
        Kind::ClockJumps => prop_oneof![
            1 => safe,
            3 => (ttl / 4..=ttl * 2).prop_map(Fault::Jump),
        ]
        .boxed(),
        Kind::Amnesia => prop_oneof![
            1 => safe,
            3 => (0..=ttl / 20).prop_map(|down_ms| Fault::Outage { down_ms, keep_data: false }),
        ]
        .boxed(),
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} nodes, ttl {} ms, drift factor {}, node timeout {} ms, retries {} x {} ± {} ms, \
             fencing {}, announcements {}, direct grant {}",
            self.nodes,
            self.ttl_ms,
            self.drift_factor,
            self.node_timeout_ms,
            self.retry_count,
            self.retry_delay_ms,
            self.retry_jitter_ms,
            self.fencing,
            self.announce,
            self.direct_grant
        )?;
        for (i, node) in self.setup.iter().enumerate() {
            writeln!(
                f,
                "  node {i}: rate {}, request delay {} ms, reply delay {} ms, connect delay {} ms",
                node.rate, node.request_delay_ms, node.reply_delay_ms, node.connect_delay_ms
            )?;
        }
        for (i, sessions) in self.clients.iter().enumerate() {
            for session in sessions {
                writeln!(f, "  client {i}: {session:?}")?;
            }
        }
        for (at, node, step) in self.timeline() {
            writeln!(f, "  at {at} ms, node {node}: {step:?}")?;
        }
        Ok(())
    }
}
