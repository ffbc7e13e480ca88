//! Load generator: quorumlock side by side with rslock and with a hand-written floor, on
//! the same five local redis-server nodes, in the same run. See docs/benchmarks.md.
//!
//! ```text
//! cargo bench --bench scenarios                          # full run (about 4 minutes)
//! QUORUMLOCK_BENCH_SMOKE=1 cargo bench --bench scenarios # every scenario briefly, checked
//! cargo bench --bench scenarios -- --help                # options
//! ```
//!
//! Each scenario runs every contender in turn, in an order that alternates between
//! repetitions (A B C, C B A, A B C, ...), and reports per contender the medians over the
//! repetitions of ops/s, p50, p99 and max, and the ratios quorumlock/rslock as the median of
//! the per-repetition ratios (the two runs of a repetition are back to back).

mod clients;
mod memory;
mod plot;
mod results_doc;
mod stats;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clients::{Client, Contender};
use quorumlock::LockConfig;
use quorumlock_testkit::{Direction, FaultProxy, RedisCluster};
use redis::AsyncCommands;
use stats::{fmt_rate, fmt_us, Outcome, Run, Summary};

#[global_allocator]
static ALLOC: memory::Counting = memory::Counting;

/// The five nodes; node 4 is the one slowed down (scenario 4) or frozen (scenario 5).
const NODES: usize = 5;
const SLOW_NODE: usize = 4;
/// Latency added to every request to the slow node (client to node direction).
const ADDED_LATENCY: Duration = Duration::from_millis(20);
const WARM_UP_CYCLES: usize = 20;

#[derive(Debug, Clone)]
struct Options {
    smoke: bool,
    reps: usize,
    /// Multiplies every run's window.
    scale: f64,
    plots: Option<PathBuf>,
    docs: Option<PathBuf>,
    criterion: Option<PathBuf>,
    only: Option<Vec<String>>,
    /// Run only these contenders (by label), e.g. to profile one of them.
    contenders: Option<Vec<String>>,
    self_test: bool,
    locks: usize,
    memory_ttl: Duration,
    op_timeout: Duration,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let smoke_env =
            std::env::var("QUORUMLOCK_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut options = Options {
            smoke: smoke_env,
            reps: 9,
            scale: 1.0,
            plots: None,
            docs: None,
            criterion: None,
            only: None,
            contenders: None,
            self_test: false,
            locks: 10_000,
            memory_ttl: Duration::from_secs(10),
            op_timeout: Duration::from_secs(5),
        };
        let mut reps = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--smoke" => options.smoke = true,
                "--reps" => {
                    reps = Some(
                        value("--reps")?
                            .parse()
                            .map_err(|e| format!("--reps: {e}"))?,
                    )
                }
                "--scale" => {
                    options.scale = value("--scale")?
                        .parse()
                        .map_err(|e| format!("--scale: {e}"))?
                }
                "--plots" => options.plots = Some(PathBuf::from(value("--plots")?)),
                "--docs" => options.docs = Some(PathBuf::from(value("--docs")?)),
                "--criterion" => options.criterion = Some(PathBuf::from(value("--criterion")?)),
                "--only" => {
                    options.only = Some(value("--only")?.split(',').map(str::to_owned).collect());
                }
                "--contenders" => {
                    options.contenders = Some(
                        value("--contenders")?
                            .split(',')
                            .map(str::to_owned)
                            .collect(),
                    );
                }
                "--self-test" => options.self_test = true,
                "--locks" => {
                    options.locks = value("--locks")?
                        .parse()
                        .map_err(|e| format!("--locks: {e}"))?
                }
                "--help" | "-h" => {
                    println!(
                        "options: --smoke | --reps N | --scale X (run windows) | --plots DIR | \
                         --docs FILE (rewrite its results section) | --criterion DIR (add micro results) | \
                         --only s1,s3,mem | --contenders quorumlock,quorumlock-unfair,rslock,floor,no-lock | --locks N | \
                         --self-test (check the results writer and docs/benchmarks.md, then exit)"
                    );
                    std::process::exit(0);
                }
                other if other.starts_with("--") => return Err(format!("unknown option {other}")),
                _ => {} // a benchmark-name filter from `cargo bench NAME`: ignored
            }
        }
        if options.smoke {
            options.reps = 1;
            options.scale = options.scale.min(0.02);
            options.locks = options.locks.min(500);
            options.memory_ttl = Duration::from_secs(1);
            options.op_timeout = Duration::from_secs(1);
        }
        if let Some(reps) = reps {
            options.reps = reps;
        }
        if options.reps == 0 {
            return Err("--reps must be at least 1".to_owned());
        }
        Ok(options)
    }

    fn wants(&self, id: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o == id))
    }

    fn runs(&self, contender: Contender) -> bool {
        self.contenders
            .as_ref()
            .is_none_or(|only| only.iter().any(|c| c == contender.label()))
    }

    fn window(&self, full: Duration) -> Duration {
        full.mul_f64(self.scale).max(Duration::from_millis(30))
    }
}

