//! `quorumlock bench`: what a lock costs on the user's own nodes, the way
//! `redis-benchmark` measures Redis: per-node round trips, the acquire + release cycle,
//! attempts and validity lost per acquisition, at one or more concurrency levels.
//!
//! Safe to point at production: every key is under a prefix unique to the run and named
//! in full up front (see [`keys`]), so the run checks exactly those before it starts and
//! deletes exactly those at the end, on Ctrl-C too, and never scans or touches others;
//! `--rate` caps the load.

mod figures;
mod keys;
mod plot;
mod probe;
mod report;

use std::collections::{BTreeMap, HashSet};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use indicatif::{ProgressBar, ProgressStyle};
use quorumlock::backend::NodeClient;
use quorumlock::{LockConfig, LockError, LockMetrics, Nodes, Redlock};
use quorumlock_testkit::measure::{self, histogram, record, Histogram};
use redis::aio::ConnectionManager;
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::args::{BenchArgs, GlobalArgs};
use crate::exit::{CliError, Kind};
use crate::explain;
use crate::nodes::{check_urls, node_urls};
use crate::output::{Event, Output};

use self::keys::Names;
use self::probe::{NodeProbe, ProbeThread, Probes};

/// What the whole run measured, for the report.
pub struct Bench {
    /// The run's key prefix.
    pub prefix: String,
    /// The lock settings.
    pub config: LockConfig,
    /// How many nodes, and the quorum.
    pub nodes: usize,
    pub quorum: usize,
    /// The options.
    pub args: BenchArgs,
    /// The per-node probes.
    pub probes: Vec<NodeProbe>,
    /// Probe rounds run.
    pub probe_rounds: u64,
    /// One per concurrency level run (the last may be partial, when interrupted).
    pub levels: Vec<Level>,
    /// What the clean-up found.
    pub cleanup: Cleanup,
    /// The signal that ended the run early.
    pub interrupted: Option<&'static str>,
}

/// One concurrency level.
pub struct Level {
    pub concurrency: u32,
    pub elapsed: Duration,
    /// Completed cycles.
    pub ops: u64,
    /// Acquire + release.
    pub cycle: Histogram<u64>,
    /// From the call to acquire to holding the lock: the wait, when contended.
    pub acquire: Histogram<u64>,
    pub release: Histogram<u64>,
    /// TTL minus the validity returned: the drift allowance plus the acquisition's time.
    pub validity_lost: Histogram<u64>,
    /// Cycles completed by each task.
    pub per_task: Vec<u64>,
    /// Failed acquisitions and releases, by kind.
    pub errors: BTreeMap<&'static str, u64>,
    pub last_error: Option<String>,
    /// The lock's counters over the level.
    pub metrics: MetricsDelta,
}

/// The lock counters a level moved.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsDelta {
    pub attempts: u64,
    pub acquired: u64,
    /// Locks passed between the run's tasks without a round trip (cohorts).
    pub passed: u64,
    pub contended: u64,
    pub no_quorum: u64,
    pub node_errors: u64,
    pub node_timeouts: u64,
    pub reconnects: u64,
}

impl MetricsDelta {
    fn between(before: LockMetrics, after: LockMetrics) -> Self {
        MetricsDelta {
            attempts: after.attempts - before.attempts,
            acquired: after.acquired - before.acquired,
            passed: after.passed - before.passed,
            contended: after.contended - before.contended,
            no_quorum: after.no_quorum - before.no_quorum,
            node_errors: after.node_errors - before.node_errors,
            node_timeouts: after.node_timeouts - before.node_timeouts,
            reconnects: after.reconnects - before.reconnects,
        }
    }
}

/// What the clean-up did on the nodes.
#[derive(Debug, Default)]
pub struct Cleanup {
    /// Keys of this run deleted at the end (the library removes its own as it goes, so
    /// this is usually 0).
    pub deleted: u64,
    /// Keys of this run still there after the clean-up, by node.
    pub remaining: Vec<(String, Vec<String>)>,
    /// Nodes that could not be cleaned or checked, and why.
    pub unchecked: Vec<(String, String)>,
}

