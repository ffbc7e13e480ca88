//! The no-oversell check: workers sell from one stock kept in a separate Redis server,
//! through a deliberately non-atomic read-pause-write under the lock, while a fault schedule
//! kills, freezes, slows, blackholes, partitions, resets and restarts lock nodes (a minority
//! of them at any time for the quorum lock; the one node, in turns, for the single-node lock).
//!
//! Workers run as tokio tasks in this process and as separate OS processes: this very test
//! binary, re-executed with `QUORUMLOCK_OVERSELL_WORKER` set, runs only
//! [`oversell_worker_process`], which then acts as a worker.
//!
//! Asserted: the stock never goes negative, the final stock equals the initial stock minus
//! the recorded sales, no two workers were ever inside the critical section together, every
//! worker finished or gave up with a clear error, and no lock key outlives its TTL.
//!
//! The soak (`oversell_soak`, ignored by default) runs rounds of the same check for
//! `QUORUMLOCK_SOAK_SECS` seconds with a random fault schedule from a printed seed
//! (`QUORUMLOCK_SOAK_SEED` replays it). See `docs/chaos.md`.

use std::time::Duration;

use crate::common::{no_lock_key_outlives_ttl, proxied_with, LOCK_KEYS, LOCK_PREFIX};
use quorumlock::{DistributedLock, LockConfig, LockError, RedisLock, Redlock};
use quorumlock_testkit::{
    Direction, NodeOptions, NodeState, Persistence, ProxiedCluster, RedisCluster,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// Set (to the worker's id) in the environment of a worker process.
const WORKER_ENV: &str = "QUORUMLOCK_OVERSELL_WORKER";
/// The worker's parameters, `;`-separated (see [`Spec::encode`]).
const SPEC_ENV: &str = "QUORUMLOCK_OVERSELL_SPEC";
/// How a worker process reports: one line starting with this, tab-separated fields.
const OUTCOME_MARK: &str = "OVERSELL-OUTCOME";

/// The lock's TTL: long against a critical section of a few milliseconds.
const TTL: Duration = Duration::from_secs(2);
/// A holder writes only while at least this much validity is left; otherwise it abandons the
/// sale (the lock might be lost before the write lands).
const WRITE_MARGIN: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------
// Workers.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `Redlock` over 5 nodes.
    Quorum,
    /// `RedisLock` on 1 node.
    Single,
}

/// What a worker needs: which lock, where the stock is, how long it may try.
#[derive(Clone, Debug)]
struct Spec {
    id: String,
    kind: Kind,
    lock_urls: Vec<String>,
    stock_url: String,
    /// The stock key; the sales list, the inside-counter are named after it.
    stock_key: String,
    /// The lock's resource: the same for every worker, except in the negative control.
    resource: String,
    budget: Duration,
}

impl Spec {
    fn encode(&self) -> String {
        let kind = match self.kind {
            Kind::Quorum => "quorum",
            Kind::Single => "single",
        };
        format!(
            "{kind};{};{};{};{};{}",
            self.stock_url,
            self.stock_key,
            self.resource,
            self.budget.as_millis(),
            self.lock_urls.join(",")
        )
    }

    fn decode(id: String, text: &str) -> Spec {
        let fields: Vec<&str> = text.split(';').collect();
        assert_eq!(fields.len(), 6, "malformed {SPEC_ENV}: {text}");
        Spec {
            id,
            kind: if fields[0] == "quorum" {
                Kind::Quorum
            } else {
                Kind::Single
            },
            stock_url: fields[1].to_owned(),
            stock_key: fields[2].to_owned(),
            resource: fields[3].to_owned(),
            budget: Duration::from_millis(fields[4].parse().expect("budget in ms")),
            lock_urls: fields[5].split(',').map(str::to_owned).collect(),
        }
    }

    fn sales_key(&self) -> String {
        format!("{}:sales", self.stock_key)
    }

    fn inside_key(&self) -> String {
        format!("{}:inside", self.stock_key)
    }
}