/// Which nodes a scenario locks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nodes {
    All,
    /// Node 4 behind the latency proxy.
    OneSlow,
    /// Node 4 frozen (SIGSTOP) during the measured window.
    OneFrozen,
    /// Node 0 only.
    Single,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// `tasks` tasks, each acquiring and releasing a fresh resource in a loop.
    Cycles { tasks: usize },
    /// `tasks` clients contending for one lock, each doing a read-modify-write of a counter
    /// under it (`Contender::NoLock`: one client, with no lock, the ceiling).
    Contended { tasks: usize },
}

struct Scenario {
    id: &'static str,
    title: &'static str,
    nodes: Nodes,
    load: Load,
    window: Duration,
    contenders: &'static [Contender],
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        id: "s1",
        title: "1. uncontended acquire+release, 1 task, 5 nodes",
        nodes: Nodes::All,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s2",
        title: "2. 64 tasks, distinct resources, 5 nodes",
        nodes: Nodes::All,
        load: Load::Cycles { tasks: 64 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s3",
        title: "3. 8 clients contending for one lock (counter RMW), 5 nodes",
        nodes: Nodes::All,
        load: Load::Contended { tasks: 8 },
        window: Duration::from_millis(2_000),
        // No lock: the ceiling, one client doing the same GET + SET with no lock at all.
        // quorumlock-unfair: the same without the fair queue, waiters racing.
        contenders: &[
            Contender::Quorumlock,
            Contender::Rslock,
            Contender::QuorumlockUnfair,
            Contender::NoLock,
        ],
    },
    Scenario {
        id: "s4",
        title: "4. one of 5 nodes with +20 ms latency, 1 task",
        nodes: Nodes::OneSlow,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock, Contender::Floor],
    },
    Scenario {
        id: "s5",
        title: "5. one of 5 nodes frozen (SIGSTOP), 1 task",
        nodes: Nodes::OneFrozen,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Rslock],
    },
    Scenario {
        id: "s6",
        title: "6. single node: RedisLock vs SET NX PX + compare-and-delete, 1 task",
        nodes: Nodes::Single,
        load: Load::Cycles { tasks: 1 },
        window: Duration::from_millis(1_000),
        contenders: &[Contender::Quorumlock, Contender::Floor, Contender::Rslock],
    },
];