/// Runs the benchmark; returns the exit code.
pub async fn bench(global: &GlobalArgs, args: &BenchArgs, out: Output) -> Result<u8, CliError> {
    let urls = node_urls(global)?;
    let node_set = check_urls(global, &urls)?;
    let clients = servers(&node_set, global)?;
    if let Some(path) = &args.plot {
        plot::check(path)?;
    }
    let run_id = match &args.run_id {
        Some(id) => {
            keys::check_run_id(id)?;
            id.clone()
        }
        None => keys::random_run_id(),
    };
    let most_tasks = args.concurrency.iter().copied().max().unwrap_or(1);
    let names = Names::new(
        global.key_prefix.as_deref(),
        &run_id,
        most_tasks,
        args.contended,
    );
    let config = lock_config(global, args, &names.prefix)?;
    let node_timeout = config.node_timeout();
    let connect_timeout = global
        .connect_timeout
        .unwrap_or(Nodes::DEFAULT_CONNECT_TIMEOUT);

    let thread = ProbeThread::start().map_err(|error| {
        CliError::new(
            Kind::Os,
            format!("could not start the probe thread: {error}"),
        )
    })?;
    let nodes = connect_all(&thread, clients, connect_timeout, node_timeout).await?;

    let all_keys = Arc::new(names.all_keys());
    let connections: Arc<Vec<(String, ConnectionManager)>> = Arc::new(
        nodes
            .iter()
            .map(|probe| (probe.name.clone(), probe.connection()))
            .collect(),
    );
    let preexisting = thread
        .run(check_keys(
            Arc::clone(&connections),
            Arc::clone(&all_keys),
            connect_timeout,
        ))
        .await?;
    if !preexisting.is_empty() && !args.force {
        let list: Vec<String> = preexisting
            .iter()
            .take(5)
            .map(|(node, key)| format!("{key} on {node}"))
            .collect();
        return Err(CliError::new(
            Kind::Config,
            format!(
                "{} key(s) of this run's prefix {:?} already exist: {}",
                preexisting.len(),
                names.prefix,
                list.join(", ")
            ),
        )
        .hint(
            "another bench may be running with this --run-id: pick another, or pass --force \
             to run anyway (those keys are left alone)",
        ));
    }
    let keep: Arc<HashSet<String>> =
        Arc::new(preexisting.into_iter().map(|(_, key)| key).collect());
    let clean_up = || {
        thread.run(clean_up(
            Arc::clone(&connections),
            Arc::clone(&all_keys),
            Arc::clone(&keep),
            node_timeout,
        ))
    };

    let lock = Redlock::connect(node_set, config.clone())
        .await
        .map_err(|error| explain::lock_error(&error, global))?;
    // From here on keys may exist: a signal must reach the clean-up, not kill the process.
    let mut signals = Signals::install()?;
    let quorum = lock.quorum();
    out.event(
        true,
        &Event::BenchStarted {
            key_prefix: names.prefix.clone(),
            nodes: urls.len(),
            quorum,
        },
        || {
            format!(
                "bench: keys under prefix {:?} on {} node(s), quorum {}; they are removed at \
                 the end",
                names.prefix,
                urls.len(),
                quorum
            )
        },
    );

    let shared = Arc::new(Shared {
        lock,
        names: names.clone(),
        ttl: config.ttl(),
        stop: watch::channel(false).0,
        remaining: AtomicU64::new(0),
        done: AtomicU64::new(0),
        limiter: args.rate.map(Limiter::new),
    });
    let progress = progress_bar(out);
    let probes = Arc::new(tokio::sync::Mutex::new(Probes {
        nodes,
        rounds: 0,
        key: names.probe_key(),
        ttl: config.ttl(),
        quorum,
        timeout: node_timeout,
    }));

    let mut levels = Vec::new();
    let mut interrupted = None;
    let warmed = tokio::select! {
        warmed = warm_up(&shared.lock) => Some(warmed),
        signal = signals.recv() => { interrupted = Some(signal); None }
    };
    if let Some(Err(error)) = warmed {
        // Nothing measured: clean up, then say why.
        let cleanup = clean_up().await;
        report_cleanup(&cleanup, out);
        return Err(explain::lock_error(&error, global));
    }
    if interrupted.is_none() {
        for &concurrency in &args.concurrency {
            let (level, signal) = run_level(
                &shared,
                concurrency,
                args,
                (&thread, &probes),
                &progress,
                &mut signals,
            )
            .await;
            levels.push(level);
            if signal.is_some() {
                interrupted = signal;
                break;
            }
        }
    }
    // More rounds when the levels were too short for per-node percentiles to mean much.
    if interrupted.is_none() {
        let probes = Arc::clone(&probes);
        thread
            .run(async move {
                let mut probes = probes.lock().await;
                let start = Instant::now();
                // Bounded: rounds that wait out a frozen node's timeouts would drag on.
                while probes.rounds < MIN_PROBE_ROUNDS && start.elapsed() < MAX_EXTRA_PROBING {
                    probes.round().await;
                }
            })
            .await;
    }
    progress.finish_and_clear();

    let cleanup = clean_up().await;
    drop(shared);
    let (nodes, probe_rounds) = {
        let mut probes = probes.lock().await;
        (std::mem::take(&mut probes.nodes), probes.rounds)
    };
    let bench = Bench {
        prefix: names.prefix.clone(),
        config,
        nodes: urls.len(),
        quorum,
        args: args.clone(),
        probes: nodes,
        probe_rounds,
        levels,
        cleanup,
        interrupted,
    };
    let code = bench.exit_code();
    report::print(&bench, out, code);
    report_cleanup(&bench.cleanup, out);

    if let (Some(path), true) = (&args.plot, bench.interrupted.is_none()) {
        plot::draw(path, &bench)?;
        out.note(|| format!("plot written to {}", path.display()));
    }
    match bench.no_success() {
        Some(level) if bench.interrupted.is_none() => Err(CliError::new(
            Kind::Unavailable,
            format!(
                "no acquisition succeeded with {} task(s): {}",
                level.concurrency,
                level.last_error.as_deref().unwrap_or("no cycle completed")
            ),
        )
        .hint("check the nodes named in the report, or raise --node-timeout if they are slow")),
        _ => Ok(code),
    }
}