/// How one worker ended.
#[derive(Clone, Debug, Default)]
struct Outcome {
    id: String,
    sales: u64,
    /// Acquisitions that failed (each with a retryable, clear error).
    lock_errors: u64,
    /// Sales given up under the lock because too little validity was left to write.
    abandoned: u64,
    /// Times the worker found someone else inside the critical section.
    overlaps: u64,
    /// Releases a quorum did not confirm.
    release_errors: u64,
    /// Sold out (`None`), or why it gave up.
    gave_up: Option<String>,
    /// The last lock error seen, for the report.
    last_lock_error: Option<String>,
}

impl Outcome {
    fn line(&self) -> String {
        let clean = |s: &Option<String>| s.clone().unwrap_or_default().replace(['\t', '\n'], " ");
        format!(
            "{OUTCOME_MARK}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.id,
            self.sales,
            self.lock_errors,
            self.abandoned,
            self.overlaps,
            self.release_errors,
            clean(&self.gave_up),
            clean(&self.last_lock_error),
        )
    }

    fn parse(line: &str) -> Option<Outcome> {
        // The test harness may have printed "test oversell_worker_process ... " before it.
        let line = &line[line.find(OUTCOME_MARK)?..];
        let fields: Vec<&str> = line.split('\t').skip(1).collect();
        if fields.len() != 8 {
            return None;
        }
        let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Some(Outcome {
            id: fields[0].to_owned(),
            sales: fields[1].parse().ok()?,
            lock_errors: fields[2].parse().ok()?,
            abandoned: fields[3].parse().ok()?,
            overlaps: fields[4].parse().ok()?,
            release_errors: fields[5].parse().ok()?,
            gave_up: text(fields[6]),
            last_lock_error: text(fields[7]),
        })
    }
}

fn worker_config() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(50 * MS)
        .retry_count(20)
        .retry_delay(20 * MS)
        .retry_jitter(15 * MS)
        .key_prefix(LOCK_PREFIX)
        .build()
        .expect("valid worker config")
}

/// Runs one worker with the lock `spec` names.
async fn worker(spec: Spec) -> Outcome {
    match spec.kind {
        Kind::Quorum => match Redlock::connect(&spec.lock_urls, worker_config()).await {
            Ok(lock) => sell(lock, &spec).await,
            Err(err) => gave_up(&spec, format!("cannot build the lock: {err}")),
        },
        Kind::Single => match RedisLock::connect(&spec.lock_urls[0], worker_config()).await {
            Ok(lock) => sell(lock, &spec).await,
            Err(err) => gave_up(&spec, format!("cannot build the lock: {err}")),
        },
    }
}

fn gave_up(spec: &Spec, why: String) -> Outcome {
    Outcome {
        id: spec.id.clone(),
        gave_up: Some(why),
        ..Outcome::default()
    }
}

/// Whether a failed acquisition explains itself: retryable, about our resource, and naming
/// the failed nodes when nodes failed.
fn is_clear(err: &LockError, resource: &str) -> bool {
    let text = err.to_string();
    let names_nodes = err
        .tally()
        .is_none_or(|tally| tally.failures.iter().all(|f| text.contains(&f.node)));
    err.is_retryable() && err.resource() == Some(resource) && names_nodes
}

