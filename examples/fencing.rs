//! Fencing tokens: a holder that pauses past its TTL has its late write rejected.
//!
//! A lock alone cannot stop a client that checked its lock, then paused (GC, swap, SIGSTOP)
//! until the lock expired and another client took it, and then wrote: it never learns that
//! the lock is gone. With `fencing(true)`, every acquisition gets a token larger than every
//! earlier holder's, and the store accepts a write only with a token at least as large as
//! the last one it saw (`quorumlock::fencing::fenced_set`, one script on the store).
//!
//! Two clients update one report. A takes the lock (token t1), checks its validity, and
//! pauses before writing. Its lock expires; B takes it (token t2 > t1) and writes. A wakes
//! and writes: the fenced write is rejected, while the same write without fencing silently
//! overwrites B's report.
//!
//! Checked at the end: t2 > t1, A's fenced write was rejected, and the report is B's. The
//! example exits non-zero otherwise.
//!
//! ```text
//! cargo run --example fencing      # starts 5 local lock nodes and 1 store
//! QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379 cargo run --example fencing
//! ```
//!
//! With `QUORUMLOCK_NODES` set, the report is kept on the first node (under its own key).

mod common;

use std::process::ExitCode;
use std::time::Duration;

use common::Result;
use quorumlock::fencing::fenced_set;
use quorumlock::{LockConfig, LockError, Redlock};
use quorumlock_testkit::Persistence;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Prints one line of the timeline, stamped with the time since `start`.
macro_rules! say {
    ($start:expr, $($arg:tt)*) => {
        println!("{:5.2}s  {}", $start.elapsed().as_secs_f64(), format_args!($($arg)*))
    };
}

/// The lock, and the data it protects on the store: once with fencing, once without.
const LOCK: &str = "lock:daily-report";
const REPORT: &str = "report:daily";
const UNFENCED_REPORT: &str = "report:daily:unfenced";
const TTL: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result {
    // QUORUMLOCK_NODES=redis://host1:6379,... or 5 local nodes; the report lives on a
    // server of its own (the first node with QUORUMLOCK_NODES). All stop when dropped.
    let (nodes, store_server) =
        common::lock_nodes_and_store(5, Persistence::AppendFsyncAlways).await?;
    let config = LockConfig::builder().ttl(TTL).fencing(true).build()?;
    let store = common::connect(&store_server.url).await?;
    // Two separate clients, as two processes would have.
    let a = Redlock::connect(&nodes.urls, config.clone()).await?;
    let b = Redlock::connect(&nodes.urls, config).await?;
    println!(
        "lock {LOCK:?} with fencing tokens, TTL {TTL:?}, on {} nodes",
        nodes.urls.len()
    );

    let start = Instant::now();
    let (b_wrote, a_wakes) = oneshot::channel();
    let (a_outcome, b_token) = tokio::try_join!(
        client_a(a, store.clone(), start, a_wakes),
        client_b(b, store.clone(), start, b_wrote),
    )?;
    let (t1, a_fenced_write_accepted) = a_outcome;

    let mut store = store;
    let report: Option<String> = store.get(REPORT).await?;
    let unfenced: Option<String> = store.get(UNFENCED_REPORT).await?;
    println!("\nthe store holds:");
    println!("  {REPORT:<22} (fenced writes) = {report:?}");
    println!("  {UNFENCED_REPORT:<22} (plain SET)     = {unfenced:?}");

    let mut failures = Vec::new();
    if b_token <= t1 {
        failures.push(format!("B's token {b_token} is not greater than A's {t1}"));
    }
    if a_fenced_write_accepted {
        failures.push("A's late fenced write was accepted".to_owned());
    }
    if report.as_deref() != Some(B_REPORT) {
        failures.push(format!("the report is {report:?}, not B's"));
    }
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    println!(
        "OK: tokens {t1} < {b_token}; A's late write was rejected and B's report kept \
         (without fencing, A's stale report replaced it)"
    );
    Ok(())
}

const A_REPORT: &str = "report computed by A (stale)";
const B_REPORT: &str = "report computed by B";

/// Takes the lock, checks it, pauses, then writes; returns its token and whether the
/// fenced write went through.
async fn client_a(
    lock: Redlock,
    mut store: MultiplexedConnection,
    start: Instant,
    wake: oneshot::Receiver<()>,
) -> Result<(u64, bool)> {
    let guard = lock.acquire(LOCK).await?;
    let token = guard
        .fencing_token()
        .ok_or("no fencing token: fencing(true) not set?")?;
    say!(start, "A acquired the lock: fencing token {token}");
    // Everything a careful holder can do: the lock is ours for a while yet.
    say!(
        start,
        "A checks its lock before writing: {:.0?} left",
        guard.validity()
    );

    // The process stalls right here, past its TTL (a GC pause, a swapped-out page, SIGSTOP).
    // Its length is unknowable; here it lasts until B has taken the lock and written.
    say!(start, "A pauses...");
    wake.await?;
    say!(
        start,
        "A resumes, unaware that its lock expired {:.0?} ago",
        guard.deadline().elapsed()
    );

    let accepted = fenced_set(&mut store, REPORT, A_REPORT, token).await?;
    say!(
        start,
        "A writes with token {token}: {}",
        if accepted {
            "accepted"
        } else {
            "REJECTED, a newer token already wrote"
        }
    );
    let () = store.set(UNFENCED_REPORT, A_REPORT).await?;
    say!(
        start,
        "A writes without fencing: plain SET, overwrites B's report"
    );

    match guard.release().await {
        // The lock was B's in between: A's release touches nothing and says so.
        Err(LockError::NotHeld { .. }) => say!(start, "A's release: NotHeld, the lock was lost"),
        Err(err) => say!(start, "A's release: {err}"),
        Ok(()) => say!(start, "A's release: Ok (unexpected)"),
    }
    Ok((token, accepted))
}

/// Waits for the lock (it is free once A's expires), writes, and tells A to wake up.
async fn client_b(
    lock: Redlock,
    mut store: MultiplexedConnection,
    start: Instant,
    wrote: oneshot::Sender<()>,
) -> Result<u64> {
    // A goes first. It never releases, so the lock frees up only when A's TTL runs out:
    // retry until then.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let guard = loop {
        match lock.acquire(LOCK).await {
            Err(err) if err.is_retryable() && start.elapsed() < 5 * TTL => continue,
            outcome => break outcome?,
        }
    };
    let token = guard.fencing_token().ok_or("no fencing token")?;
    say!(
        start,
        "B acquired the lock after A's expired: fencing token {token}"
    );
    let accepted = fenced_set(&mut store, REPORT, B_REPORT, token).await?;
    let () = store.set(UNFENCED_REPORT, B_REPORT).await?;
    say!(
        start,
        "B writes its report with token {token}: accepted = {accepted}"
    );
    if !accepted {
        return Err("B's fenced write was rejected".into());
    }
    match guard.release().await {
        Ok(()) => say!(start, "B released the lock"),
        Err(err) => say!(start, "B's release was not confirmed: {err}"),
    }
    let _ = wrote.send(());
    Ok(token)
}