impl Bench {
    /// The level where nothing succeeded, if any.
    fn no_success(&self) -> Option<&Level> {
        self.levels.iter().find(|level| level.ops == 0)
    }

    /// 128 + the signal when interrupted, 69 when a level got no lock, else 0.
    fn exit_code(&self) -> u8 {
        match self.interrupted {
            Some("SIGTERM") => Kind::Interrupted(15).code(),
            Some(_) => Kind::Interrupted(2).code(),
            None if self.no_success().is_some() => Kind::Unavailable.code(),
            None => 0,
        }
    }
}

/// The most time spent on those extra rounds.
const MAX_EXTRA_PROBING: Duration = Duration::from_secs(1);

/// How often the progress bar is updated.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// At least this many probe rounds per run, so that per-node percentiles mean something
/// even after a run of a few operations.
const MIN_PROBE_ROUNDS: u64 = 10;

/// The lock settings of the run.
fn lock_config(
    global: &GlobalArgs,
    args: &BenchArgs,
    prefix: &str,
) -> Result<LockConfig, CliError> {
    let mut builder = LockConfig::builder()
        .ttl(args.ttl)
        .fair(!args.no_fair)
        .key_prefix(prefix)
        // Bounded by time, not count, as `run --wait` is: a contended waiter retries on
        // every release until it gets the lock, and gives up after one TTL.
        .retry_count(u32::MAX)
        .acquire_timeout(args.ttl);
    if let Some(node_timeout) = global.node_timeout {
        builder = builder.node_timeout(node_timeout);
    }
    builder
        .build()
        .map_err(|error| explain::config_error(&error, global))
}

/// Each node's name and client, for the probes: bench measures standalone servers, whose
/// round trips its probes can time one by one.
fn servers(nodes: &Nodes, global: &GlobalArgs) -> Result<Vec<(redis::Client, String)>, CliError> {
    let clients = nodes
        .clients()
        .map_err(|error| explain::lock_error(&error, global))?;
    nodes
        .addresses()
        .iter()
        .zip(clients)
        .map(|(address, client)| match client {
            NodeClient::Server(client) => Ok((client, address.name().to_owned())),
            _ => Err(CliError::new(
                Kind::Config,
                format!(
                    "{} is a Redis Cluster or a Sentinel-managed master; bench measures \
                     standalone servers",
                    address.name()
                ),
            )
            .hint("list the servers themselves in --nodes (redis://host:port,...)")),
        })
        .collect()
}