/// Sells until the stock is gone, the budget is spent, or an unclear error happens.
async fn sell<L: DistributedLock>(lock: L, spec: &Spec) -> Outcome {
    let mut outcome = Outcome {
        id: spec.id.clone(),
        ..Outcome::default()
    };
    let stock = match redis::Client::open(spec.stock_url.as_str()) {
        Ok(client) => client.get_multiplexed_async_connection().await,
        Err(err) => Err(err),
    };
    let mut stock = match stock {
        Ok(connection) => connection,
        Err(err) => return gave_up(spec, format!("stock server: {err}")),
    };
    let deadline = Instant::now() + spec.budget;
    loop {
        if Instant::now() >= deadline {
            outcome.gave_up = Some(format!(
                "not sold out after {:?}; last lock error: {}",
                spec.budget,
                outcome.last_lock_error.as_deref().unwrap_or("none")
            ));
            return outcome;
        }
        let guard = match lock.acquire(&spec.resource).await {
            Ok(guard) => guard,
            Err(err) => {
                outcome.lock_errors += 1;
                outcome.last_lock_error = Some(err.to_string());
                if !is_clear(&err, &spec.resource) {
                    outcome.gave_up = Some(format!("unclear lock error: {err:?}"));
                    return outcome;
                }
                continue;
            }
        };
        // The critical section: a non-atomic read, pause, write.
        let result: redis::RedisResult<bool> = async {
            let inside: i64 = redis::cmd("INCR")
                .arg(spec.inside_key())
                .query_async(&mut stock)
                .await?;
            if inside != 1 {
                outcome.overlaps += 1;
            }
            let left: i64 = redis::cmd("GET")
                .arg(&spec.stock_key)
                .query_async(&mut stock)
                .await?;
            if left <= 0 {
                let () = redis::cmd("DECR")
                    .arg(spec.inside_key())
                    .query_async(&mut stock)
                    .await?;
                return Ok(true);
            }
            let pause = rand::rng().random_range(2..8);
            tokio::time::sleep(pause * MS).await;
            if guard.validity() < WRITE_MARGIN {
                outcome.abandoned += 1;
                let () = redis::cmd("DECR")
                    .arg(spec.inside_key())
                    .query_async(&mut stock)
                    .await?;
                return Ok(false);
            }
            let () = redis::pipe()
                .atomic()
                .set(&spec.stock_key, left - 1)
                .ignore()
                .rpush(spec.sales_key(), &spec.id)
                .ignore()
                .decr(spec.inside_key(), 1)
                .ignore()
                .query_async(&mut stock)
                .await?;
            outcome.sales += 1;
            Ok(false)
        }
        .await;
        if guard.release().await.is_err() {
            outcome.release_errors += 1;
        }
        match result {
            Ok(true) => return outcome, // sold out
            Ok(false) => {}
            Err(err) => {
                outcome.gave_up = Some(format!("stock server: {err}"));
                return outcome;
            }
        }
    }
}

/// The entry point of worker processes; does nothing in a normal test run.
#[test]
fn oversell_worker_process() {
    let Ok(id) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec = Spec::decode(id, &std::env::var(SPEC_ENV).expect("the worker's spec"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(worker(spec));
    println!("\n{}", outcome.line());
}

/// Starts a worker process: this test binary, running only [`oversell_worker_process`].
fn spawn_process_worker(spec: &Spec) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "oversell::oversell_worker_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_ENV, &spec.id)
        .env(SPEC_ENV, spec.encode())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker process")
}

async fn process_outcome(id: String, child: tokio::process::Child, limit: Duration) -> Outcome {
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("worker process {id} did not finish within {limit:?}"))
        .expect("wait for the worker process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "worker process {id} failed: {}\n{stdout}",
        output.status
    );
    stdout
        .lines()
        .find_map(Outcome::parse)
        .unwrap_or_else(|| panic!("worker process {id} reported nothing:\n{stdout}"))
}

// ---------------------------------------------------------------------------
// Fault schedules.
// ---------------------------------------------------------------------------

/// One fault on one node for a while.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// SIGKILL; restarted (reloading its AOF) when the episode ends.
    Crash,
    /// SIGKILL and an immediate restart.
    Bounce,
    /// SIGSTOP; SIGCONT when the episode ends.
    Freeze,
    /// Latency on both directions, above (or below) the node timeout.
    Slow(Duration, Duration),
    /// Requests read, never answered, until healed.
    Blackhole,
    /// New connections refused and open ones reset, until healed.
    Partition,
    /// Open connections reset, once.
    Reset,
}

const ALL_FAULTS: [Fault; 8] = [
    Fault::Freeze,
    Fault::Slow(Duration::from_millis(80), Duration::from_millis(40)),
    Fault::Crash,
    Fault::Blackhole,
    Fault::Reset,
    Fault::Partition,
    Fault::Bounce,
    Fault::Slow(Duration::from_millis(5), Duration::from_millis(10)),
];

