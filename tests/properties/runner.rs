//! The deterministic simulation runner: runs a [`Schedule`] on a paused current-thread
//! runtime over simulated nodes and records a [`Trace`].
//!
//! Every client is a tokio task with a `Redlock` of its own over the same nodes (its
//! requests logged under its name); a fault task applies the node faults at their times.
//! Time is tokio's paused clock, so the run is exactly reproducible as long as the retry
//! jitter is zero (the coordinator draws it from a thread-local random generator).

use std::sync::Arc;
use std::time::Duration;

use quorumlock::sim::{OpRecord, Published, SimCluster, SimNode};
use quorumlock::{LockConfig, LockError, LockGuard, LockToken, Redlock};
use tokio::time::Instant;

use super::mutations;
use super::schedule::{ms, End, Fault, Schedule, Session, Step};

/// What happened in one run.
#[derive(Debug)]
pub struct Trace {
    /// The lock configuration the clients ran with.
    pub config: LockConfig,
    /// `N/2 + 1`.
    pub quorum: usize,
    /// How many nodes.
    pub nodes: usize,
    /// When the run started.
    pub origin: Instant,
    /// Every acquisition attempt, per client in order.
    pub attempts: Vec<Attempt>,
    /// Every node's log: `(node, record)`, by time sent.
    pub log: Vec<(usize, OpRecord)>,
    /// Every message the nodes' scripts published: `(node, when, message)`, by node, each
    /// node's oldest first (a waiter of the direct grant hears of its grants in them).
    pub published: Vec<(usize, Instant, Published)>,
    /// What the nodes held once every client was done and the requests they left in flight
    /// or in the background had landed: `(node, key)`, fencing counters aside.
    pub leftovers: Vec<(usize, String)>,
}

/// Numbers the returns of attempts in the order they happen (each simulation runs on one
/// thread, so increments happen in real order; the numbers only need to be increasing).
pub static RETURN_ORDER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One call of `try_acquire` or `acquire`, and what the holder then did.
#[derive(Debug)]
pub struct Attempt {
    /// The client's index.
    pub client: usize,
    /// The client's name in the nodes' logs.
    pub client_name: Arc<str>,
    /// The resource.
    pub resource: String,
    /// `acquire` rather than `try_acquire`.
    pub blocking: bool,
    /// When it was called.
    pub called: Instant,
    /// When it returned, or was abandoned.
    pub returned: Instant,
    /// The order in which attempts returned, across all clients: on a virtual clock several
    /// attempts can return at the same instant, and only this tells which came first.
    pub returned_seq: u64,
    /// How it ended.
    pub result: AttemptResult,
    /// What the holder did with the lock, in order.
    pub events: Vec<Event>,
}

/// How an attempt ended.
#[derive(Debug)]
pub enum AttemptResult {
    /// The lock was taken.
    Granted(Grant),
    /// The attempt failed.
    Failed(LockError),
    /// The client stopped waiting for it (its future was dropped).
    Cancelled,
    /// The client died while it waited: the acquisition was neither polled nor dropped
    /// again.
    Died,
}

/// A lock as granted.
#[derive(Debug, Clone)]
pub struct Grant {
    /// Its token.
    pub token: LockToken,
    /// `guard.acquired_at()` at grant.
    pub acquired_at: Instant,
    /// `guard.deadline()` at grant.
    pub deadline: Instant,
    /// `guard.fencing_token()`.
    pub fencing_token: Option<u64>,
}

/// What a holder did.
#[derive(Debug)]
pub enum Event {
    /// `is_expired`, `validity` and `is_acquired`, asked at `called`.
    Check {
        /// When.
        called: Instant,
        /// When `is_acquired` returned.
        returned: Instant,
        /// The guard's deadline.
        deadline: Instant,
        /// `is_expired()`.
        expired: bool,
        /// `validity()`.
        validity: Duration,
        /// `is_acquired()`.
        result: Result<bool, LockError>,
    },
    /// `refresh()`.
    Refresh {
        /// When it was called.
        called: Instant,
        /// When it returned.
        returned: Instant,
        /// The deadline before.
        old_deadline: Instant,
        /// `acquired_at()` after.
        acquired_at: Instant,
        /// The deadline after.
        deadline: Instant,
        /// What it returned.
        result: Result<Duration, LockError>,
    },
    /// The holder let go.
    End {
        /// How.
        how: End,
        /// When it started letting go.
        at: Instant,
        /// What `release()` returned (`None` for the other ways).
        result: Option<Result<(), LockError>>,
    },
}