type Results = BTreeMap<(&'static str, Contender), Vec<Run>>;

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("scenarios: {err}");
            return ExitCode::from(2);
        }
    };
    // The results writer's tests, and the document it will rewrite (a smoke run: the
    // repository's), before anything is measured.
    let doc = options
        .docs
        .as_deref()
        .or((options.smoke || options.self_test).then(results_doc::repo_doc));
    if let Err(err) = results_doc::check(doc) {
        eprintln!("FAILED: {err}");
        return ExitCode::FAILURE;
    }
    if options.self_test {
        println!("scenarios: self-test passed");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The latency proxy runs on a runtime of its own, so that forwarding the slow node's
    // traffic does not queue behind (or ahead of) the clients' tasks in one scheduler. It
    // still shares the machine's two cores with everything else, like the nodes do.
    let proxy_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("latency-proxy")
        .enable_all()
        .build()
        .expect("proxy runtime");
    let code = runtime.block_on(run(options, proxy_runtime.handle().clone()));
    // Leftover background tasks (stragglers to a thawed node) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    proxy_runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn run(options: Options, proxy_runtime: tokio::runtime::Handle) -> ExitCode {
    let started = Instant::now();
    let machine = Machine::probe();
    println!(
        "quorumlock scenarios: {}",
        if options.smoke {
            "smoke run"
        } else {
            "full run"
        }
    );
    println!("{}", machine.describe());
    println!(
        "{} repetitions, windows x{}, per-operation timeout {:?}\n",
        options.reps, options.scale, options.op_timeout
    );

    let mut cluster = RedisCluster::start(NODES)
        .await
        .expect("start 5 redis-server nodes");
    let direct = cluster.urls();
    let upstream: SocketAddr = ([127, 0, 0, 1], cluster.node(SLOW_NODE).port()).into();
    let proxy = proxy_runtime
        .spawn(FaultProxy::start(upstream))
        .await
        .expect("proxy start task")
        .expect("start the latency proxy");
    proxy.set_latency(Direction::ToServer, ADDED_LATENCY, Duration::ZERO);
    let mut slow = direct.clone();
    slow[SLOW_NODE] = proxy.url();

    let mut results: Results = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    for scenario in SCENARIOS.iter().filter(|s| options.wants(s.id)) {
        println!("== {}", scenario.title);
        let urls = match scenario.nodes {
            Nodes::All | Nodes::OneFrozen => direct.clone(),
            Nodes::OneSlow => slow.clone(),
            Nodes::Single => vec![direct[0].clone()],
        };
        for rep in 0..options.reps {
            let mut order: Vec<Contender> = scenario
                .contenders
                .iter()
                .copied()
                .filter(|&c| options.runs(c))
                .collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for contender in order {
                let run = run_one(&options, &mut cluster, scenario, contender, &urls, rep).await;
                println!(
                    "   rep {rep} {:<10} {:>10} p50 {:>9} p99 {:>9} max {:>9} cpu/op {:>9}{}{}{}",
                    contender.label(),
                    fmt_rate(Some(run.ops_per_sec())),
                    fmt_us(run.quantile_us(0.5)),
                    fmt_us(run.quantile_us(0.99)),
                    fmt_us(run.max_us()),
                    fmt_us(run.cpu_us_per_op),
                    match run.outcome {
                        Outcome::Completed => String::new(),
                        Outcome::TimedOut(after) => format!("  DID NOT COMPLETE within {after:?}"),
                    },
                    match &run.check {
                        Some(Ok(text)) => format!("  [{text}]"),
                        Some(Err(text)) => format!("  [CHECK FAILED: {text}]"),
                        None => String::new(),
                    },
                    match (scenario.load, run.rounds_per_acquire) {
                        (Load::Contended { .. }, rounds) => format!(
                            "  ops per client {}..{}{}",
                            run.per_task.0,
                            run.per_task.1,
                            rounds.map_or(String::new(), |r| format!(
                                ", {r:.2} rounds per acquisition"
                            ))
                        ),
                        _ => String::new(),
                    },
                );
                failures.extend(smoke_checks(scenario, contender, &run));
                results
                    .entry((scenario.id, contender))
                    .or_default()
                    .push(run);
            }
        }
        cluster.flush_all().await.expect("flush the nodes");
    }
    drop(proxy);

    let memory = if options.wants("mem") {
        println!("== memory: {} locks held and auto-extended", options.locks);
        let report = memory::measure(&direct, options.locks, options.memory_ttl).await;
        println!("   {report:?}");
        if report.lost > 0 {
            failures.push(format!(
                "memory: {} locks lost while auto-extended",
                report.lost
            ));
        }
        if report.extensions < report.locks as u64 {
            failures.push(format!(
                "memory: only {} extensions for {} locks",
                report.extensions, report.locks
            ));
        }
        Some(report)
    } else {
        None
    };
    drop(cluster);

    let report = Report {
        options: &options,
        machine: &machine,
        results: &results,
        memory: memory.as_ref(),
        micro: options
            .criterion
            .as_deref()
            .map(read_criterion)
            .unwrap_or_default(),
        wall: started.elapsed(),
    };
    let tables = report.markdown();
    println!("\n{tables}");

    let plots = options.plots.clone().or_else(|| {
        // A smoke run draws its plots too, to prove the plotting works, but not into docs/.
        options
            .smoke
            .then(|| std::env::temp_dir().join("quorumlock-bench-smoke"))
    });
    if let Some(dir) = &plots {
        draw_plots(dir, &results);
    }
    if let Some(docs) = &options.docs {
        match results_doc::write(docs, &tables) {
            Ok(()) => println!("results written to {}", docs.display()),
            Err(err) => failures.push(format!("writing {}: {err}", docs.display())),
        }
    }

    let checks = results.len() + usize::from(memory.is_some());
    if failures.is_empty() {
        println!(
            "scenarios: {checks} passed, 0 failed (wall time {:.1} s)",
            started.elapsed().as_secs_f64()
        );
        ExitCode::SUCCESS
    } else {
        for failure in &failures {
            eprintln!("FAILED: {failure}");
        }
        println!(
            "scenarios: {} passed, {} failed",
            checks.saturating_sub(failures.len()),
            failures.len()
        );
        ExitCode::FAILURE
    }
}

