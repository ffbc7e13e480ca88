//! The lock family on the simulated cluster: each session of a schedule takes a permit of
//! a semaphore, a side of a read-write lock, or a leadership, instead of a mutex, and the
//! checks of the family's promises on the trace.
//!
//! The runner reuses the mutex's: the same schedules, faults and hold steps, and the same
//! [`Trace`] of attempts, so the family's checks read the same holding intervals.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::sim::SimCluster;
use quorumlock::{Election, LockError, LockGuard, Redlock, RwLock, Semaphore};
use tokio::time::Instant;

use super::checks::Verdict;
use super::runner::{
    apply_faults, hold, Attempt, AttemptResult, Event, Grant, Trace, RETURN_ORDER,
};
use super::schedule::{ms, End, Schedule, Session};

/// What every session of a run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// A permit of one semaphore with this many permits.
    Semaphore(u32),
    /// A side of one read-write lock: clients with an even index write, the others read.
    RwLock,
    /// The leadership of one election (the schedule's config gets fencing).
    Election,
}

/// The resource names of the attempts, for the checks.
pub const PERMIT: &str = "permit";
pub const READ: &str = "read";
pub const WRITE: &str = "write";
pub const LEADER: &str = "leader";

/// Runs `schedule` with every session taking `primitive`, on a fresh paused runtime.
pub fn run_family(schedule: &Schedule, primitive: Primitive) -> Trace {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(schedule, primitive))
}

async fn simulate(schedule: &Schedule, primitive: Primitive) -> Trace {
    let origin = Instant::now();
    let mut config = schedule.config();
    if primitive == Primitive::Election {
        config = config.to_builder().fencing(true).build().unwrap();
    }
    let cluster = SimCluster::new(schedule.nodes);
    for (node, setup) in cluster.nodes().iter().zip(&schedule.setup) {
        node.set_clock_rate(setup.rate);
        node.set_request_delay(ms(setup.request_delay_ms));
        node.set_reply_delay(ms(setup.reply_delay_ms));
    }
    let fault_task = tokio::spawn(apply_faults(cluster.clone(), schedule.timeline(), origin));
    let mut tasks = Vec::new();
    for (index, sessions) in schedule.clients.iter().enumerate() {
        let name: Arc<str> = format!("c{index}").into();
        let lock = cluster
            .redlock_for(&name, config.clone())
            .expect("a lock over the simulated nodes");
        let sessions = sessions.clone();
        tasks.push(tokio::spawn(client(index, name, lock, sessions, primitive)));
    }
    let mut attempts = Vec::new();
    let mut kept = Vec::new();
    for task in tasks {
        let (client_attempts, client_kept) = task.await.expect("a client task panicked");
        attempts.extend(client_attempts);
        kept.extend(client_kept);
    }
    fault_task.await.expect("the fault task panicked");
    tokio::time::sleep(config.ttl() * 2 + config.node_timeout() * 4).await;
    let trace = Trace {
        config,
        // The checks' own spelling of the rule (see `runner::run`).
        quorum: schedule.nodes / 2 + 1,
        nodes: schedule.nodes,
        origin,
        attempts,
        log: cluster.log(),
        // The family's locks take no grants: they never queue.
        published: Vec::new(),
        // The family's checks are about holders, not keys left behind.
        leftovers: Vec::new(),
    };
    drop(kept);
    trace
}

/// What a vanished holder keeps until the end of the run: its guard or leadership.
type Kept = Box<dyn std::any::Any + Send>;

async fn client(
    index: usize,
    name: Arc<str>,
    lock: Redlock,
    sessions: Vec<Session>,
    primitive: Primitive,
) -> (Vec<Attempt>, Vec<Kept>) {
    let mut attempts = Vec::new();
    let mut kept = Vec::new();
    for session in sessions {
        tokio::time::sleep(ms(session.wait_ms.max(1))).await;
        let called = Instant::now();
        let (resource, events, result) = match primitive {
            Primitive::Election => {
                let (result, events) = lead(&lock, &name, &session, &mut kept).await;
                (LEADER, events, result)
            }
            _ => {
                // Contended schedules send every session to one resource: writers and
                // readers are told apart by client, so that both contend.
                let resource = match primitive {
                    Primitive::RwLock if index.is_multiple_of(2) => WRITE,
                    Primitive::RwLock => READ,
                    _ => PERMIT,
                };
                let (result, events) =
                    take_and_hold(&lock, primitive, resource, &session, &mut kept).await;
                (resource, events, result)
            }
        };
        attempts.push(Attempt {
            client: index,
            client_name: Arc::clone(&name),
            resource: resource.to_owned(),
            blocking: session.blocking,
            called,
            returned: result.1,
            returned_seq: result.2,
            result: result.0,
            events,
        });
    }
    (attempts, kept)
}

