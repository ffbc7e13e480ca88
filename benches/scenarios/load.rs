//! One measured run: a scenario's load driven through one contender's client, timed, and
//! counted (operations, errors, CPU time, acquisition rounds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_testkit::measure::{self, Histogram};
use quorumlock_testkit::RedisCluster;
use redis::AsyncCommands;

use crate::clients::{Client, Contender};
use crate::options::Options;
use crate::scenarios::{config_for, Load, Nodes, Scenario, NODES, SLOW_NODE};
use crate::stats::{self, Outcome, Run};

/// Acquire-release cycles of each client before its run, not measured.
const WARM_UP_CYCLES: usize = 20;

/// Runs `contender` through `scenario` on `urls` (repetition `rep`).
pub async fn run_one(
    options: &Options,
    cluster: &mut RedisCluster,
    scenario: &Scenario,
    contender: Contender,
    urls: &[String],
    rep: usize,
) -> Run {
    let config = config_for(scenario);
    let window = options.window(scenario.window);
    let prefix = format!("{}:{}:{rep}", scenario.id, contender.label());
    let cpu: Option<Duration>;
    let mut server_cpu: Option<Duration> = None;
    let server_pids: Vec<u32> = cluster
        .nodes()
        .iter()
        .filter_map(|node| node.pid())
        .collect();
    let mut run = match scenario.load {
        Load::Cycles { tasks } => {
            let client = Arc::new(Client::connect(contender, urls, &config).await);
            warm_up(&client, &prefix).await;
            if scenario.nodes == Nodes::OneFrozen {
                cluster.node_mut(SLOW_NODE).freeze().await.expect("freeze");
            }
            let before = client.metrics();
            let cpu_before = stats::process_cpu();
            let mut run = run_cycles(
                Arc::clone(&client),
                &prefix,
                tasks,
                window,
                options.op_timeout,
            )
            .await;
            run.rounds_per_acquire = rounds_per_acquire(
                before.into_iter().collect(),
                client.metrics().into_iter().collect(),
            );
            cpu = cpu_before
                .zip(stats::process_cpu())
                .map(|(a, b)| b.saturating_sub(a));
            if scenario.nodes == Nodes::OneFrozen {
                cluster.node_mut(SLOW_NODE).thaw().await.expect("thaw");
                drop(client);
                cluster.flush_all().await.expect("flush after thaw");
            } else {
                run.keys_left = keys_left(cluster, &prefix, &[client], config.ttl()).await;
            }
            run
        }
        Load::Contended { tasks, shared } => {
            // Without a lock, clients would race on the counter: the ceiling is one client.
            let tasks = if contender == Contender::NoLock {
                1
            } else {
                tasks
            };
            let mut clients = Vec::with_capacity(tasks);
            if shared {
                // One lock object for every task, as the tasks of one service share it.
                let client = Arc::new(Client::connect(contender, urls, &config).await);
                warm_up(&client, &prefix).await;
                clients.resize(tasks, client);
            } else {
                for _ in 0..tasks {
                    let client = Client::connect(contender, urls, &config).await;
                    warm_up(&client, &prefix).await;
                    clients.push(Arc::new(client));
                }
            }
            let counter = cluster
                .node(0)
                .client()
                .expect("counter client")
                .get_multiplexed_async_connection()
                .await
                .expect("counter connection");
            let before: Vec<_> = clients.iter().filter_map(|c| c.metrics()).collect();
            let servers_before = stats::processes_cpu(&server_pids);
            let cpu_before = stats::process_cpu();
            let mut run = run_contended(
                clients.clone(),
                counter,
                &prefix,
                window,
                options.op_timeout,
            )
            .await;
            cpu = cpu_before
                .zip(stats::process_cpu())
                .map(|(a, b)| b.saturating_sub(a));
            server_cpu = servers_before
                .zip(stats::processes_cpu(&server_pids))
                .map(|(a, b)| b.saturating_sub(a));
            let after: Vec<_> = clients.iter().filter_map(|c| c.metrics()).collect();
            run.rounds_per_acquire = rounds_per_acquire(before, after);
            let distinct = if shared { &clients[..1] } else { &clients[..] };
            run.keys_left = keys_left(cluster, &prefix, distinct, config.ttl()).await;
            run
        }
    };
    // The process's CPU time comes in 10 ms ticks: below 100 ms it says little.
    if run.ops > 0 {
        run.cpu_us_per_op = cpu
            .filter(|cpu| *cpu >= Duration::from_millis(100))
            .map(|cpu| cpu.as_secs_f64() * 1e6 / run.ops as f64);
        run.server_cpu_us_per_op = server_cpu
            .filter(|cpu| *cpu >= Duration::from_millis(100))
            .map(|cpu| cpu.as_secs_f64() * 1e6 / run.ops as f64);
    }
    run
}

/// Prints a load task's first failed operation, so that an error count in the results
/// comes with its cause (the later ones of the task are only counted).
fn report_first_error(errors_so_far: u64, what: &str, error: &str) {
    if errors_so_far == 0 {
        eprintln!("   a task's first failed {what}: {error}");
    }
}