impl Attempt {
    /// The granted lock, if any.
    pub fn grant(&self) -> Option<&Grant> {
        match &self.result {
            AttemptResult::Granted(grant) => Some(grant),
            _ => None,
        }
    }

    /// The stretch of real time over which the holder could rightly believe it held the
    /// lock: from the return of the acquisition to its last deadline, cut short when the
    /// holder let go earlier.
    pub fn holding(&self) -> Option<(Instant, Instant)> {
        let grant = self.grant()?;
        let mut deadline = grant.deadline;
        for event in &self.events {
            match event {
                Event::Refresh {
                    deadline: after, ..
                } => deadline = deadline.max(*after),
                Event::End { at, .. } => return Some((self.returned, deadline.min(*at))),
                Event::Check { .. } => {}
            }
        }
        Some((self.returned, deadline))
    }
}

/// Runs `schedule` on a fresh paused runtime.
pub fn run(schedule: &Schedule) -> Trace {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(schedule))
}

async fn simulate(schedule: &Schedule) -> Trace {
    let origin = Instant::now();
    let config = schedule.config();
    let cluster = SimCluster::new(schedule.nodes);
    cluster.announce_releases(schedule.announce);
    for (node, setup) in cluster.nodes().iter().zip(&schedule.setup) {
        node.set_clock_rate(setup.rate);
        node.set_request_delay(ms(setup.request_delay_ms));
        node.set_reply_delay(ms(setup.reply_delay_ms));
        node.set_connect_delay(ms(setup.connect_delay_ms));
    }
    mutations::apply(&cluster);

    let timeline = schedule.timeline();
    let fault_task = tokio::spawn(apply_faults(cluster.clone(), timeline, origin));

    let mut tasks = Vec::new();
    for (index, sessions) in schedule.clients.iter().enumerate() {
        let name: Arc<str> = format!("c{index}").into();
        let lock = cluster
            .redlock_for(&name, config.clone())
            .expect("a lock over the simulated nodes");
        tasks.push(tokio::spawn(run_client(
            index,
            name,
            lock,
            sessions.clone(),
        )));
    }
    let mut attempts = Vec::new();
    let mut kept = Vec::new();
    for task in tasks {
        let (client_attempts, client_kept) = task.await.expect("a client task panicked");
        attempts.extend(client_attempts);
        kept.push(client_kept);
    }
    fault_task.await.expect("the fault task panicked");
    // Let the requests in flight land and the background releases and queue exits finish:
    // each waits at most a node timeout per node, behind delays and connections being made.
    tokio::time::sleep(schedule.settle()).await;
    let leftovers = cluster
        .nodes()
        .iter()
        .enumerate()
        .flat_map(|(index, node)| node.keys().into_iter().map(move |key| (index, key)))
        .filter(|(_, key)| !key.starts_with("quorumlock:fence:"))
        .collect();
    // Then let every key expire.
    tokio::time::sleep(config.ttl() * 2 + config.node_timeout() * 4).await;

    // The checks' own spelling of the rule, not `quorumlock::quorum_of`: an oracle that
    // shared the code under test could not catch a wrong quorum.
    let quorum = schedule.nodes / 2 + 1;
    let trace = Trace {
        config,
        quorum,
        nodes: schedule.nodes,
        origin,
        attempts,
        log: cluster.log(),
        published: cluster
            .nodes()
            .iter()
            .enumerate()
            .flat_map(|(index, node)| {
                node.published()
                    .into_iter()
                    .map(move |(at, message)| (index, at, message))
            })
            .collect(),
        leftovers,
    };
    // Vanished clients' guards go only now, after the log was taken.
    drop(kept);
    trace
}

pub async fn apply_faults(cluster: SimCluster, timeline: Vec<(u64, usize, Step)>, origin: Instant) {
    for (at, node, step) in timeline {
        tokio::time::sleep_until(origin + ms(at)).await;
        apply(cluster.node(node), &step);
    }
}

fn apply(node: &SimNode, step: &Step) {
    match step {
        Step::Crash => node.crash(),
        Step::Restart { keep_data } => node.restart(*keep_data),
        Step::Fault(fault) => match fault {
            Fault::Outage { .. } => unreachable!("outages are split into crash and restart"),
            Fault::Rate(rate) => node.set_clock_rate(*rate),
            Fault::Jump(by) => node.jump_clock(ms(*by)),
            Fault::JumpBack(by) => node.jump_clock_back(ms(*by)),
            Fault::RequestDelay(delay) => node.set_request_delay(ms(*delay)),
            Fault::ReplyDelay(delay) => node.set_reply_delay(ms(*delay)),
            Fault::LoseReplies(on) => node.lose_replies(*on),
            Fault::ApplyButLoseReply(on) => node.apply_but_lose_reply(*on),
            Fault::Flush => node.flush(),
            Fault::FlushScripts => node.flush_scripts(),
        },
    }
}

