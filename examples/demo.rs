//! quorumlock end to end, against five real local Redis nodes.
//!
//! Starts five independent `redis-server` processes on free loopback ports (through the
//! test harness, `quorumlock_testkit`), builds a `Redlock` over them and walks through:
//! acquire and release, contention between two tasks, losing two nodes (still a quorum),
//! losing a third (a `NoQuorum` error naming the nodes), a frozen node, refresh, the
//! background release of a dropped guard, and work kept alive past its TTL by
//! auto-extension until the lock is lost.
//!
//! ```text
//! cargo run --example demo        # or: scripts/demo.sh
//! ```
//!
//! Needs `redis-server` (Debian/Ubuntu: `apt-get install -y redis-server`). Every node is
//! killed and its directory removed when the demo ends.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{DistributedLock, LockConfig, LockError, Redlock};
use quorumlock_testkit::RedisCluster;
use tokio::sync::Barrier;

type DemoResult<T = ()> = Result<T, Box<dyn Error>>;

#[tokio::main]
async fn main() -> ExitCode {
    println!("Starting 5 independent redis-server nodes on free 127.0.0.1 ports...");
    let mut cluster = match RedisCluster::start(5).await {
        Ok(cluster) => cluster,
        Err(err) => {
            eprintln!("error: could not start the local Redis nodes: {err}");
            return ExitCode::FAILURE;
        }
    };
    match run(&mut cluster).await {
        Ok(()) => {
            println!("\nDone. The 5 nodes are stopped and their directories removed.");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("\ndemo failed: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cluster: &mut RedisCluster) -> DemoResult {
    let urls = cluster.urls();
    for (i, url) in urls.iter().enumerate() {
        println!("  node {} = {url}", i + 1);
    }

    let config = LockConfig::builder().ttl(Duration::from_secs(10)).build()?;
    let lock = Redlock::connect(&urls, config).await?;
    println!(
        "Redlock over {} nodes: quorum {}, TTL {:?}, per-node timeout {:?}, drift allowance {:?}",
        urls.len(),
        lock.quorum(),
        lock.config().ttl(),
        lock.config().node_timeout(),
        lock.config().drift_allowance(),
    );

    acquire_and_release(cluster, &lock).await?;
    contention(&lock).await?;
    minority_down(cluster, &lock).await?;
    majority_down(cluster, &lock).await?;
    recovery_and_frozen_node(cluster, &lock).await?;
    refresh(&lock).await?;
    auto_release_on_drop(cluster, &lock).await?;
    auto_extension(cluster, &lock).await?;
    println!("\nlock metrics: {:?}", lock.metrics());
    Ok(())
}

/// Step 1: The basic cycle, and what it leaves on the nodes.
async fn acquire_and_release(cluster: &RedisCluster, lock: &Redlock) -> DemoResult {
    section("1. Acquire and release");
    let started = Instant::now();
    let guard = lock.acquire("demo:order:12345").await?;
    println!(
        "acquired {:?} in {:.1?}: token {}, valid for {:.1?}",
        guard.resource(),
        started.elapsed(),
        guard.token(),
        guard.validity(),
    );
    println!(
        "the key is set on {} (the round returns as soon as {} granted it)",
        holders(cluster, "demo:order:12345").await?,
        lock.quorum()
    );
    guard.release().await?;
    // The release returns once a quorum deleted the key; give the last deletes a moment.
    tokio::time::sleep(Duration::from_millis(20)).await;
    println!(
        "released: the key is set on {}",
        holders(cluster, "demo:order:12345").await?
    );
    Ok(())
}

/// Step 2: Two tasks race for the same resource: exactly one wins.
async fn contention(lock: &Redlock) -> DemoResult {
    section("2. Contention: two tasks, one lock");
    let barrier = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = ["worker-a", "worker-b"]
        .into_iter()
        .map(|name| {
            let lock = lock.clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                (name, lock.try_acquire("demo:report").await)
            })
        })
        .collect();

    let mut winners = Vec::new();
    for task in tasks {
        let (name, outcome) = task.await?;
        match outcome {
            Ok(guard) => {
                println!("{name}: won the lock (valid for {:.1?})", guard.validity());
                winners.push(guard);
            }
            Err(err @ LockError::Held { .. }) => {
                println!("{name}: LockError::Held -> {err}");
                println!("          (its partial grants, if any, were rolled back)");
            }
            Err(other) => return Err(other.into()),
        }
    }
    if winners.len() != 1 {
        return Err(format!("expected exactly one winner, got {}", winners.len()).into());
    }
    for guard in winners {
        guard.release().await?;
    }
    Ok(())
}

/// Step 3: Two of five nodes crash: three still form a quorum.
async fn minority_down(cluster: &mut RedisCluster, lock: &Redlock) -> DemoResult {
    section("3. Two of five nodes down: still a quorum");
    cluster.node_mut(0).kill().await?;
    cluster.node_mut(1).kill().await?;
    println!("killed nodes 1 and 2 (SIGKILL)");

    let started = Instant::now();
    let guard = lock.acquire("demo:order:12345").await?;
    println!(
        "acquired in {:.1?}, valid for {:.1?}; the key is set on {} (quorum {})",
        started.elapsed(),
        guard.validity(),
        holders(cluster, "demo:order:12345").await?,
        lock.quorum(),
    );

    // Another client asking for the same lock sees the whole tally: who refused, who failed.
    match lock.try_acquire("demo:order:12345").await {
        Err(err @ LockError::Held { .. }) => {
            println!("a second client gets LockError::Held, with the tally of the round:");
            println!("  {err}");
        }
        Ok(_) => return Err("a second client acquired a held lock".into()),
        Err(other) => return Err(other.into()),
    }
    guard.release().await?;
    println!("released on the three live nodes");
    Ok(())
}

/// Step 4: A third node crashes: no quorum, and an error that says exactly why.
async fn majority_down(cluster: &mut RedisCluster, lock: &Redlock) -> DemoResult {
    section("4. Three of five nodes down: no quorum");
    cluster.node_mut(2).kill().await?;
    println!("killed node 3 as well");

    let started = Instant::now();
    match lock.acquire("demo:order:12345").await {
        Err(err @ LockError::NoQuorum { .. }) => {
            println!(
                "LockError::NoQuorum after {} attempts in {:.1?}:",
                1 + lock.config().retry_count(),
                started.elapsed()
            );
            println!("  {err}");
            println!("the failed nodes, from the error's tally:");
            let tally = err.tally().expect("NoQuorum carries a tally");
            for failure in &tally.failures {
                println!("  - {} -> {}", failure.node, failure.error);
            }
        }
        Ok(_) => return Err("acquired without a quorum".into()),
        Err(other) => return Err(other.into()),
    }
    println!(
        "every attempt unlocked the live nodes before returning: the key is set on {}",
        holders(cluster, "demo:order:12345").await?
    );
    Ok(())
}

/// Step 5: The nodes come back (the lock reconnects by itself), then one freezes.
async fn recovery_and_frozen_node(cluster: &mut RedisCluster, lock: &Redlock) -> DemoResult {
    section("5. Nodes restart; then one node freezes");
    for i in 0..3 {
        cluster.node_mut(i).restart().await?;
    }
    println!("restarted nodes 1-3 on their ports (empty: they run without persistence)");
    let guard = lock.acquire("demo:order:12345").await?;
    println!(
        "acquired again without any reconnect call: the key is set on {}",
        holders(cluster, "demo:order:12345").await?
    );
    guard.release().await?;

    cluster.node_mut(3).freeze().await?;
    println!("froze node 4 (SIGSTOP): it accepts connections but never answers");
    let started = Instant::now();
    let guard = lock.try_acquire("demo:order:12345").await?;
    println!(
        "acquired in {:.1?} anyway: the round returns as soon as a quorum agreed, and no node \
         may take longer than the {:?} node timeout",
        started.elapsed(),
        lock.config().node_timeout()
    );
    guard.release().await?;
    cluster.node_mut(3).thaw().await?;
    println!("thawed node 4");
    Ok(())
}

/// Step 6: Refresh: extend a held lock back to its full TTL.
async fn refresh(lock: &Redlock) -> DemoResult {
    section("6. Refresh");
    let mut guard = lock.acquire("demo:long-job").await?;
    println!(
        "acquired {:?}, valid for {:.1?}",
        guard.resource(),
        guard.validity()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!("after 1.5 s of work, valid for {:.1?}", guard.validity());
    let validity = guard.refresh().await?;
    println!("refreshed: valid for {validity:.1?} again");
    println!("still held on a quorum: {}", guard.is_acquired().await?);
    guard.release().await?;
    Ok(())
}

/// Step 7: A guard dropped on an error path releases the lock in the background.
async fn auto_release_on_drop(cluster: &RedisCluster, lock: &Redlock) -> DemoResult {
    section("7. Auto-release when a guard is dropped");

    async fn failing_job(lock: &Redlock) -> DemoResult {
        let _guard = lock.acquire("demo:job").await?;
        Err("the job failed halfway".into()) // `_guard` is dropped here
    }

    let failed_at = match failing_job(lock).await {
        Err(err) => {
            println!("job returned an error while holding the lock: {err}");
            Instant::now()
        }
        Ok(()) => return Err("the job was supposed to fail".into()),
    };
    while !holder_numbers(cluster, "demo:job").await?.is_empty() {
        if failed_at.elapsed() > Duration::from_secs(2) {
            return Err("the dropped guard's lock was not released".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!(
        "the dropped guard released the lock in the background within {:.1?} (the TTL is {:?})",
        failed_at.elapsed(),
        lock.config().ttl()
    );
    let guard = lock.try_acquire("demo:job").await?;
    println!("the next client acquires it at once");
    guard.release().await?;
    Ok(())
}

/// Step 8: `with()` runs work that outlives the TTL, kept alive by a watchdog, and stops
/// it when the lock is lost.
async fn auto_extension(cluster: &mut RedisCluster, lock: &Redlock) -> DemoResult {
    section("8. Auto-extension with `with()`, until the lock is lost");
    // Same connections, a 1 s TTL: the watchdog extends the lock every third of it.
    let short = lock.with_config(LockConfig::builder().ttl(Duration::from_secs(1)).build()?);
    let extended_before = lock.metrics().extended;
    let mut killed_at = None;
    let outcome = short
        .with("demo:worker", |_lost| async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            println!(
                "work: 2.5 s in with a 1 s TTL; the watchdog extended the lock {} times",
                lock.metrics().extended - extended_before
            );
            for i in 0..3 {
                cluster.node_mut(i).kill().await?;
            }
            killed_at = Some(Instant::now());
            println!("work: killed nodes 1-3, carrying on for another 10 s...");
            tokio::time::sleep(Duration::from_secs(10)).await;
            println!("work: finished (not expected: the lock was lost)");
            Ok::<(), quorumlock_testkit::TestkitError>(())
        })
        .await;
    match outcome {
        Err(err @ LockError::Lost { .. }) => {
            let after = killed_at.map(|at| at.elapsed()).unwrap_or_default();
            println!("with() stopped the work {after:.1?} after the kill (TTL 1s):");
            println!("  {err}");
        }
        Err(other) => return Err(other.into()),
        Ok(work) => {
            work?;
            return Err("the work finished without a quorum".into());
        }
    }
    Ok(())
}

/// Which running nodes hold `key`, e.g. `3 of 5 nodes [3, 4, 5]`.
async fn holders(cluster: &RedisCluster, key: &str) -> DemoResult<String> {
    let nodes = holder_numbers(cluster, key).await?;
    if nodes.is_empty() {
        return Ok("no node".to_owned());
    }
    let list: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    Ok(format!(
        "{} of {} nodes [{}]",
        nodes.len(),
        cluster.len(),
        list.join(", ")
    ))
}

/// The 1-based numbers of the running nodes that hold `key`.
async fn holder_numbers(cluster: &RedisCluster, key: &str) -> DemoResult<Vec<usize>> {
    let keys = cluster.keys_on_running(key).await?;
    Ok(keys
        .iter()
        .enumerate()
        .filter(|(_, found)| !found.is_empty())
        .map(|(i, _)| i + 1)
        .collect())
}

fn section(title: &str) {
    println!("\n== {title}");
}