/// Faults started one after the other on random healthy nodes, never more than
/// `max_faulty` at once, each lasting a random while; a bounded number of them.
struct Schedule {
    rng: StdRng,
    nodes: usize,
    max_faulty: usize,
    /// Cycle through every kind of fault in order (CI) rather than at random (soak).
    cover_all: bool,
    max_faults: usize,
    /// Pause between two fault starts.
    gap: (u64, u64),
    /// How long a fault lasts.
    length: (u64, u64),
}

impl Schedule {
    fn describe(&self) -> String {
        format!(
            "{} node(s), at most {} faulty, up to {} faults",
            self.nodes, self.max_faulty, self.max_faults
        )
    }
}

/// A fault in progress: its node, its kind, when it ends.
struct Active {
    node: usize,
    fault: Fault,
    until: Instant,
}

/// Runs `schedule` against `cluster` until `done` resolves or the faults run out; then
/// ends every fault. Returns how many faults were injected.
async fn run_schedule(
    cluster: &mut ProxiedCluster,
    mut schedule: Schedule,
    done: &tokio::sync::Notify,
) -> usize {
    let mut active: Vec<Active> = Vec::new();
    let mut injected = 0;
    let started = Instant::now();
    let mut next_start = Instant::now() + 50 * MS;
    let finished = done.notified();
    tokio::pin!(finished);
    loop {
        let next_end = active.iter().map(|a| a.until).min();
        let wake = next_end.map_or(next_start, |end| end.min(next_start));
        tokio::select! {
            () = &mut finished => break,
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        // End the faults that are due.
        let (due, rest): (Vec<Active>, Vec<Active>) =
            active.into_iter().partition(|a| a.until <= now);
        active = rest;
        for ended in due {
            end_fault(cluster, ended.node, ended.fault).await;
        }
        if now < next_start {
            continue;
        }
        next_start =
            now + Duration::from_millis(schedule.rng.random_range(schedule.gap.0..=schedule.gap.1));
        if injected >= schedule.max_faults || active.len() >= schedule.max_faulty {
            if injected >= schedule.max_faults && active.is_empty() {
                break;
            }
            continue;
        }
        let healthy: Vec<usize> = (0..schedule.nodes)
            .filter(|node| active.iter().all(|a| a.node != *node))
            .collect();
        let node = healthy[schedule.rng.random_range(0..healthy.len())];
        let fault = if schedule.cover_all {
            ALL_FAULTS[injected % ALL_FAULTS.len()]
        } else {
            ALL_FAULTS[schedule.rng.random_range(0..ALL_FAULTS.len())]
        };
        let length = Duration::from_millis(
            schedule
                .rng
                .random_range(schedule.length.0..=schedule.length.1),
        );
        eprintln!(
            "  [{:>6.2}s] node {node}: {fault:?} for {length:?}",
            started.elapsed().as_secs_f64()
        );
        start_fault(cluster, node, fault).await;
        injected += 1;
        active.push(Active {
            node,
            fault,
            until: Instant::now() + length,
        });
    }
    for ended in active {
        end_fault(cluster, ended.node, ended.fault).await;
    }
    cluster.heal_all().await.expect("heal every node");
    injected
}

async fn start_fault(cluster: &mut ProxiedCluster, node: usize, fault: Fault) {
    match fault {
        Fault::Crash => cluster.node_mut(node).kill().await.unwrap(),
        Fault::Bounce => cluster.node_mut(node).restart().await.unwrap(),
        Fault::Freeze => cluster.node_mut(node).freeze().await.unwrap(),
        Fault::Slow(delay, jitter) => {
            cluster
                .proxy(node)
                .set_latency(Direction::Both, delay, jitter)
        }
        Fault::Blackhole => cluster.proxy(node).blackhole(true),
        Fault::Partition => cluster.proxy(node).partition().await.unwrap(),
        Fault::Reset => cluster.proxy(node).reset_all().await.unwrap(),
    }
}

async fn end_fault(cluster: &mut ProxiedCluster, node: usize, fault: Fault) {
    match fault {
        Fault::Crash => {
            if cluster.node(node).state() == NodeState::Stopped {
                cluster.node_mut(node).restart().await.unwrap();
            }
        }
        Fault::Freeze => cluster.node_mut(node).thaw().await.unwrap(),
        Fault::Slow(..) | Fault::Blackhole | Fault::Partition => {
            cluster.proxy(node).heal().await.unwrap()
        }
        Fault::Bounce | Fault::Reset => {}
    }
}

// ---------------------------------------------------------------------------
// The check.
// ---------------------------------------------------------------------------

/// One run of the check.
struct Run {
    kind: Kind,
    tasks: usize,
    processes: usize,
    initial_stock: i64,
    budget: Duration,
    schedule: Schedule,
}

/// What a run left behind.
struct Books {
    outcomes: Vec<Outcome>,
    /// The stock at the end.
    left: i64,
    /// The sales list, one entry (the seller's id) per sale.
    recorded: Vec<String>,
    /// How many faults were injected.
    faults: usize,
}

/// Runs the workers (every one locking `resource(id)`) against the fault schedule until
/// they all end, then reads the books.
async fn sell_out(
    cluster: &mut ProxiedCluster,
    stock: &RedisCluster,
    run: Run,
    round: usize,
    resource: impl Fn(&str) -> String,
) -> Books {
    let started = Instant::now();
    let stock_key = format!("stock:{round}");
    let template = Spec {
        id: String::new(),
        kind: run.kind,
        lock_urls: cluster.urls(),
        stock_url: stock.urls()[0].clone(),
        stock_key: stock_key.clone(),
        resource: String::new(),
        budget: run.budget,
    };
    let spec = |id: String| Spec {
        resource: resource(&id),
        id,
        ..template.clone()
    };
    stock
        .node(0)
        .set(&stock_key, &run.initial_stock.to_string(), None)
        .await
        .unwrap();
    eprintln!(
        "{:?} lock, stock {}, {} task and {} process workers; faults: {}",
        run.kind,
        run.initial_stock,
        run.tasks,
        run.processes,
        run.schedule.describe()
    );

    let tasks: Vec<_> = (0..run.tasks)
        .map(|i| tokio::spawn(worker(spec(format!("task-{i}")))))
        .collect();
    let processes: Vec<_> = (0..run.processes)
        .map(|i| {
            let spec = spec(format!("process-{i}"));
            (spec.id.clone(), spawn_process_worker(&spec))
        })
        .collect();
    let limit = run.budget + Duration::from_secs(30);
    let all_done = tokio::sync::Notify::new();
    let workers = async {
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(
                tokio::time::timeout(limit, task)
                    .await
                    .expect("a worker task did not finish")
                    .expect("a worker task panicked"),
            );
        }
        for (id, child) in processes {
            outcomes.push(process_outcome(id, child, limit).await);
        }
        all_done.notify_one();
        outcomes
    };
    let (outcomes, faults) = tokio::join!(workers, run_schedule(cluster, run.schedule, &all_done));

    let left: i64 = stock
        .node(0)
        .get(&stock_key)
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    let mut connection = stock
        .node(0)
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let recorded: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{stock_key}:sales"))
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await
        .unwrap();
    eprintln!(
        "{:?}: {} sales in {:?} under {faults} faults; stock left {left}",
        run.kind,
        recorded.len(),
        started.elapsed()
    );
    for outcome in &outcomes {
        eprintln!(
            "  {:<10} sales {:>3}, lock errors {:>3}, abandoned {}, releases unconfirmed {}, overlaps {}, {}{}",
            outcome.id,
            outcome.sales,
            outcome.lock_errors,
            outcome.abandoned,
            outcome.release_errors,
            outcome.overlaps,
            outcome.gave_up.as_deref().map_or("sold out".to_owned(), |why| format!("gave up: {why}")),
            outcome.last_lock_error.as_deref().map_or(String::new(), |e| format!("; last lock error: {e}")),
        );
    }
    Books {
        outcomes,
        left,
        recorded,
        faults,
    }
}