/// A probe connection to every node (its client and name), on the probe thread.
///
/// Every node must answer now: its keys must be checked before any is created, and a
/// report on fewer nodes than given would describe another deployment.
async fn connect_all(
    thread: &ProbeThread,
    named: Vec<(redis::Client, String)>,
    connect_timeout: Duration,
    node_timeout: Duration,
) -> Result<Vec<NodeProbe>, CliError> {
    let names: Vec<String> = named.iter().map(|(_, name)| name.clone()).collect();
    let connected =
        thread
            .run(async move {
                join_all(named.into_iter().map(|(client, name)| {
                    probe::connect(client, name, connect_timeout, node_timeout)
                }))
                .await
            })
            .await;
    let mut nodes = Vec::with_capacity(names.len());
    let mut unreachable = Vec::new();
    for (name, probe) in names.iter().zip(connected) {
        match probe {
            Ok(probe) => nodes.push(probe),
            Err(error) => unreachable.push(format!("{name} ({error})")),
        }
    }
    if unreachable.is_empty() {
        return Ok(nodes);
    }
    Err(CliError::new(
        Kind::Unavailable,
        format!("node(s) did not answer: {}", unreachable.join("; ")),
    )
    .hint(
        "bench measures every node given and checks each for its keys before it starts: \
         check that they are up and reachable, raise --connect-timeout, or leave them out \
         of --nodes",
    ))
}

/// Which of `keys` already exist, on which node.
async fn check_keys(
    connections: Arc<Vec<(String, ConnectionManager)>>,
    keys: Arc<Vec<String>>,
    timeout: Duration,
) -> Result<Vec<(String, String)>, CliError> {
    let mut found = Vec::new();
    for (name, conn) in connections.iter() {
        let existing = keys::existing(&mut conn.clone(), &keys, timeout)
            .await
            .map_err(|error| {
                CliError::new(
                    Kind::Unavailable,
                    format!("could not check {name} for this run's keys: {error}"),
                )
            })?;
        found.extend(existing.into_iter().map(|key| (name.clone(), key)));
    }
    Ok(found)
}

/// One untimed cycle, so that the first measured one does not pay for the connections'
/// first use and the scripts' loading.
async fn warm_up(lock: &Redlock) -> Result<(), LockError> {
    let guard = lock
        .acquire_timeout(keys::WARMUP_RESOURCE, Duration::from_secs(5))
        .await?;
    guard.release().await
}

/// Deletes the run's keys (after the lock's background releases had their time), then
/// checks that none is left.
async fn clean_up(
    connections: Arc<Vec<(String, ConnectionManager)>>,
    keys: Arc<Vec<String>>,
    keep: Arc<HashSet<String>>,
    node_timeout: Duration,
) -> Cleanup {
    // Dropped acquisitions and releases still in flight finish within a node timeout or
    // two; deleting before they land could leave a key they create after.
    tokio::time::sleep(node_timeout.saturating_mul(2)).await;
    let budget = node_timeout.max(Duration::from_millis(500));
    let mut cleanup = Cleanup::default();
    let (keys, keep) = (&*keys, &*keep);
    let outcomes = join_all(connections.iter().map(|(_, conn)| {
        let mut conn = conn.clone();
        async move {
            let deleted = keys::delete(&mut conn, keys, keep, budget).await?;
            let left: Vec<String> = keys::existing(&mut conn, keys, budget)
                .await?
                .into_iter()
                .filter(|key| !keep.contains(key))
                .collect();
            Ok::<_, String>((deleted, left))
        }
    }))
    .await;
    for ((name, _), outcome) in connections.iter().zip(outcomes) {
        match outcome {
            Ok((deleted, left)) => {
                cleanup.deleted += deleted;
                if !left.is_empty() {
                    cleanup.remaining.push((name.clone(), left));
                }
            }
            Err(error) => cleanup.unchecked.push((name.clone(), error)),
        }
    }
    cleanup
}

/// Warns about keys the clean-up could not remove or check.
fn report_cleanup(cleanup: &Cleanup, out: Output) {
    for (node, error) in &cleanup.unchecked {
        let event = Event::NodeWarning {
            node: node.clone(),
            message: format!("could not remove this run's keys: {error}"),
            keys: None,
        };
        out.event(true, &event, || {
            format!(
                "warning: could not remove this run's keys on {node} ({error}); any left there \
                 expire within --ttl"
            )
        });
    }
    for (node, keys) in &cleanup.remaining {
        let event = Event::NodeWarning {
            node: node.clone(),
            message: "keys of this run remain".to_owned(),
            keys: Some(keys.clone()),
        };
        out.event(true, &event, || {
            format!(
                "warning: {} key(s) of this run remain on {node}: {}",
                keys.len(),
                keys.join(", ")
            )
        });
    }
}

