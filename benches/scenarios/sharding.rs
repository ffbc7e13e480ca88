//! The sharding scenario (`--only sharding`): 64 tasks, each locking and releasing a
//! resource of its own, over 3 standalone masters and over 3 Redis Clusters of 3 masters
//! each (a `Redlock` whose members are clusters), in the same run. It reports ops/s,
//! p50/p99, the client's CPU per operation, and how the 64 lock keys spread over each
//! cluster's masters. On a 2-core machine the servers share the cores with the client, so
//! throughput does not grow with masters here; docs/benchmarks.md ("Sharding over Redis
//! Cluster") projects what it gives on more machines from these figures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{DistributedLock, LockConfig, Nodes, RedisLock, Redlock, ReplicaAcks};
use quorumlock_testkit::measure::{histogram, merge, record, Histogram};
use quorumlock_testkit::{RedisCluster, SentinelDeployment, ShardedCluster};

use crate::options::Options;
use crate::stats::{fmt_rate, fmt_us, process_cpu, quantile_us};

/// Tasks, each on a resource of its own.
const TASKS: usize = 64;

/// One measured run of one deployment.
struct Measured {
    ops: u64,
    /// Cycles that failed because nodes did not answer in time (a loaded machine).
    errors: u64,
    /// The first failure of another kind: with one resource per task nothing may refuse.
    unexpected: Option<String>,
    elapsed: Duration,
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_op: Option<f64>,
}

/// Runs the scenario and prints its table; failures (errors, no progress) go to
/// `failures`.
pub async fn run(options: &Options, failures: &mut Vec<String>) {
    println!("== sharding: {TASKS} tasks on distinct resources, 3 standalone masters vs 3 clusters of 3 masters");
    let (standalone, a, b, c) = tokio::join!(
        RedisCluster::start(3),
        ShardedCluster::start(3, 0),
        ShardedCluster::start(3, 0),
        ShardedCluster::start(3, 0),
    );
    let standalone = standalone.expect("start 3 redis-server nodes");
    let clusters = [
        a.expect("start a cluster"),
        b.expect("start a cluster"),
        c.expect("start a cluster"),
    ];
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(500))
        .retry_count(0)
        .build()
        .expect("valid config");
    let cluster_urls: Vec<String> = clusters.iter().map(ShardedCluster::url).collect();
    let deployments = [
        ("3 standalone", standalone.urls()),
        ("3 clusters x3", cluster_urls),
    ];
    let window = options.window(Duration::from_secs(4));
    let mut runs: BTreeMap<&str, Vec<Measured>> = BTreeMap::new();
    for rep in 0..options.reps {
        let mut order: Vec<&(&str, Vec<String>)> = deployments.iter().collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for (label, urls) in order {
            let lock = Redlock::connect(urls, config.clone())
                .await
                .expect("connect the lock");
            let measured = measure(lock, window).await;
            println!(
                "   rep {rep} {label:<14} {:>10} p50 {:>9} p99 {:>9} cpu/op {:>9} errors {}",
                fmt_rate(Some(measured.ops as f64 / measured.elapsed.as_secs_f64())),
                fmt_us(Some(measured.p50_us)),
                fmt_us(Some(measured.p99_us)),
                fmt_us(measured.cpu_us_per_op),
                measured.errors,
            );
            if let Some(error) = &measured.unexpected {
                failures.push(format!("sharding {label}: {error}"));
            }
            if measured.ops == 0 {
                failures.push(format!("sharding {label}: no operation completed"));
            }
            runs.entry(label).or_default().push(measured);
        }
    }
    for (label, measured) in &runs {
        let rates: Vec<f64> = measured
            .iter()
            .map(|m| m.ops as f64 / m.elapsed.as_secs_f64())
            .collect();
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        println!(
            "   median {label:<14} {:>10} p50 {:>9} p99 {:>9} cpu/op {:>9}",
            fmt_rate(Some(median(rates))),
            fmt_us(Some(median(measured.iter().map(|m| m.p50_us).collect()))),
            fmt_us(Some(median(measured.iter().map(|m| m.p99_us).collect()))),
            fmt_us(
                measured
                    .iter()
                    .filter_map(|m| m.cpu_us_per_op)
                    .reduce(f64::min)
            ),
        );
    }
    for (i, cluster) in clusters.iter().enumerate() {
        let mut per_master = [0_usize; 3];
        for task in 0..TASKS {
            let key = format!("{{{}}}", resource(task));
            match cluster.owner_of(&key).await {
                Ok(owner) if owner < 3 => per_master[owner] += 1,
                other => failures.push(format!("sharding: no owner for {key}: {other:?}")),
            }
        }
        println!(
            "   keys of cluster {i} per master: {per_master:?} (each standalone master holds all {TASKS})"
        );
    }
}

