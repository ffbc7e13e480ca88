//! Leader election: three candidates, one singleton worker, an observer, and a leader that
//! steps down as soon as it can no longer trust its term.
//!
//! Each candidate (a task with its own `Redlock` client) campaigns in the `Election`
//! `service:billing`. The winner's `Leadership` is the election's lock, kept alive by a
//! watchdog and numbered by a fencing token; it does the leader's work while watching
//! `leadership.lost()`. An observer prints each change of leader (`election.observe()`).
//! Then:
//!
//! 1. a majority of the lock nodes freezes (SIGSTOP) for longer than the TTL: the leader's
//!    extensions go unanswered, its lost signal fires before the lock expires, and it stops
//!    working at once; nobody can be elected while the majority is frozen; after the thaw
//!    another candidate takes over;
//! 2. the new leader is asked to resign (a deploy, say): it releases the lock, and a waiting
//!    candidate takes over within milliseconds;
//! 3. everyone shuts down.
//!
//! Checked at the end: the leaders' terms (from winning the election to stopping the work)
//! never overlapped, their fencing tokens strictly increase, and the first leader stepped
//! down because it lost its term. The example exits non-zero otherwise.
//!
//! ```text
//! cargo run --example leader_election      # starts 5 local Redis nodes
//! QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379 cargo run --example leader_election
//! ```
//!
//! With `QUORUMLOCK_NODES` set, the majority is paused with `CLIENT PAUSE` instead of SIGSTOP.

mod common;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Nodes, Result};
// The crate's re-export: a user of `observe` needs no `futures` of their own.
use quorumlock::futures::StreamExt;
use quorumlock::{Election, Leadership, LeaseEnd, LockConfig, LockError, Redlock};
use quorumlock_testkit::Persistence;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Prints one line of the timeline, stamped with the time since the start.
macro_rules! event {
    ($shared:expr, $($arg:tt)*) => {
        println!("{:5.2}s  {}", $shared.start.elapsed().as_secs_f64(), format_args!($($arg)*))
    };
}

const ELECTION: &str = "service:billing";
const CANDIDATES: usize = 3;
const TTL: Duration = Duration::from_secs(1);
/// How long a majority of the nodes stays frozen: longer than the TTL.
const FREEZE: Duration = Duration::from_millis(1500);
/// A leader that lost its lock waits this long before campaigning again: whatever cut it
/// off from the nodes may not be over.
const COOL_DOWN: Duration = Duration::from_millis(1500);

/// One leader's term, from winning the lock to stopping the work.
#[derive(Debug, Clone)]
struct Term {
    leader: usize,
    fencing_token: u64,
    start: Instant,
    end: Instant,
    /// Why it ended, in short.
    why: &'static str,
    /// Whether the lost signal ended it (rather than a resignation or the shutdown).
    lost: bool,
    batches: u64,
}