/// How an attempt ended, when it returned, and its place in the order of returns.
type Returned = (AttemptResult, Instant, u64);

fn returned(result: AttemptResult) -> Returned {
    (
        result,
        Instant::now(),
        RETURN_ORDER.fetch_add(1, Ordering::SeqCst),
    )
}

fn granted(guard: &LockGuard) -> AttemptResult {
    AttemptResult::Granted(Grant {
        token: guard.token().clone(),
        acquired_at: guard.acquired_at(),
        deadline: guard.deadline(),
        fencing_token: guard.fencing_token(),
    })
}

/// A permit or a side of the read-write lock, held as the session says.
async fn take_and_hold(
    lock: &Redlock,
    primitive: Primitive,
    resource: &str,
    session: &Session,
    kept: &mut Vec<Kept>,
) -> (Returned, Vec<Event>) {
    let attempt = async {
        match primitive {
            Primitive::Semaphore(permits) => {
                let semaphore = Semaphore::new(lock.clone(), "s", permits)?;
                let permit = if session.blocking {
                    semaphore.acquire().await?
                } else {
                    semaphore.try_acquire().await?
                };
                Ok::<_, LockError>(permit.into_guard())
            }
            _ => {
                let rwlock = RwLock::new(lock.clone(), "rw")?;
                match (resource == READ, session.blocking) {
                    (true, true) => rwlock.read().await,
                    (true, false) => rwlock.try_read().await,
                    (false, true) => rwlock.write().await,
                    (false, false) => rwlock.try_write().await,
                }
            }
        }
    };
    let outcome = match session.cancel_after_ms {
        Some(after) => tokio::time::timeout(ms(after), attempt).await.ok(),
        None => Some(attempt.await),
    };
    let mut events = Vec::new();
    let mut guard = match outcome {
        None => return (returned(AttemptResult::Cancelled), events),
        Some(Err(error)) => return (returned(AttemptResult::Failed(error)), events),
        Some(Ok(guard)) => guard,
    };
    let result = returned(granted(&guard));
    hold(&mut guard, session, &mut events).await;
    let at = Instant::now();
    let released = match session.end {
        End::Release => Some(guard.release().await),
        End::Drop => {
            drop(guard);
            None
        }
        End::Vanish => {
            kept.push(Box::new(guard));
            None
        }
    };
    events.push(Event::End {
        how: session.end,
        at,
        result: released,
    });
    (result, events)
}

/// A campaign (bounded, so that runs end), then the leadership held for the session's
/// hold times, auto-extended, until it ends as the session says or is lost. The holding
/// interval ends when the lost signal fired, if it fired first: a leader acts until then.
async fn lead(
    lock: &Redlock,
    name: &str,
    session: &Session,
    kept: &mut Vec<Kept>,
) -> (Returned, Vec<Event>) {
    let election = Election::new(lock.clone(), "e").expect("an election");
    // About one blocking acquire's worth: the run goes on while a leader holds on.
    let config = lock.config();
    let longest_wait = config.retry_delay() + config.retry_jitter();
    let bound = config.ttl() + longest_wait * (config.retry_count() + 1);
    let campaign = election.campaign_timeout(name, bound);
    let outcome = match session.cancel_after_ms {
        Some(after) => tokio::time::timeout(ms(after), campaign).await.ok(),
        None => Some(campaign.await),
    };
    let mut events = Vec::new();
    let leadership = match outcome {
        None => return (returned(AttemptResult::Cancelled), events),
        Some(Err(error)) => return (returned(AttemptResult::Failed(error)), events),
        Some(Ok(leadership)) => leadership,
    };
    let result = returned(granted(leadership.guard()));
    let lost_at = Arc::new(Mutex::new(None::<Instant>));
    let watcher = {
        let lost = leadership.lost();
        let lost_at = Arc::clone(&lost_at);
        tokio::spawn(async move {
            lost.wait().await;
            *lost_at.lock().unwrap() = Some(Instant::now());
        })
    };
    let held: u64 = session.holds.iter().map(|hold| hold.ms).sum();
    tokio::time::sleep(ms(held)).await;
    let at = Instant::now();
    // The term lasted until now, or until its loss was signalled, whichever came first;
    // recorded as a refresh to that deadline, which `Attempt::holding` reads.
    let until = lost_at.lock().unwrap().map_or(at, |lost| lost.min(at));
    events.push(Event::Refresh {
        called: until,
        returned: until,
        old_deadline: until,
        acquired_at: until,
        deadline: until,
        result: Ok(Duration::ZERO),
    });
    let released = match session.end {
        End::Release => Some(leadership.resign().await),
        End::Drop => {
            drop(leadership);
            None
        }
        End::Vanish => {
            kept.push(Box::new(leadership));
            None
        }
    };
    watcher.abort();
    events.push(Event::End {
        how: session.end,
        at: until,
        result: released,
    });
    (result, events)
}