/// The cost of replica acknowledgements: one task locking and releasing on a master with
/// one replica, without and with `WAIT 1` after each grant, in turn.
pub async fn replica_acks(options: &Options, failures: &mut Vec<String>) {
    println!("== replica acks: 1 task, a master with 1 replica, without and with WAIT 1");
    let deployment = SentinelDeployment::start(1)
        .await
        .expect("start a master and its replica");
    let plain = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(200))
        .retry_count(0)
        .build()
        .expect("valid config");
    let master = Nodes::new(deployment.server(0).url()).expect("the master's URL");
    let acked = master
        .clone()
        .replica_acks(ReplicaAcks::new(1, Duration::from_millis(100)));
    let window = options.window(Duration::from_secs(2));
    for rep in 0..options.reps {
        let mut order = [("no WAIT", &master), ("WAIT 1", &acked)];
        if rep % 2 == 1 {
            order.reverse();
        }
        for (label, nodes) in order {
            let lock = RedisLock::connect(nodes.clone(), plain.clone())
                .await
                .expect("connect the lock");
            let measured = measure_one(&lock, window).await;
            println!(
                "   rep {rep} {label:<8} {:>10} p50 {:>9} p99 {:>9} errors {}",
                fmt_rate(Some(measured.ops as f64 / measured.elapsed.as_secs_f64())),
                fmt_us(Some(measured.p50_us)),
                fmt_us(Some(measured.p99_us)),
                measured.errors,
            );
            if measured.errors > 0 || measured.ops == 0 {
                failures.push(format!(
                    "replica acks {label}: {} ops, {} errors",
                    measured.ops, measured.errors
                ));
            }
        }
    }
}

/// One task locking and releasing one resource for `window`.
async fn measure_one<L: DistributedLock>(lock: &L, window: Duration) -> Measured {
    let started = Instant::now();
    let (hist, ops, errors, unexpected) = cycles(lock, "acked", started + window).await;
    Measured {
        ops,
        errors,
        unexpected,
        elapsed: started.elapsed(),
        p50_us: quantile_us(&hist, 0.5).unwrap_or(0.0),
        p99_us: quantile_us(&hist, 0.99).unwrap_or(0.0),
        cpu_us_per_op: None,
    }
}

/// What [`cycles`] measured: the latencies of the completed cycles, their number, the
/// number that failed for nodes that did not answer, and the first other failure.
type Cycles = (Histogram<u64>, u64, u64, Option<String>);

/// Locks and releases `resource` until `deadline`.
async fn cycles<L: DistributedLock>(lock: &L, resource: &str, deadline: Instant) -> Cycles {
    let mut hist = histogram();
    let (mut ops, mut errors, mut unexpected) = (0_u64, 0_u64, None);
    while Instant::now() < deadline {
        let op = Instant::now();
        let cycle = match lock.try_acquire(resource).await {
            Ok(guard) => guard.release().await,
            Err(error) => Err(error),
        };
        match cycle {
            Ok(()) => {
                record(&mut hist, op.elapsed());
                ops += 1;
            }
            // Nodes that failed to answer, and no refusal: the machine was too busy.
            Err(error)
                if error.tally().is_some_and(|tally| {
                    tally.refused.is_empty() && !tally.failures.is_empty()
                }) =>
            {
                errors += 1;
            }
            Err(error) => {
                errors += 1;
                unexpected.get_or_insert_with(|| error.to_string());
            }
        }
    }
    (hist, ops, errors, unexpected)
}

fn resource(task: usize) -> String {
    format!("shard:{task}")
}

/// `TASKS` tasks locking and releasing their own resource for `window`.
async fn measure(lock: Redlock, window: Duration) -> Measured {
    let lock = Arc::new(lock);
    let cpu_before = process_cpu();
    let started = Instant::now();
    let deadline = started + window;
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let lock = Arc::clone(&lock);
            tokio::spawn(async move { cycles(&*lock, &resource(task), deadline).await })
        })
        .collect();
    let mut hist = histogram();
    let (mut ops, mut errors, mut unexpected) = (0, 0, None);
    for task in tasks {
        let (task_hist, task_ops, task_errors, task_unexpected) =
            task.await.expect("a sharding task");
        merge(&mut hist, &task_hist);
        ops += task_ops;
        errors += task_errors;
        unexpected = unexpected.or(task_unexpected);
    }
    let elapsed = started.elapsed();
    let cpu_us_per_op = match (cpu_before, process_cpu()) {
        (Some(before), Some(after)) if ops > 0 => {
            Some((after - before).as_secs_f64() * 1e6 / ops as f64)
        }
        _ => None,
    };
    Measured {
        ops,
        errors,
        unexpected,
        elapsed,
        p50_us: quantile_us(&hist, 0.5).unwrap_or(0.0),
        p99_us: quantile_us(&hist, 0.99).unwrap_or(0.0),
        cpu_us_per_op,
    }
}