/// quorumlock's acquisition rounds per successful acquisition between two snapshots.
fn rounds_per_acquire(
    before: Vec<quorumlock::LockMetrics>,
    after: Vec<quorumlock::LockMetrics>,
) -> Option<f64> {
    let sum = |metrics: &[quorumlock::LockMetrics], f: fn(&quorumlock::LockMetrics) -> u64| {
        metrics.iter().map(f).sum::<u64>()
    };
    let attempts = sum(&after, |m| m.attempts) - sum(&before, |m| m.attempts);
    // A lock passed within the process is an acquisition too, one without a round.
    let acquired = sum(&after, |m| m.acquired + m.passed) - sum(&before, |m| m.acquired + m.passed);
    (acquired > 0).then(|| attempts as f64 / acquired as f64)
}

/// How long the lock keys a run left may take to go: far more than a release's unlock
/// takes to be answered, or dropped by its node's keeper (the request timeout, plus the
/// connect timeout and two request timeouts the keeper drives it for).
const KEYS_SETTLE: Duration = Duration::from_secs(10);

/// The check that a quorumlock run left no lock key behind, beyond what its clients said
/// they left: each unlock that no round awaited any more and that was dropped unanswered
/// (`LockMetrics::unawaited_dropped`, its node was too slow) may leave its key on that
/// node until the key's TTL. So the run's lock keys on the nodes must come to at most that
/// many, each with a TTL of at most the lock's; waits (up to [`KEYS_SETTLE`]) while the
/// last unlocks are still on their way. `None` for the contenders without metrics.
async fn keys_left(
    cluster: &RedisCluster,
    prefix: &str,
    clients: &[Arc<Client>],
    ttl: Duration,
) -> Option<Result<String, String>> {
    clients.first()?.metrics()?;
    let counter = format!("{prefix}:counter");
    let pattern = format!("{prefix}:*");
    let mut connections = Vec::with_capacity(NODES);
    for node in 0..NODES {
        let client = cluster.node(node).client().expect("node client");
        connections.push(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection to count the keys left"),
        );
    }
    let settle_by = Instant::now() + KEYS_SETTLE;
    loop {
        // Read before the keys: a drop counted after the keys were listed is not needed.
        let dropped: u64 = clients
            .iter()
            .filter_map(|client| client.metrics())
            .map(|metrics| metrics.unawaited_dropped)
            .sum();
        let mut left = 0u64;
        for (node, connection) in connections.iter_mut().enumerate() {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(connection)
                .await
                .expect("KEYS");
            for key in keys.iter().filter(|key| **key != counter) {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(key)
                    .query_async(connection)
                    .await
                    .expect("PTTL");
                // -2: gone since listed.
                if pttl == -2 {
                    continue;
                }
                if pttl < 0 || pttl as u128 > ttl.as_millis() {
                    return Some(Err(format!(
                        "key {key} on node {node} left with PTTL {pttl} ms: it must expire within the TTL ({ttl:?})"
                    )));
                }
                left += 1;
            }
        }
        if left <= dropped {
            return Some(Ok(format!(
                "{left} lock keys left, {dropped} unlocks dropped unanswered"
            )));
        }
        if Instant::now() >= settle_by {
            return Some(Err(format!(
                "{left} lock keys left on the nodes {KEYS_SETTLE:?} after the run, but only \
                 {dropped} unlocks were dropped unanswered"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Opens the connections and loads the scripts; not measured.
async fn warm_up(client: &Client, prefix: &str) {
    for i in 0..WARM_UP_CYCLES {
        client
            .cycle(&format!("{prefix}:warm:{i}"))
            .await
            .expect("warm-up cycle");
    }
}

/// `tasks` tasks each acquiring and releasing fresh resources until `window` has passed;
/// an operation taking longer than `op_timeout` abandons the run.
async fn run_cycles(
    client: Arc<Client>,
    prefix: &str,
    tasks: usize,
    window: Duration,
    op_timeout: Duration,
) -> Run {
    let started = Instant::now();
    let deadline = started + window;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = Arc::clone(&client);
            let prefix = format!("{prefix}:{task}");
            tokio::spawn(async move {
                let mut hist = measure::histogram();
                let (mut ops, mut errors, mut i) = (0u64, 0u64, 0u64);
                let mut outcome = Outcome::Completed;
                while Instant::now() < deadline {
                    let resource = format!("{prefix}:{i}");
                    i += 1;
                    let t0 = Instant::now();
                    match tokio::time::timeout(op_timeout, client.cycle(&resource)).await {
                        Ok(Ok(())) => {
                            measure::record(&mut hist, t0.elapsed());
                            ops += 1;
                        }
                        Ok(Err(error)) => {
                            report_first_error(errors, "cycle", &error);
                            errors += 1;
                        }
                        Err(_) => {
                            outcome = Outcome::TimedOut(op_timeout);
                            break;
                        }
                    }
                }
                (hist, ops, errors, outcome, Instant::now())
            })
        })
        .collect();
    collect(started, handles, None).await
}

/// Each client (its own connections, like a separate process) loops: acquire the shared
/// lock (blocking), read the counter, write it back plus one, release. Records the wait for
/// the lock (nothing for `Client::NoLock`, which has no wait); checks at the end that the
/// counter equals the number of increments.
async fn run_contended(
    clients: Vec<Arc<Client>>,
    counter: redis::aio::MultiplexedConnection,
    prefix: &str,
    window: Duration,
    op_timeout: Duration,
) -> Run {
    let lock_name = format!("{prefix}:lock");
    let counter_key = format!("{prefix}:counter");
    let mut setup = counter.clone();
    let () = setup.set(&counter_key, 0).await.expect("reset counter");
    let increments = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Each client's acquisitions after it found the lock contended, and their rounds: the
    // steady state. The acquisition that found out tried a plain attempt first (the lock
    // could not know yet): each client's first that took more than one round (or, if none
    // did, its first). Per client, so only where each task has a lock of its own.
    let own_locks = clients.len() < 2 || !Arc::ptr_eq(&clients[0], &clients[1]);
    let later = Arc::new([
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    ]);
    let started = Instant::now();
    let deadline = started + window;
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let lock_name = lock_name.clone();
            let counter_key = counter_key.clone();
            let mut counter = counter.clone();
            let increments = Arc::clone(&increments);
            let later = Arc::clone(&later);
            tokio::spawn(async move {
                let waits = !matches!(*client, Client::NoLock);
                let attempts = || client.metrics().map(|metrics| metrics.attempts);
                let mut hist = measure::histogram();
                let mut rounds: Vec<u64> = Vec::new();
                let (mut ops, mut errors) = (0u64, 0u64);
                let mut outcome = Outcome::Completed;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let attempts_before = attempts();
                    let held =
                        match tokio::time::timeout(op_timeout, client.acquire(&lock_name)).await {
                            Ok(Ok(held)) => held,
                            Ok(Err(error)) => {
                                report_first_error(errors, "acquire", &error);
                                errors += 1;
                                continue;
                            }
                            Err(_) => {
                                outcome = Outcome::TimedOut(op_timeout);
                                break;
                            }
                        };
                    if waits {
                        measure::record(&mut hist, t0.elapsed());
                    }
                    if let (true, Some(before), Some(after)) =
                        (own_locks, attempts_before, attempts())
                    {
                        rounds.push(after - before);
                    }
                    let value: i64 = counter.get(&counter_key).await.expect("GET counter");
                    let () = counter
                        .set(&counter_key, value + 1)
                        .await
                        .expect("SET counter");
                    increments.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    match client.release(held).await {
                        Ok(()) => ops += 1,
                        Err(error) => {
                            report_first_error(errors, "release", &error);
                            errors += 1;
                        }
                    }
                }
                let found_out = rounds.iter().position(|&r| r > 1).unwrap_or(0);
                let steady = rounds.get(found_out + 1..).unwrap_or_default();
                let ordering = std::sync::atomic::Ordering::Relaxed;
                later[0].fetch_add(steady.iter().sum(), ordering);
                later[1].fetch_add(steady.len() as u64, ordering);
                (hist, ops, errors, outcome, Instant::now())
            })
        })
        .collect();
    let mut run = collect(started, handles, None).await;
    let later_attempts = later[0].load(std::sync::atomic::Ordering::Relaxed);
    let later_acquisitions = later[1].load(std::sync::atomic::Ordering::Relaxed);
    run.steady_rounds =
        (later_acquisitions > 0).then(|| later_attempts as f64 / later_acquisitions as f64);
    let mut check = counter.clone();
    let value: i64 = check.get(&counter_key).await.expect("read counter");
    let expected = increments.load(std::sync::atomic::Ordering::SeqCst);
    run.check = Some(if u64::try_from(value).ok() == Some(expected) {
        Ok(format!("counter {value} exact"))
    } else {
        Err(format!(
            "counter is {value}, expected {expected}: mutual exclusion broken"
        ))
    });
    run
}

/// What one load task measured: latencies, operations, errors, outcome, and when it ended.
type TaskResult = (Histogram<u64>, u64, u64, Outcome, Instant);

/// The load tasks' results, merged into one run.
async fn collect(
    started: Instant,
    handles: Vec<tokio::task::JoinHandle<TaskResult>>,
    check: Option<Result<String, String>>,
) -> Run {
    let mut run = Run {
        ops: 0,
        elapsed: Duration::ZERO,
        hist: measure::histogram(),
        outcome: Outcome::Completed,
        errors: 0,
        check,
        per_task: (u64::MAX, 0),
        rounds_per_acquire: None,
        steady_rounds: None,
        cpu_us_per_op: None,
        server_cpu_us_per_op: None,
        keys_left: None,
    };
    for handle in handles {
        let (hist, ops, errors, outcome, ended) = handle.await.expect("load task panicked");
        run.per_task = (run.per_task.0.min(ops), run.per_task.1.max(ops));
        measure::merge(&mut run.hist, &hist);
        run.ops += ops;
        run.errors += errors;
        run.elapsed = run.elapsed.max(ended - started);
        if outcome != Outcome::Completed {
            run.outcome = outcome;
        }
    }
    run
}