/// What the candidates share: the clock's origin, the terms so far, and the orders from main.
struct Shared {
    start: Instant,
    terms: Mutex<Vec<Term>>,
    resign: Notify,
    shutdown: watch::Receiver<bool>,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result {
    // QUORUMLOCK_NODES=redis://host1:6379,... or 5 local nodes (stopped when `cluster` drops).
    // Terms are numbered by fencing tokens, whose counters need an append-only file.
    let Nodes { urls, mut cluster } =
        common::lock_nodes_with(5, Persistence::AppendFsyncAlways).await?;
    let config = LockConfig::builder().ttl(TTL).fencing(true).build()?;
    println!(
        "{CANDIDATES} candidates campaign in {ELECTION:?} on {} nodes; TTL {TTL:?}, extended \
         every third of it",
        urls.len()
    );

    let (stop, shutdown) = watch::channel(false);
    let shared = Arc::new(Shared {
        start: Instant::now(),
        terms: Mutex::new(Vec::new()),
        resign: Notify::new(),
        shutdown,
    });
    let mut candidates = Vec::new();
    for id in 1..=CANDIDATES {
        // Each candidate is its own process in real life: its own client and connections.
        let election = Election::new(Redlock::connect(&urls, config.clone()).await?, ELECTION)?;
        candidates.push(tokio::spawn(candidate(id, election, Arc::clone(&shared))));
    }
    let observer = Election::new(Redlock::connect(&urls, config.clone()).await?, ELECTION)?;
    tokio::spawn(observe(observer, Arc::clone(&shared)));

    tokio::time::sleep(Duration::from_secs(1)).await;
    let majority = quorumlock::quorum_of(urls.len());
    match cluster.as_mut() {
        Some(cluster) => {
            for i in 0..majority {
                cluster.node_mut(i).freeze().await?;
            }
            event!(
                shared,
                "-- froze nodes 1-{majority} (SIGSTOP) for {FREEZE:?}"
            );
            tokio::time::sleep(FREEZE).await;
            for i in 0..majority {
                cluster.node_mut(i).thaw().await?;
            }
            event!(shared, "-- thawed nodes 1-{majority}");
        }
        None => {
            for url in &urls[..majority] {
                let mut node = common::connect(url).await?;
                let pause = u64::try_from(FREEZE.as_millis())?;
                let () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(pause)
                    .arg("ALL")
                    .query_async(&mut node)
                    .await?;
            }
            event!(
                shared,
                "-- paused {majority} nodes (CLIENT PAUSE) for {FREEZE:?}"
            );
            tokio::time::sleep(FREEZE).await;
        }
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    event!(shared, "-- asking the leader to resign");
    shared.resign.notify_waiters();

    tokio::time::sleep(Duration::from_secs(1)).await;
    event!(shared, "-- shutting down");
    stop.send(true)?;
    for candidate in candidates {
        candidate.await??;
    }

    let terms = shared.terms.lock().unwrap().clone();
    check(&terms, shared.start)
}

/// A candidate: campaign, lead until the term is lost (or told to resign or stop), repeat.
async fn candidate(id: usize, election: Election, shared: Arc<Shared>) -> Result {
    let mut shutdown = shared.shutdown.clone();
    let value = format!("candidate-{id}");
    loop {
        // Waits in line while another leads, and on while the nodes are unreachable.
        let leadership = tokio::select! {
            leadership = election.campaign(&value) => leadership?,
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        };
        let start = Instant::now();
        event!(
            shared,
            "candidate-{id} won the election: it is the leader (term {})",
            leadership.fencing_token()
        );
        let lost = leadership.lost();

        let mut batches = 0;
        // The leader's work runs only inside this `select!`: when any other branch wins,
        // the work future is dropped, so no batch starts after that instant.
        let (why, lost_how) = tokio::select! {
            () = lead(&mut batches) => unreachable!("the leader's work never ends by itself"),
            end = lost.wait() => ("lost its term", Some(stepped_down(&leadership, &end))),
            () = shared.resign.notified() => ("resigned", None),
            _ = shutdown.wait_for(|stop| *stop) => ("shut down", None),
        };
        let end = Instant::now();
        let was_lost = lost_how.is_some();
        let detail = lost_how.unwrap_or_else(|| why.to_owned());
        event!(shared, "candidate-{id} stopped leading: {detail}");
        shared.terms.lock().unwrap().push(Term {
            leader: id,
            fencing_token: leadership.fencing_token(),
            start,
            end,
            why,
            lost: was_lost,
            batches,
        });

        if was_lost {
            drop(leadership); // nothing to give up any more; dropping stops the watchdog
        } else {
            match leadership.resign().await {
                Ok(()) => event!(shared, "candidate-{id} resigned"),
                // Nodes down or slow: the lock then expires with its TTL, and the next
                // leader takes over a little later.
                Err(err) => event!(shared, "candidate-{id}: resignation not confirmed: {err}"),
            }
        }
        if *shutdown.borrow() {
            return Ok(());
        }
        tokio::time::sleep(COOL_DOWN).await;
    }
}

/// Prints every change of leader, as any process (a load balancer, a dashboard) sees them.
async fn observe(election: Election, shared: Arc<Shared>) {
    let mut changes = Box::pin(election.observe());
    let mut blind = false;
    while let Some(change) = changes.next().await {
        match &change {
            Ok(Some(leader)) => event!(
                shared,
                "   observer: {} leads (term {})",
                leader.value,
                leader.fencing_token
            ),
            Ok(None) => event!(shared, "   observer: nobody leads"),
            // Said once per outage: the stream goes on asking.
            Err(_) if blind => continue,
            Err(err) => event!(shared, "   observer: cannot tell who leads: {err}"),
        }
        blind = change.is_err();
    }
}

/// The singleton work: one batch every 100 ms.
async fn lead(batches: &mut u64) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        *batches += 1;
    }
}

/// Why the term ended, and how long before its deadline the leader stopped.
fn stepped_down(leadership: &Leadership, end: &LeaseEnd) -> String {
    let why = match end {
        LeaseEnd::Lost(err) if matches!(**err, LockError::NoQuorum { .. }) => {
            "lost its term (no quorum answered its extensions)".to_owned()
        }
        LeaseEnd::Lost(_) => "lost its term (the nodes no longer hold it)".to_owned(),
        other => format!("lost its term ({other})"),
    };
    format!(
        "{why}, {:.0?} before it would have expired",
        leadership.validity()
    )
}

/// Prints the terms and checks that no two overlapped.
fn check(terms: &[Term], origin: Instant) -> Result {
    let mut terms = terms.to_vec();
    terms.sort_by_key(|term| term.start);
    println!("\nterm  token  leader       from    to      batches  ended");
    for (n, term) in terms.iter().enumerate() {
        println!(
            "{:>4}  {:>5}  candidate-{}  {:>5.2}s  {:>5.2}s  {:>7}  {}",
            n + 1,
            term.fencing_token,
            term.leader,
            (term.start - origin).as_secs_f64(),
            (term.end - origin).as_secs_f64(),
            term.batches,
            term.why
        );
    }
    let mut failures = Vec::new();
    for (n, pair) in terms.windows(2).enumerate() {
        let (before, after) = (&pair[0], &pair[1]);
        if after.fencing_token <= before.fencing_token {
            failures.push(format!(
                "term {} has token {}, not above the {} of the term before",
                n + 2,
                after.fencing_token,
                before.fencing_token
            ));
        }
        if after.start < before.end {
            failures.push(format!(
                "candidate-{} became leader {:.0?} before candidate-{} stepped down",
                after.leader,
                before.end - after.start,
                before.leader
            ));
        } else {
            println!(
                "no leader between terms {} and {}: {:.1?}",
                n + 1,
                n + 2,
                after.start - before.end
            );
        }
    }
    if terms.len() < 3 {
        failures.push(format!("expected 3 terms, got {}", terms.len()));
    }
    if !terms.first().is_some_and(|term| term.lost) {
        failures.push("the first leader did not step down on losing its term".to_owned());
    }
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    println!(
        "OK: {} terms, never two leaders at once, tokens increasing",
        terms.len()
    );
    Ok(())
}