async fn check_no_oversell(
    cluster: &mut ProxiedCluster,
    stock: &RedisCluster,
    run: Run,
    round: usize,
) {
    let initial = run.initial_stock;
    let books = sell_out(cluster, stock, run, round, |_| "stock".to_owned()).await;
    let Books {
        outcomes,
        left,
        recorded,
        faults,
    } = books;
    let reported: u64 = outcomes.iter().map(|o| o.sales).sum();
    assert!(left >= 0, "oversold: stock is {left}");
    assert_eq!(
        recorded.len() as u64,
        reported,
        "every recorded sale was reported"
    );
    assert_eq!(
        left,
        initial - recorded.len() as i64,
        "lost update: stock {left} after {} sales",
        recorded.len()
    );
    for outcome in &outcomes {
        assert_eq!(
            outcome.overlaps, 0,
            "{}: found another worker inside",
            outcome.id
        );
        let theirs = recorded
            .iter()
            .filter(|seller| **seller == outcome.id)
            .count();
        assert_eq!(
            theirs as u64, outcome.sales,
            "{}'s recorded sales",
            outcome.id
        );
        if let Some(why) = &outcome.gave_up {
            // Allowed by the check, but only with a clear reason; the default run has the
            // budget to sell out, so this only shows on a badly overloaded machine.
            assert!(
                why.contains("not sold out") && why.contains("redis://"),
                "{}: unclear: {why}",
                outcome.id
            );
        }
    }
    assert!(faults >= 1, "the fault schedule never started");
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, TTL).await;
}