/// The holding intervals of the attempts on `resource`, with the attempt.
fn holdings<'a>(trace: &'a Trace, resources: &[&str]) -> Vec<(Instant, Instant, &'a Attempt)> {
    trace
        .attempts
        .iter()
        .filter(|attempt| resources.contains(&attempt.resource.as_str()))
        .filter_map(|attempt| {
            let (from, to) = attempt.holding()?;
            Some((from, to, attempt))
        })
        .collect()
}

/// At most `permits` holders of the semaphore at any instant.
pub fn at_most_k(trace: &Trace, permits: u32) -> Verdict {
    let holdings = holdings(trace, &[PERMIT]);
    // At each start, count the holdings that cover it; the most is at some start.
    for (from, _, attempt) in &holdings {
        let covering: Vec<&Attempt> = holdings
            .iter()
            .filter(|(start, end, _)| start <= from && from < end)
            .map(|(_, _, holder)| *holder)
            .collect();
        if covering.len() > permits as usize {
            let clients: Vec<usize> = covering.iter().map(|holder| holder.client).collect();
            return Err(format!(
                "{} holders of a {permits}-permit semaphore at {} (clients {clients:?}), \
                 when client {} got its permit",
                covering.len(),
                trace.t(*from),
                attempt.client
            ));
        }
    }
    Ok(())
}

/// No writer's holding overlaps another holding of the read-write lock, read or write.
pub fn writers_exclude_everyone(trace: &Trace) -> Verdict {
    let holdings = holdings(trace, &[READ, WRITE]);
    for (i, (from_a, to_a, a)) in holdings.iter().enumerate() {
        for (from_b, to_b, b) in &holdings[i + 1..] {
            let writer = a.resource == WRITE || b.resource == WRITE;
            if writer && from_b < to_a && from_a < to_b {
                return Err(format!(
                    "client {} ({}) held over [{}, {}] and client {} ({}) over [{}, {}]",
                    a.client,
                    a.resource,
                    trace.t(*from_a),
                    trace.t(*to_a),
                    b.client,
                    b.resource,
                    trace.t(*from_b),
                    trace.t(*to_b)
                ));
            }
        }
    }
    Ok(())
}

/// Whether readers ever held the lock together (the read side is shared, not a mutex).
pub fn readers_overlapped(trace: &Trace) -> bool {
    let holdings = holdings(trace, &[READ]);
    holdings.iter().enumerate().any(|(i, (from_a, to_a, _))| {
        holdings[i + 1..]
            .iter()
            .any(|(from_b, to_b, _)| from_b < to_a && from_a < to_b)
    })
}

/// One leader at a time (terms, up to their loss, never overlap), and strictly
/// increasing terms in the order leaders were elected.
pub fn one_leader_increasing_terms(trace: &Trace) -> Verdict {
    let mut terms = holdings(trace, &[LEADER]);
    terms.sort_by_key(|(_, _, attempt)| attempt.returned_seq);
    for (i, (from_a, to_a, a)) in terms.iter().enumerate() {
        for (from_b, to_b, b) in &terms[i + 1..] {
            if from_b < to_a && from_a < to_b {
                return Err(format!(
                    "two leaders: client {} over [{}, {}] and client {} over [{}, {}]",
                    a.client,
                    trace.t(*from_a),
                    trace.t(*to_a),
                    b.client,
                    trace.t(*from_b),
                    trace.t(*to_b)
                ));
            }
        }
    }
    for pair in terms.windows(2) {
        let (first, next) = (pair[0].2, pair[1].2);
        let token = |attempt: &Attempt| attempt.grant().and_then(|grant| grant.fencing_token);
        if token(next) <= token(first) {
            return Err(format!(
                "client {} led with term {:?} and the next leader, client {}, with {:?}",
                first.client,
                token(first),
                next.client,
                token(next)
            ));
        }
    }
    Ok(())
}