/// What the tasks of a level share.
struct Shared {
    lock: Redlock,
    names: Names,
    ttl: Duration,
    /// Set at the end of --duration: each task finishes its cycle and stops (a watch, so
    /// that a task waiting for its --rate slot stops at once).
    stop: watch::Sender<bool>,
    /// Cycles left to start, with --ops.
    remaining: AtomicU64,
    /// Cycles completed in this level, for the progress bar.
    done: AtomicU64,
    limiter: Option<Limiter>,
}

/// Paces cycle starts to at most `rate` per second across all tasks: each start takes
/// the next free slot, `1 / rate` after the previous one.
struct Limiter {
    interval: Duration,
    next: Mutex<Instant>,
}

impl Limiter {
    fn new(rate: f64) -> Self {
        Limiter {
            interval: Duration::from_secs_f64(1.0 / rate),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Starts a level: no credit saved up from before.
    fn reset(&self) {
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let slot = (*next).max(Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// What one task measured.
struct TaskResult {
    cycle: Histogram<u64>,
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    validity_lost: Histogram<u64>,
    ops: u64,
    errors: BTreeMap<&'static str, u64>,
    last_error: Option<String>,
}

/// Runs one concurrency level, with probes alongside; returns it and the signal that
/// interrupted it, if one did.
async fn run_level(
    shared: &Arc<Shared>,
    concurrency: u32,
    args: &BenchArgs,
    (thread, probes): (&ProbeThread, &Arc<tokio::sync::Mutex<Probes>>),
    progress: &ProgressBar,
    signals: &mut Signals,
) -> (Level, Option<&'static str>) {
    shared.stop.send_replace(false);
    shared.done.store(0, Ordering::Relaxed);
    shared
        .remaining
        .store(args.ops.unwrap_or(u64::MAX), Ordering::Relaxed);
    if let Some(limiter) = &shared.limiter {
        limiter.reset();
    }
    let (cancel, cancelled) = watch::channel(false);
    match args.ops {
        Some(ops) => progress.set_length(ops),
        None => progress.set_length(u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX)),
    }
    progress.set_position(0);
    progress.set_message(format!("{concurrency} task(s)"));

    let before = shared.lock.metrics();
    let start = Instant::now();
    let tasks = join_all((0..concurrency as usize).map(|index| {
        let shared = Arc::clone(shared);
        let cancelled = cancelled.clone();
        tokio::spawn(task(shared, index, cancelled))
    }));
    tokio::pin!(tasks);
    let end = start + args.duration;
    let (stop_probing, probing) = thread.probing(Arc::clone(probes));
    let mut progress_tick = tokio::time::interval(PROGRESS_INTERVAL);
    let mut interrupted = None;
    let results = loop {
        tokio::select! {
            results = &mut tasks => break results,
            _ = tokio::time::sleep_until(end), if args.ops.is_none() && !*shared.stop.borrow() => {
                shared.stop.send_replace(true);
            }
            _ = progress_tick.tick() => {
                let done = shared.done.load(Ordering::Relaxed);
                match args.ops {
                    Some(_) => progress.set_position(done),
                    None => progress.set_position(u64::try_from(start.elapsed().as_millis()).unwrap_or(0)),
                }
                let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-3);
                progress.set_message(format!("{concurrency} task(s), {done} cycles, {}", figures::fmt_rate(rate)));
            }
            signal = signals.recv(), if interrupted.is_none() => {
                interrupted = Some(signal);
                let _ = cancel.send(true);
            }
        }
    };
    let elapsed = start.elapsed();
    let after = shared.lock.metrics();
    let _ = stop_probing.send(());
    let _ = probing.await;

    let mut level = Level {
        concurrency,
        elapsed,
        ops: 0,
        cycle: histogram(),
        acquire: histogram(),
        release: histogram(),
        validity_lost: histogram(),
        per_task: Vec::with_capacity(concurrency as usize),
        errors: BTreeMap::new(),
        last_error: None,
        metrics: MetricsDelta::between(before, after),
    };
    for result in results {
        // A task only ends by panicking on a bug; its figures are lost, the others kept.
        let Ok(result) = result else { continue };
        level.ops += result.ops;
        level.per_task.push(result.ops);
        measure::merge(&mut level.cycle, &result.cycle);
        measure::merge(&mut level.acquire, &result.acquire);
        measure::merge(&mut level.release, &result.release);
        measure::merge(&mut level.validity_lost, &result.validity_lost);
        for (kind, count) in result.errors {
            *level.errors.entry(kind).or_default() += count;
        }
        if result.last_error.is_some() {
            level.last_error = result.last_error;
        }
    }
    (level, interrupted)
}

/// One task: acquire + release cycles until the level ends.
async fn task(
    shared: Arc<Shared>,
    index: usize,
    mut cancelled: watch::Receiver<bool>,
) -> TaskResult {
    let resource = shared.names.resource(index).to_owned();
    let mut result = TaskResult {
        cycle: histogram(),
        acquire: histogram(),
        release: histogram(),
        validity_lost: histogram(),
        ops: 0,
        errors: BTreeMap::new(),
        last_error: None,
    };
    let mut stopping = shared.stop.subscribe();
    let cycles = async {
        loop {
            if *stopping.borrow() {
                break;
            }
            let ticket =
                shared
                    .remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                        left.checked_sub(1)
                    });
            if ticket.is_err() {
                break;
            }
            if let Some(limiter) = &shared.limiter {
                tokio::select! {
                    () = limiter.wait() => {}
                    _ = stopping.wait_for(|stop| *stop) => break,
                }
            }
            cycle(&shared, &resource, &mut result).await;
        }
    };
    tokio::select! {
        () = cycles => {}
        // Dropping the cycle mid-way is safe: the library unlocks a dropped acquisition's
        // nodes and a dropped guard's in the background, and the clean-up waits for them.
        _ = cancelled.wait_for(|cancelled| *cancelled) => {}
    }
    result
}

/// One acquire + release, recorded into `result`.
async fn cycle(shared: &Shared, resource: &str, result: &mut TaskResult) {
    let start = Instant::now();
    let guard = match shared.lock.acquire_timeout(resource, shared.ttl).await {
        Ok(guard) => guard,
        Err(error) => {
            failed(result, acquire_error_kind(&error), error.to_string());
            return;
        }
    };
    let acquired = start.elapsed();
    let lost = shared.ttl.saturating_sub(guard.validity());
    let release_start = Instant::now();
    match guard.release().await {
        Ok(()) => {
            let now = Instant::now();
            record(&mut result.acquire, acquired);
            record(&mut result.release, now - release_start);
            record(&mut result.cycle, now - start);
            record(&mut result.validity_lost, lost);
            result.ops += 1;
            shared.done.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => failed(result, "release_failed", error.to_string()),
    }
}

fn failed(result: &mut TaskResult, kind: &'static str, message: String) {
    *result.errors.entry(kind).or_default() += 1;
    result.last_error = Some(message);
}

/// A stable name for a failed acquisition, for the report's error counts.
fn acquire_error_kind(error: &LockError) -> &'static str {
    match error {
        LockError::NoQuorum { .. } => "no_quorum",
        LockError::TimedOut { .. } => "timed_out",
        LockError::ValidityExhausted { .. } => "validity_exhausted",
        LockError::Held { .. } => "held",
        _ => "other",
    }
}

/// The progress bar on stderr: only for a person watching a terminal, never in the way
/// of a script's output.
fn progress_bar(out: Output) -> ProgressBar {
    if out.json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template("{spinner} [{bar:30}] {percent:>3}% {msg}")
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// SIGINT (Ctrl-C) and SIGTERM, caught so that the run cleans up before it exits.
struct Signals {
    interrupt: SignalStream,
    terminate: SignalStream,
}

impl Signals {
    fn install() -> Result<Self, CliError> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|error| {
                CliError::new(
                    Kind::Os,
                    format!("could not install a signal handler: {error}"),
                )
            })
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    /// The next signal's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_limiter_spaces_starts() {
        let limiter = Limiter::new(10.0);
        let start = Instant::now();
        for _ in 0..5 {
            limiter.wait().await;
        }
        // Slots at 0, 100, 200, 300, 400 ms.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(took < Duration::from_millis(450), "{took:?}");
    }
}