async fn lock_nodes(kind: Kind) -> ProxiedCluster {
    let nodes = match kind {
        Kind::Quorum => 5,
        Kind::Single => 1,
    };
    // Crashed nodes restart at once, so they must keep their keys: `appendfsync always`.
    // (A restart without persistence can break exclusion; see the chaos suite.)
    proxied_with(
        nodes,
        NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways),
    )
    .await
}

/// The quorum lock over 5 nodes, with up to 2 of them faulty at any time; every kind of fault
/// is injected at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_lock_never_oversells_under_minority_faults() {
    let mut cluster = lock_nodes(Kind::Quorum).await;
    let stock = RedisCluster::start(1).await.unwrap();
    let run = Run {
        kind: Kind::Quorum,
        tasks: 5,
        processes: 3,
        initial_stock: 150,
        budget: Duration::from_secs(40),
        schedule: Schedule {
            rng: StdRng::seed_from_u64(7),
            nodes: 5,
            max_faulty: 2,
            cover_all: true,
            max_faults: 32,
            gap: (100, 250),
            length: (150, 500),
        },
    };
    check_no_oversell(&mut cluster, &stock, run, 0).await;
}

/// The single-node lock, its one node faulted in turns (with healthy stretches between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_lock_never_oversells_under_faults() {
    let mut cluster = lock_nodes(Kind::Single).await;
    let stock = RedisCluster::start(1).await.unwrap();
    let run = Run {
        kind: Kind::Single,
        tasks: 4,
        processes: 2,
        initial_stock: 80,
        budget: Duration::from_secs(40),
        schedule: Schedule {
            rng: StdRng::seed_from_u64(11),
            nodes: 1,
            max_faulty: 1,
            cover_all: true,
            max_faults: 16,
            gap: (250, 450),
            length: (100, 250),
        },
    };
    check_no_oversell(&mut cluster, &stock, run, 0).await;
}