/// What must hold in every run, smoke or full: quorumlock and the floor complete without
/// errors, and the contended counter is exact for every contender that completed.
fn smoke_checks(scenario: &Scenario, contender: Contender, run: &Run) -> Vec<String> {
    let mut failures = Vec::new();
    let name = format!("{} {}", scenario.id, contender.label());
    if contender != Contender::Rslock {
        if run.outcome != Outcome::Completed {
            failures.push(format!("{name}: did not complete"));
        }
        if run.ops == 0 {
            failures.push(format!("{name}: no operation completed"));
        }
        if run.errors > 0 {
            failures.push(format!("{name}: {} operations failed", run.errors));
        }
    }
    if let Some(Err(err)) = &run.check {
        failures.push(format!("{name}: {err}"));
    }
    failures
}

fn config_for(scenario: &Scenario) -> LockConfig {
    match scenario.load {
        // Defaults, except that nobody gives up while waiting: a deadline no run reaches
        // is what lets the retries be counted no more.
        Load::Contended { .. } => LockConfig::builder()
            .retry_count(1_000_000)
            .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
            .build()
            .expect("config"),
        Load::Cycles { .. } => LockConfig::default(),
    }
}

async fn run_one(
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
            }
            run
        }
        Load::Contended { tasks } => {
            // Without a lock, clients would race on the counter: the ceiling is one client.
            let tasks = if contender == Contender::NoLock {
                1
            } else {
                tasks
            };
            let mut clients = Vec::with_capacity(tasks);
            for _ in 0..tasks {
                let client = Client::connect(contender, urls, &config).await;
                warm_up(&client, &prefix).await;
                clients.push(Arc::new(client));
            }
            let counter = cluster
                .node(0)
                .client()
                .expect("counter client")
                .get_multiplexed_async_connection()
                .await
                .expect("counter connection");
            let before: Vec<_> = clients.iter().filter_map(|c| c.metrics()).collect();
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
            let after: Vec<_> = clients.iter().filter_map(|c| c.metrics()).collect();
            run.rounds_per_acquire = rounds_per_acquire(before, after);
            run
        }
    };
    // The process's CPU time comes in 10 ms ticks: below 100 ms it says little.
    if run.ops > 0 {
        run.cpu_us_per_op = cpu
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
    let acquired = sum(&after, |m| m.acquired) - sum(&before, |m| m.acquired);
    (acquired > 0).then(|| attempts as f64 / acquired as f64)
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
                let mut hist = stats::histogram();
                let (mut ops, mut errors, mut i) = (0u64, 0u64, 0u64);
                let mut outcome = Outcome::Completed;
                while Instant::now() < deadline {
                    let resource = format!("{prefix}:{i}");
                    i += 1;
                    let t0 = Instant::now();
                    match tokio::time::timeout(op_timeout, client.cycle(&resource)).await {
                        Ok(Ok(())) => {
                            stats::record(&mut hist, t0.elapsed());
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
    let started = Instant::now();
    let deadline = started + window;
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let lock_name = lock_name.clone();
            let counter_key = counter_key.clone();
            let mut counter = counter.clone();
            let increments = Arc::clone(&increments);
            tokio::spawn(async move {
                let waits = !matches!(*client, Client::NoLock);
                let mut hist = stats::histogram();
                let (mut ops, mut errors) = (0u64, 0u64);
                let mut outcome = Outcome::Completed;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
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
                        stats::record(&mut hist, t0.elapsed());
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
                (hist, ops, errors, outcome, Instant::now())
            })
        })
        .collect();
    let mut run = collect(started, handles, None).await;
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

type TaskResult = (hdrhistogram::Histogram<u64>, u64, u64, Outcome, Instant);

async fn collect(
    started: Instant,
    handles: Vec<tokio::task::JoinHandle<TaskResult>>,
    check: Option<Result<String, String>>,
) -> Run {
    let mut run = Run {
        ops: 0,
        elapsed: Duration::ZERO,
        hist: stats::histogram(),
        outcome: Outcome::Completed,
        errors: 0,
        check,
        per_task: (u64::MAX, 0),
        rounds_per_acquire: None,
        cpu_us_per_op: None,
    };
    for handle in handles {
        let (hist, ops, errors, outcome, ended) = handle.await.expect("load task panicked");
        run.per_task = (run.per_task.0.min(ops), run.per_task.1.max(ops));
        run.hist.add(&hist).expect("same bounds");
        run.ops += ops;
        run.errors += errors;
        run.elapsed = run.elapsed.max(ended - started);
        if outcome != Outcome::Completed {
            run.outcome = outcome;
        }
    }
    run
}

// ---------------------------------------------------------------------------------------
// Reporting

struct Machine {
    cpu: String,
    cores: usize,
    redis: String,
    load_before: String,
}

impl Machine {
    fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|line| {
                line.strip_prefix("model name")
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let redis = std::process::Command::new(
            std::env::var("QUORUMLOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned()),
        )
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            text.split_whitespace()
                .find(|word| word.starts_with("v="))
                .map(|v| v[2..].to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            redis,
            load_before: loadavg(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "machine: {} core(s), {}; redis-server {}; load average at start {}",
            self.cores, self.cpu, self.redis, self.load_before
        )
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".to_owned())
}

struct Report<'a> {
    options: &'a Options,
    machine: &'a Machine,
    results: &'a Results,
    memory: Option<&'a memory::MemoryReport>,
    micro: Vec<(String, f64)>,
    wall: Duration,
}

/// One target of the issue, evaluated.
struct Target {
    what: &'static str,
    goal: &'static str,
    value: Option<f64>,
    met: Option<bool>,
    shown: String,
}

impl Report<'_> {
    fn runs(&self, id: &str, contender: Contender) -> &[Run] {
        self.results
            .iter()
            .find(|((sid, c), _)| *sid == id && *c == contender)
            .map_or(&[], |(_, runs)| runs.as_slice())
    }

    fn ratio(&self, id: &str, theirs: Contender, metric: fn(&Run) -> Option<f64>) -> Option<f64> {
        stats::paired_ratio(
            self.runs(id, Contender::Quorumlock),
            self.runs(id, theirs),
            metric,
        )
    }

    fn targets(&self) -> Vec<Target> {
        let p50 = |run: &Run| run.quantile_us(0.5);
        let p99 = |run: &Run| run.quantile_us(0.99);
        let ops = |run: &Run| Some(run.ops_per_sec());
        let at_most = |what, goal, value: Option<f64>, limit: f64| Target {
            what,
            goal,
            value,
            met: value.map(|v| v <= limit),
            shown: value.map_or("–".to_owned(), |v| format!("{v:.2}x")),
        };
        let at_least = |what, goal, value: Option<f64>, limit: f64| Target {
            what,
            goal,
            value,
            met: value.map(|v| v >= limit),
            shown: value.map_or("–".to_owned(), |v| format!("{v:.2}x")),
        };
        let ours = |id| Summary::of(self.runs(id, Contender::Quorumlock));
        let s4_vs_s1 = match (ours("s4").p50_us, ours("s1").p50_us) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let node_timeout = LockConfig::DEFAULT_NODE_TIMEOUT.as_secs_f64() * 1e6;
        let s5 = ours("s5");
        let s5_p99 = s5.p99_us.filter(|_| s5.completed() && s5.errors == 0);
        vec![
            at_most(
                "1. p50 vs rslock",
                "≤ 0.90x",
                self.ratio("s1", Contender::Rslock, p50),
                0.9,
            ),
            at_most(
                "1. p50 vs floor",
                "≤ 1.15x",
                self.ratio("s1", Contender::Floor, p50),
                1.15,
            ),
            at_least(
                "2. ops/s vs rslock",
                "≥ 1.3x",
                self.ratio("s2", Contender::Rslock, ops),
                1.3,
            ),
            at_least(
                "3. ops/s vs rslock",
                "≥ 10x",
                self.ratio("s3", Contender::Rslock, ops),
                10.0,
            ),
            Target {
                what: "3. reference: 10x rslock's ops/s vs the no-lock ceiling",
                goal: "≤ 1x, or 10x is unreachable",
                value: self.ten_rslock_vs_ceiling(),
                met: None,
                shown: self
                    .ten_rslock_vs_ceiling()
                    .map_or("–".to_owned(), |v| format!("{v:.2}x")),
            },
            at_most(
                "3. wait p99 vs rslock",
                "≤ 0.10x",
                self.ratio("s3", Contender::Rslock, p99),
                0.1,
            ),
            // rslock's p99 swings between runs: most of its acquisitions are the releaser
            // taking the lock straight back, so the starved waits can fall beyond the 99th
            // percentile. The longest wait and the share of the least served client show
            // the starvation itself.
            Target {
                what: "3. reference: longest wait vs rslock's",
                goal: "(no target)",
                value: self.ratio("s3", Contender::Rslock, |run: &Run| run.max_us()),
                met: None,
                shown: self
                    .ratio("s3", Contender::Rslock, |run: &Run| run.max_us())
                    .map_or("–".to_owned(), |v| format!("{v:.3}x")),
            },
            Target {
                what: "3. reference: least / most served client, ours and rslock's",
                goal: "(no target; 1 is fair)",
                value: None,
                met: None,
                shown: self.fair_shares(),
            },
            at_most("4. p50 vs our scenario-1 p50", "≤ 1.3x", s4_vs_s1, 1.3),
            Target {
                what: "5. completes, p99 vs node timeout (50 ms)",
                goal: "< 2x",
                value: s5_p99,
                met: s5_p99.map(|v| v < 2.0 * node_timeout),
                shown: s5_p99.map_or("did not complete".to_owned(), |v| {
                    format!("{} = {:.2}x", fmt_us(Some(v)), v / node_timeout)
                }),
            },
            at_most(
                "6. p50 vs floor (single node)",
                "≤ 1.15x",
                self.ratio("s6", Contender::Floor, p50),
                1.15,
            ),
        ]
    }

    /// Scenario 3: ten times rslock's rate over the no-lock ceiling's, the median of the
    /// per-repetition ratios (the runs of one repetition are back to back).
    fn ten_rslock_vs_ceiling(&self) -> Option<f64> {
        stats::paired_ratio(
            self.runs("s3", Contender::Rslock),
            self.runs("s3", Contender::NoLock),
            |run| Some(run.ops_per_sec()),
        )
        .map(|ratio| 10.0 * ratio)
    }

    /// Scenario 3: the least served client's operations over the most served one's, the
    /// median over the repetitions, for quorumlock and for rslock.
    fn fair_shares(&self) -> String {
        let share = |contender| {
            stats::median(self.runs("s3", contender).iter().map(|run| {
                let (least, most) = run.per_task;
                (most > 0).then(|| least as f64 / most as f64)
            }))
            .map_or("–".to_owned(), |v| format!("{v:.2}"))
        };
        format!(
            "{} and {}",
            share(Contender::Quorumlock),
            share(Contender::Rslock)
        )
    }

    /// What the 10x target of scenario 3 asks, against the ceiling measured in this run.
    fn ceiling_note(&self) -> Option<String> {
        let ceiling = Summary::of(self.runs("s3", Contender::NoLock)).ops_per_sec?;
        let rslock = Summary::of(self.runs("s3", Contender::Rslock)).ops_per_sec?;
        let ratio = self.ten_rslock_vs_ceiling()?;
        Some(format!(
            "Scenario 3's ceiling, measured in this run: one client doing the same GET + SET \
             on node 0 with no lock at all, {}. Ten times rslock's rate, 10 x {} = {}, is \
             {ratio:.2}x that ceiling (median of per-repetition ratios): the 10x target is {} \
             what the counter's two round trips allow without any lock.",
            fmt_rate(Some(ceiling)),
            fmt_rate(Some(rslock)),
            fmt_rate(Some(10.0 * rslock)),
            if ratio > 1.0 { "above" } else { "within" },
        ))
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        let o = self.options;
        let _ = writeln!(
            out,
            "Run: {} ({} repetition(s), windows x{}), total wall time {:.0} s.  ",
            if o.smoke { "smoke" } else { "full" },
            o.reps,
            o.scale,
            self.wall.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "{}; load average at the end {}.\n",
            self.machine.describe(),
            loadavg()
        );

        let _ = writeln!(
            out,
            "#### Targets (ratios quorumlock / peer, medians of per-repetition ratios)\n"
        );
        let _ = writeln!(out, "| scenario: metric | target | measured | met |");
        let _ = writeln!(out, "|---|---|---|---|");
        for target in self.targets() {
            let met = match target.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "n/a",
            };
            let _ = target.value;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                target.what, target.goal, target.shown, met
            );
        }
        if let Some(note) = self.ceiling_note() {
            let _ = writeln!(out, "\n{note}");
        }

        let _ = writeln!(
            out,
            "\n#### Per scenario (medians over repetitions; ratio columns: quorumlock / that row)\n"
        );
        let _ = writeln!(
            out,
            "| scenario | contender | ops/s | p50 | p99 | max | client CPU/op | ours/this ops/s | ours/this p50 | ours/this p99 | ours/this CPU/op | notes |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for scenario in SCENARIOS {
            for &contender in scenario.contenders {
                let runs = self.runs(scenario.id, contender);
                if runs.is_empty() {
                    continue;
                }
                let summary = Summary::of(runs);
                let ratio = |metric: fn(&Run) -> Option<f64>| {
                    if contender == Contender::Quorumlock {
                        return "".to_owned();
                    }
                    self.ratio(scenario.id, contender, metric)
                        .map_or("–".to_owned(), |r| format!("{r:.2}x"))
                };
                let mut notes = Vec::new();
                if let Some((count, after)) = summary.timed_out {
                    notes.push(format!(
                        "**did not complete within {after:?}** in {count} of {} repetitions",
                        summary.reps
                    ));
                }
                if contender == Contender::NoLock {
                    notes.push(
                        "reference, not a lock: one client, GET + SET of the counter with no \
                         lock, the ceiling of the locked rate"
                            .to_owned(),
                    );
                } else if let Load::Contended { .. } = scenario.load {
                    let least = stats::median(runs.iter().map(|run| Some(run.per_task.0 as f64)));
                    let most = stats::median(runs.iter().map(|run| Some(run.per_task.1 as f64)));
                    if let (Some(least), Some(most)) = (least, most) {
                        notes.push(format!(
                            "ops of the least / most served client: {least:.0} / {most:.0}"
                        ));
                    }
                    if let Some(rounds) =
                        stats::median(runs.iter().map(|run| run.rounds_per_acquire))
                    {
                        notes.push(format!("{rounds:.2} rounds per acquisition"));
                    }
                }
                if summary.errors > 0 {
                    notes.push(format!("{} errors", summary.errors));
                }
                if let Some(check) = runs.iter().filter_map(|run| run.check.as_ref()).next_back() {
                    let all_ok = runs.iter().all(|run| !matches!(run.check, Some(Err(_))));
                    notes.push(match (all_ok, check) {
                        (true, _) => "counter exact in every repetition".to_owned(),
                        (false, Err(err)) => format!("**{err}**"),
                        (false, Ok(_)) => "**counter wrong in some repetition**".to_owned(),
                    });
                }
                let name = match (scenario.nodes, contender) {
                    (Nodes::Single, Contender::Quorumlock) => "quorumlock (RedisLock)",
                    (Nodes::Single, Contender::Floor) => "floor (1 node)",
                    (Nodes::Single, Contender::Rslock) => "rslock (1 node)",
                    (_, Contender::NoLock) => "no lock (ceiling)",
                    (_, Contender::QuorumlockUnfair) => "quorumlock, fair(false)",
                    (_, c) => c.label(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    scenario
                        .title
                        .split_once(' ')
                        .map_or(scenario.title, |(n, _)| n.trim_end_matches('.')),
                    name,
                    fmt_rate(summary.ops_per_sec),
                    fmt_us(summary.p50_us),
                    fmt_us(summary.p99_us),
                    fmt_us(summary.max_us),
                    fmt_us(summary.cpu_us_per_op),
                    ratio(|run| Some(run.ops_per_sec())),
                    ratio(|run| run.quantile_us(0.5)),
                    ratio(|run| run.quantile_us(0.99)),
                    ratio(|run| run.cpu_us_per_op),
                    notes.join("; "),
                );
            }
        }
        let _ = writeln!(
            out,
            "\nScenario 3's p50/p99 are the wait for the lock (from calling acquire to holding it); \
             its no-lock row has no wait; the other scenarios' are one acquire+release cycle."
        );

        if let Some(memory) = self.memory {
            let _ = writeln!(out, "\n#### Client memory, {} locks held\n", memory.locks);
            let _ = writeln!(out, "| state | bytes per lock |");
            let _ = writeln!(out, "|---|---|");
            let _ = writeln!(
                out,
                "| guards held, no auto-extension | {:.0} |",
                memory.held_per_lock
            );
            let _ = writeln!(
                out,
                "| guards held and auto-extended (after {:.1} s, {} extensions) | {:.0} |",
                memory.held_for.as_secs_f64(),
                memory.extensions,
                memory.extended_per_lock
            );
            let _ = writeln!(
                out,
                "| peak during acquisition and extension | {:.0} |",
                memory.peak_per_lock
            );
            let _ = writeln!(
                out,
                "\nTTL {:?}; {} locks acquired in {:.2} s (64 in flight); {} lost. Bytes are heap bytes \
                 allocated and still live (a counting global allocator), relative to the client \
                 before the first acquisition.",
                memory.ttl, memory.locks, memory.acquire_secs, memory.lost
            );
        }

        if !self.micro.is_empty() {
            let _ = writeln!(out, "\n#### Micro-benchmarks (criterion, median)\n");
            let _ = writeln!(out, "| benchmark | time |");
            let _ = writeln!(out, "|---|---|");
            for (name, ns) in &self.micro {
                let shown = if *ns < 1_000.0 {
                    format!("{ns:.1} ns")
                } else {
                    fmt_us(Some(ns / 1_000.0))
                };
                let _ = writeln!(out, "| {name} | {shown} |");
            }
        }
        out
    }
}

/// Criterion's median estimates, `(benchmark id, ns)`, read from `<dir>/**/new/estimates.json`.
fn read_criterion(dir: &Path) -> Vec<(String, f64)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, f64)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name == "new") {
                    let estimates = path.join("estimates.json");
                    if let Some(ns) = std::fs::read_to_string(&estimates)
                        .ok()
                        .and_then(|text| median_estimate(&text))
                    {
                        let id = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
                        out.push((id, ns));
                    }
                } else if path
                    .file_name()
                    .is_some_and(|name| name != "report" && name != "base")
                {
                    walk(&path, root, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `"median":{..."point_estimate":N...}` from criterion's estimates.json.
fn median_estimate(json: &str) -> Option<f64> {
    let rest = &json[json.find("\"median\"")?..];
    let rest = &rest[rest.find("\"point_estimate\"")? + "\"point_estimate\"".len()..];
    let rest = rest.trim_start_matches([':', ' ']);
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

fn draw_plots(dir: &Path, results: &Results) {
    if !plot::init_font() {
        eprintln!("plots skipped: no TrueType font found (set QUORUMLOCK_BENCH_FONT)");
        return;
    }
    if let Err(err) = std::fs::create_dir_all(dir) {
        eprintln!("plots skipped: {}: {err}", dir.display());
        return;
    }
    for scenario in SCENARIOS {
        let merged: Vec<(Contender, hdrhistogram::Histogram<u64>)> = scenario
            .contenders
            .iter()
            .filter_map(|&c| {
                results
                    .get(&(scenario.id, c))
                    .map(|runs| (c, stats::merged(runs)))
            })
            // The no-lock reference records no latency.
            .filter(|(_, hist)| !hist.is_empty())
            .collect();
        if merged.is_empty() {
            continue;
        }
        let series: Vec<plot::Series<'_>> = merged
            .iter()
            .map(|(contender, hist)| plot::Series {
                label: contender.label().to_owned(),
                hist,
            })
            .collect();
        let y_desc = match scenario.load {
            Load::Contended { .. } => "wait for the lock (ms)",
            Load::Cycles { .. } => "acquire + release (ms)",
        };
        let path = dir.join(format!("{}.png", scenario.id));
        match plot::latency_plot(&path, scenario.title, y_desc, &series) {
            Ok(()) => println!("plot: {}", path.display()),
            Err(err) => eprintln!("plot {} failed: {err}", path.display()),
        }
    }
}