/// What a client leaves behind when its run ends: the guards it kept (it vanished while
/// holding) and the acquisitions it died in.
#[derive(Default)]
pub struct Kept {
    guards: Vec<LockGuard>,
    dead: Vec<Pending>,
}

/// An acquisition nobody polls any more.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

async fn run_client(
    client: usize,
    client_name: Arc<str>,
    lock: Redlock,
    sessions: Vec<Session>,
) -> (Vec<Attempt>, Kept) {
    let mut attempts = Vec::new();
    let mut kept = Kept::default();
    for session in sessions {
        tokio::time::sleep(ms(session.wait_ms.max(1))).await;
        let resource = format!("r{}", session.resource);
        let called = Instant::now();
        let mut attempt = {
            let (lock, resource, blocking) = (lock.clone(), resource.clone(), session.blocking);
            Box::pin(async move {
                if blocking {
                    lock.acquire(&resource).await
                } else {
                    lock.try_acquire(&resource).await
                }
            })
        };
        let mut died = false;
        let outcome = match session.cancel_after_ms {
            Some(after) => {
                tokio::select! {
                    biased;
                    result = &mut attempt => Some(result),
                    () = tokio::time::sleep(ms(after)) => {
                        if session.dies {
                            // Never polled again, never dropped: a process that stopped.
                            kept.dead.push(Box::pin(async move { drop(attempt.await) }));
                            died = true;
                        }
                        None
                    }
                }
            }
            None => Some(attempt.await),
        };
        let returned = Instant::now();
        let mut record = Attempt {
            client,
            client_name: Arc::clone(&client_name),
            resource,
            blocking: session.blocking,
            called,
            returned,
            returned_seq: RETURN_ORDER.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            result: AttemptResult::Cancelled,
            events: Vec::new(),
        };
        match outcome {
            None if died => record.result = AttemptResult::Died,
            None => {}
            Some(Err(error)) => record.result = AttemptResult::Failed(error),
            Some(Ok(mut guard)) => {
                record.result = AttemptResult::Granted(Grant {
                    token: guard.token().clone(),
                    acquired_at: guard.acquired_at(),
                    deadline: guard.deadline(),
                    fencing_token: guard.fencing_token(),
                });
                hold(&mut guard, &session, &mut record.events).await;
                let at = Instant::now();
                let result = match session.end {
                    End::Release => Some(guard.release().await),
                    End::Drop => {
                        drop(guard);
                        None
                    }
                    End::Vanish => {
                        kept.guards.push(guard);
                        None
                    }
                };
                record.events.push(Event::End {
                    how: session.end,
                    at,
                    result,
                });
            }
        }
        attempts.push(record);
        if died {
            break;
        }
    }
    (attempts, kept)
}

pub async fn hold(guard: &mut LockGuard, session: &Session, events: &mut Vec<Event>) {
    for hold in &session.holds {
        tokio::time::sleep(ms(hold.ms)).await;
        if hold.check {
            let called = Instant::now();
            let deadline = guard.deadline();
            let expired = guard.is_expired();
            let validity = guard.validity();
            let result = guard.is_acquired().await;
            events.push(Event::Check {
                called,
                returned: Instant::now(),
                deadline,
                expired,
                validity,
                result,
            });
        }
        if hold.refresh {
            let called = Instant::now();
            let old_deadline = guard.deadline();
            let result = guard.refresh().await;
            events.push(Event::Refresh {
                called,
                returned: Instant::now(),
                old_deadline,
                acquired_at: guard.acquired_at(),
                deadline: guard.deadline(),
                result,
            });
        }
    }
}

impl Trace {
    /// The records of `client` for `token`, with their node.
    pub fn ops_of<'a>(
        &'a self,
        client: &'a str,
        token: &'a LockToken,
    ) -> impl Iterator<Item = &'a (usize, OpRecord)> + 'a {
        self.log.iter().filter(move |(_, record)| {
            record.client.as_deref() == Some(client) && record.token.as_ref() == Some(token)
        })
    }

    /// Milliseconds since the start of the run, for messages.
    pub fn t(&self, at: Instant) -> String {
        let since = at.saturating_duration_since(self.origin);
        format!("{:.3} ms", since.as_secs_f64() * 1000.0)
    }
}