/// The check can fail: workers that each lock a resource of their own exclude nobody, and
/// the books show it (overlaps seen inside, lost updates in the stock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_catches_a_lock_that_does_not_exclude() {
    let mut cluster = lock_nodes(Kind::Quorum).await;
    let stock = RedisCluster::start(1).await.unwrap();
    let run = Run {
        kind: Kind::Quorum,
        tasks: 4,
        processes: 1,
        initial_stock: 40,
        budget: Duration::from_secs(20),
        schedule: Schedule {
            rng: StdRng::seed_from_u64(3),
            nodes: 5,
            max_faulty: 1,
            cover_all: true,
            max_faults: 1,
            gap: (100, 100),
            length: (100, 100),
        },
    };
    let books = sell_out(&mut cluster, &stock, run, 0, |id| format!("stock-of-{id}")).await;
    let overlaps: u64 = books.outcomes.iter().map(|o| o.overlaps).sum();
    let lost_updates = 40 - books.recorded.len() as i64 != books.left;
    assert!(overlaps > 0, "the inside-counter saw no overlap");
    assert!(lost_updates, "the stock shows no lost update");
    assert!(
        books.recorded.len() > 40,
        "no more sold than there was stock"
    );
}

/// The soak: rounds of the check, alternating both locks, with random fault schedules, for
/// `QUORUMLOCK_SOAK_SECS` seconds (default 60). The seed is printed; set
/// `QUORUMLOCK_SOAK_SEED` to replay a schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run with --ignored (QUORUMLOCK_SOAK_SECS, QUORUMLOCK_SOAK_SEED)"]
async fn oversell_soak() {
    let secs: u64 = std::env::var("QUORUMLOCK_SOAK_SECS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("QUORUMLOCK_SOAK_SECS: a number of seconds")
        })
        .unwrap_or(60);
    let seed: u64 = std::env::var("QUORUMLOCK_SOAK_SEED")
        .ok()
        .map(|s| s.parse().expect("QUORUMLOCK_SOAK_SEED: a number"))
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("soak for {secs} s with QUORUMLOCK_SOAK_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let until = Instant::now() + Duration::from_secs(secs);
    let stock = RedisCluster::start(1).await.unwrap();
    let mut quorum = lock_nodes(Kind::Quorum).await;
    let mut single = lock_nodes(Kind::Single).await;
    let mut round = 0;
    while Instant::now() < until {
        let kind = if round % 2 == 0 {
            Kind::Quorum
        } else {
            Kind::Single
        };
        let (cluster, nodes, max_faulty) = match kind {
            Kind::Quorum => (&mut quorum, 5, 2),
            Kind::Single => (&mut single, 1, 1),
        };
        eprintln!("round {round} (seed {seed})");
        let run = Run {
            kind,
            tasks: rng.random_range(4..=10),
            processes: rng.random_range(1..=4),
            initial_stock: rng.random_range(100..=400),
            budget: Duration::from_secs(120),
            schedule: Schedule {
                rng: StdRng::seed_from_u64(rng.random()),
                nodes,
                max_faulty,
                cover_all: false,
                max_faults: 200,
                gap: (50, 400),
                length: (50, 800),
            },
        };
        check_no_oversell(cluster, &stock, run, round).await;
        round += 1;
    }
    eprintln!("soak passed: {round} rounds (QUORUMLOCK_SOAK_SEED={seed})");
}

#[test]
fn specs_and_outcomes_survive_the_round_trip() {
    let spec = Spec {
        id: "p1".into(),
        kind: Kind::Quorum,
        lock_urls: vec![
            "redis://:pw@127.0.0.1:1".into(),
            "redis://127.0.0.1:2".into(),
        ],
        stock_url: "redis://127.0.0.1:3".into(),
        stock_key: "stock:0".into(),
        resource: "stock".into(),
        budget: Duration::from_secs(5),
    };
    let back = Spec::decode("p1".into(), &spec.encode());
    assert_eq!(back.lock_urls, spec.lock_urls);
    assert_eq!(back.kind, Kind::Quorum);
    assert_eq!(back.budget, spec.budget);
    assert_eq!(back.resource, "stock");
    let outcome = Outcome {
        id: "p1".into(),
        sales: 4,
        lock_errors: 2,
        gave_up: Some("not sold out\tafter 5s".into()),
        ..Outcome::default()
    };
    let back = Outcome::parse(&outcome.line()).unwrap();
    assert_eq!(back.sales, 4);
    assert_eq!(back.lock_errors, 2);
    assert_eq!(back.gave_up.as_deref(), Some("not sold out after 5s"));
    assert_eq!(back.last_lock_error, None);
}
