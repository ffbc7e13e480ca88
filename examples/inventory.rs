//! Inventory without overselling: many workers sell from one stock, one sale at a time.
//!
//! Each worker repeatedly locks `stock:sku-1`, reads the stock level from a separate Redis
//! server, pauses (standing in for a payment call), and writes the level minus one if it was
//! positive, recording a sale. The read-pause-write is deliberately not atomic: only the lock
//! keeps two workers from selling the same unit. A first round without the lock shows the
//! overselling it prevents. Halfway through the locked round one of the five lock nodes is
//! killed, and the workers carry on with the four left.
//!
//! Checked at the end: the final stock equals the initial stock minus the sales recorded,
//! and is not negative. The example exits non-zero otherwise.
//!
//! ```text
//! cargo run --example inventory      # starts 5 local lock nodes and 1 stock server
//! QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379 cargo run --example inventory
//! ```
//!
//! With `QUORUMLOCK_NODES` set, the stock is kept on the first node (under its own key) and
//! no node is killed.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{Nodes, Result};
use quorumlock::{LockConfig, LockError, LockGuard, Redlock};
use quorumlock_testkit::Persistence;
use quorumlock_testkit::RedisCluster;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// The lock's resource, and the key of the protected data on the stock server.
const LOCK: &str = "stock:sku-1";
const STOCK: &str = "inventory:sku-1:stock";
const INITIAL_STOCK: i64 = 40;
const WORKERS: usize = 8;
/// The pause between reading and writing the stock: where overlapping sales would happen.
const PAUSE: Duration = Duration::from_millis(5);
const TTL: Duration = Duration::from_secs(2);
/// A holder writes only while at least this much validity is left; otherwise it abandons
/// the sale rather than risk writing after the lock expired.
const WRITE_MARGIN: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result {
    // QUORUMLOCK_NODES=redis://host1:6379,... or 5 local nodes; the stock lives on a server
    // of its own (the first node with QUORUMLOCK_NODES). All stop when dropped.
    let (Nodes { urls, mut cluster }, store_server) =
        common::lock_nodes_and_store(5, Persistence::AppendFsyncAlways).await?;
    let config = LockConfig::builder().ttl(TTL).build()?;
    let lock = Redlock::connect(&urls, config).await?;
    let mut store = common::connect(&store_server.url).await?;
    println!(
        "{WORKERS} workers sell sku-1 from a stock of {INITIAL_STOCK} (read, pause {PAUSE:?}, \
         write stock - 1); lock {LOCK:?} on {} nodes, quorum {}",
        urls.len(),
        lock.quorum()
    );

    println!("\n== 1. Without the lock");
    let sales = sell_out(None, &mut store, None).await?;
    let left: i64 = store.get(STOCK).await?;
    println!(
        "sold {sales} units from a stock of {INITIAL_STOCK}; {left} left in the database: \
         {} units oversold (workers read the same level and each sold that unit)",
        i64::try_from(sales)? - (INITIAL_STOCK - left)
    );

    let killing = if cluster.is_some() {
        " (one lock node is killed halfway)"
    } else {
        ""
    };
    println!("\n== 2. With the lock{killing}");
    let sales = sell_out(Some(&lock), &mut store, cluster.as_mut()).await?;
    let left: i64 = store.get(STOCK).await?;
    println!("sold {sales} units from a stock of {INITIAL_STOCK}; {left} left in the database");

    // The property the lock exists for.
    let sold = i64::try_from(sales)?;
    if left < 0 || left != INITIAL_STOCK - sold {
        return Err(format!(
            "oversold: initial {INITIAL_STOCK} - sales {sold} = {}, but the stock is {left}",
            INITIAL_STOCK - sold
        )
        .into());
    }
    println!(
        "OK: final stock {left} = initial {INITIAL_STOCK} - sales {sold}, not negative: \
         nothing oversold"
    );
    Ok(())
}

/// Resets the stock, runs the workers until it is sold out, and returns the sales made.
/// With a `cluster`, kills its last node once half the stock is sold.
async fn sell_out(
    lock: Option<&Redlock>,
    store: &mut MultiplexedConnection,
    cluster: Option<&mut RedisCluster>,
) -> Result<u64> {
    let () = store.set(STOCK, INITIAL_STOCK).await?;
    let workers: Vec<_> = (1..=WORKERS)
        .map(|id| tokio::spawn(worker(id, lock.cloned(), store.clone())))
        .collect();

    if let Some(cluster) = cluster {
        // Wait until half the stock is sold (or the workers are done), then crash a node.
        loop {
            let level: i64 = store.get(STOCK).await?;
            if level <= INITIAL_STOCK / 2 || workers.iter().all(|w| w.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let last = cluster.len() - 1;
        cluster.node_mut(last).kill().await?;
        println!(
            "   -- killed lock node {} (SIGKILL): {} of {} left, the workers go on",
            last + 1,
            last,
            cluster.len()
        );
    }

    let mut total = 0;
    let mut per_worker = Vec::new();
    for handle in workers {
        let sales = handle.await??;
        per_worker.push(sales.to_string());
        total += sales;
    }
    println!("sales per worker: [{}]", per_worker.join(", "));
    Ok(total)
}

/// Sells one unit at a time until the stock is gone; returns how many it sold.
async fn worker(id: usize, lock: Option<Redlock>, mut store: MultiplexedConnection) -> Result<u64> {
    let mut sales = 0;
    loop {
        let guard = match &lock {
            Some(lock) => Some(acquire_patiently(lock).await?),
            None => None,
        };

        let level: i64 = store.get(STOCK).await?;
        if level <= 0 {
            break; // sold out (the guard is dropped, which releases the lock)
        }
        tokio::time::sleep(PAUSE).await; // e.g. charging the customer
        if guard.as_ref().is_some_and(|g| g.validity() < WRITE_MARGIN) {
            // Too little time left to be sure the lock still excludes everyone else. (A
            // process paused right after this check could still write late: fencing
            // tokens close that gap, see examples/fencing.rs.)
            println!("   worker-{id}: lock nearly expired, sale abandoned");
            continue;
        }
        let () = store.set(STOCK, level - 1).await?;
        sales += 1;
        if lock.is_some() && (level - 1) % 10 == 0 {
            println!("   worker-{id} sold a unit: stock {level} -> {}", level - 1);
        }
        if let Some(guard) = guard {
            if let Err(err) = guard.release().await {
                // Not fatal: the final count tells whether sales overlapped, and a lock
                // whose release was not confirmed (nodes down or slow) expires with its TTL.
                println!("   worker-{id}: release not confirmed: {err}");
            }
        }
        // The next order reaches this worker a moment later; without this gap the worker
        // that just released would usually win the lock again before the waiters wake up.
        tokio::time::sleep(PAUSE).await;
    }
    Ok(sales)
}

/// `acquire` again and again, for up to 10 s. Eight workers want one lock, so losing a few
/// rounds in a row is normal: `Held`, or `NoQuorum` once a node is down (a lost round then
/// can end before enough nodes answered to tell that it was only contention).
async fn acquire_patiently(lock: &Redlock) -> Result<LockGuard, LockError> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        match lock.acquire(LOCK).await {
            Err(err) if err.is_retryable() && Instant::now() < give_up => continue,
            outcome => return outcome,
        }
    }
}
