//! Keeping many locks alive: 1,000, 10,000 and 100,000 locks held for a minute on five
//! local redis-server nodes, kept alive three ways in turn, in one run: a watchdog per
//! guard (`LockGuard::auto_extend`), one `Session` for all, and rslock with a hand-written
//! extension loop (what an rslock user writes: every third of the TTL, `extend` each lock,
//! 64 at a time). See docs/benchmarks.md, "Keeping many locks alive".
//!
//! ```text
//! cargo bench --bench keepalive                         # 1k, 10k, 100k locks, 60 s each
//! cargo bench --bench keepalive -- --locks 10000 --hold 20
//! QUORUMLOCK_BENCH_SMOKE=1 cargo bench --bench keepalive  # 1,000 locks for 3 s, checked
//! ```
//!
//! Per contender and size it prints the node requests per second (the five servers'
//! `total_commands_processed`, so every request any client sends counts alike), the client
//! CPU per held lock per second (the process's user and system time while the locks are
//! held, acquisition excluded), the heap bytes per held lock (live bytes of a counting
//! allocator, relative to the connected client before the first acquisition), the locks
//! lost, and the longest gap between two extensions of one lock. The gaps are read by a
//! poll of every lock once a second, which costs every contender the same.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use quorumlock::{AutoExtend, LockConfig, LockGuard, Redlock, Session};
use quorumlock_testkit::RedisCluster;
use tokio::time::Instant;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counting is one
// atomic add or subtract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The nodes, as in the scenarios.
const NODES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeper {
    Watchdogs,
    Session,
    RslockLoop,
}

impl Keeper {
    const ALL: [Keeper; 3] = [Keeper::Watchdogs, Keeper::Session, Keeper::RslockLoop];

    fn label(self) -> &'static str {
        match self {
            Keeper::Watchdogs => "quorumlock, a watchdog per guard",
            Keeper::Session => "quorumlock, one session",
            Keeper::RslockLoop => "rslock, an extension loop",
        }
    }
}

struct Options {
    locks: Vec<usize>,
    hold: Duration,
    ttl: Duration,
    smoke: bool,
}

impl Options {
    fn parse() -> Result<Options, String> {
        let smoke = std::env::var_os("QUORUMLOCK_BENCH_SMOKE").is_some();
        let mut options = Options {
            locks: if smoke {
                vec![1_000]
            } else {
                vec![1_000, 10_000, 100_000]
            },
            hold: Duration::from_secs(if smoke { 3 } else { 60 }),
            ttl: Duration::from_secs(if smoke { 3 } else { 30 }),
            smoke,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--locks" => {
                    options.locks = value()?
                        .split(',')
                        .map(|n| n.parse().map_err(|_| format!("--locks: {n:?}")))
                        .collect::<Result<_, _>>()?
                }
                "--hold" => options.hold = Duration::from_secs(seconds(&value()?)?),
                "--ttl" => options.ttl = Duration::from_secs(seconds(&value()?)?),
                "--bench" => {}
                "--help" => {
                    return Err("options: --locks N[,N..] --hold SECONDS --ttl SECONDS".into())
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        Ok(options)
    }
}

fn seconds(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))
}

/// What one contender cost, holding `locks` locks.
struct Measured {
    keeper: Keeper,
    locks: usize,
    held_for: Duration,
    requests_per_sec: f64,
    cpu_us_per_lock_sec: f64,
    heap_per_lock: f64,
    lost: usize,
    longest_gap: Duration,
}

fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("keepalive: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let failed = runtime.block_on(run(&options));
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run(options: &Options) -> bool {
    let cluster = RedisCluster::start(NODES)
        .await
        .expect("start local redis-server nodes (apt-get install -y redis-server)");
    let urls = cluster.urls();
    println!(
        "keepalive: {NODES} nodes, TTL {:?} (an extension every {:?}), each size held {:?}",
        options.ttl,
        options.ttl / 3,
        options.hold
    );
    let mut all = Vec::new();
    for &locks in &options.locks {
        for keeper in Keeper::ALL {
            cluster.flush_all().await.expect("flush");
            let measured = measure(&cluster, &urls, keeper, locks, options).await;
            println!(
                "{:>7} locks  {:<34} {:>9.0} node requests/s  {:>7.3} µs CPU per lock-second  {:>5.0} B per lock  {} lost  longest gap {:?}",
                measured.locks,
                keeper.label(),
                measured.requests_per_sec,
                measured.cpu_us_per_lock_sec,
                measured.heap_per_lock,
                measured.lost,
                measured.longest_gap
            );
            all.push(measured);
        }
    }
    println!("\n{}", table(&all, options));
    let mut failed = false;
    for measured in &all {
        if measured.lost > 0 && measured.keeper != Keeper::RslockLoop {
            eprintln!(
                "FAILED: {} lost {} of {} locks",
                measured.keeper.label(),
                measured.lost,
                measured.locks
            );
            failed = true;
        }
        if options.smoke && measured.held_for < options.hold {
            eprintln!("FAILED: held {:?} only", measured.held_for);
            failed = true;
        }
    }
    if !failed {
        let keys: usize = cluster
            .keys("keep:*")
            .await
            .expect("keys")
            .iter()
            .map(Vec::len)
            .sum();
        if keys > 0 {
            eprintln!("FAILED: {keys} keys left after every release");
            failed = true;
        }
    }
    failed
}

/// The results as the Markdown table of docs/benchmarks.md, with the ratios of the session
/// to the watchdogs.
fn table(all: &[Measured], options: &Options) -> String {
    let mut out = format!(
        "TTL {:?}, held {:?} per row; node requests over all {NODES} nodes.\n\n\
         | locks | kept by | node requests/s | CPU per lock-second | heap per lock | lost | longest gap |\n\
         |---|---|---|---|---|---|---|\n",
        options.ttl, options.hold
    );
    for m in all {
        out += &format!(
            "| {} | {} | {:.0} | {:.3} µs | {:.0} B | {} | {:.2} s |\n",
            m.locks,
            m.keeper.label(),
            m.requests_per_sec,
            m.cpu_us_per_lock_sec,
            m.heap_per_lock,
            m.lost,
            m.longest_gap.as_secs_f64()
        );
    }
    out += "\n| locks | watchdogs / session: node requests/s | CPU | heap |\n|---|---|---|---|\n";
    for pair in all.chunks(3) {
        let [watchdogs, session, _] = pair else {
            continue;
        };
        out += &format!(
            "| {} | {:.0}x | {:.1}x | {:.2}x |\n",
            watchdogs.locks,
            watchdogs.requests_per_sec / session.requests_per_sec.max(f64::MIN_POSITIVE),
            watchdogs.cpu_us_per_lock_sec / session.cpu_us_per_lock_sec.max(f64::MIN_POSITIVE),
            watchdogs.heap_per_lock / session.heap_per_lock.max(f64::MIN_POSITIVE),
        );
    }
    out
}

async fn measure(
    cluster: &RedisCluster,
    urls: &[String],
    keeper: Keeper,
    locks: usize,
    options: &Options,
) -> Measured {
    let config = LockConfig::builder()
        .ttl(options.ttl)
        .build()
        .expect("config");
    match keeper {
        Keeper::Watchdogs | Keeper::Session => {
            let lock = Redlock::connect(urls, config).await.expect("connect");
            for i in 0..32 {
                let guard = lock.acquire(&format!("warm:{i}")).await.expect("warm-up");
                guard.release().await.expect("warm-up release");
            }
            let baseline = LIVE.load(Ordering::Relaxed);
            let mut guards: Vec<LockGuard> = stream::iter(0..locks)
                .map(|i| {
                    let lock = &lock;
                    async move { lock.acquire(&format!("keep:{i}")).await.expect("acquire") }
                })
                .buffer_unordered(64)
                .collect()
                .await;
            let session = (keeper == Keeper::Session).then(|| Session::new(&lock));
            for guard in &mut guards {
                match &session {
                    Some(session) => session.keep(guard).expect("joins"),
                    None => guard
                        .auto_extend(AutoExtend::default())
                        .expect("the default interval"),
                }
            }
            let watch = Watch::start(cluster).await;
            let mut last: Vec<Instant> = guards.iter().map(LockGuard::acquired_at).collect();
            let mut longest = Duration::ZERO;
            let mut heap = 0;
            while watch.started.elapsed() < options.hold {
                tokio::time::sleep(Duration::from_secs(1)).await;
                for (guard, last) in guards.iter().zip(&mut last) {
                    let now = guard.acquired_at();
                    if now != *last {
                        longest = longest.max(now.saturating_duration_since(*last));
                        *last = now;
                    }
                }
                heap = heap.max(LIVE.load(Ordering::Relaxed).saturating_sub(baseline));
            }
            let (held_for, requests_per_sec, cpu) = watch.stop(cluster).await;
            let lost = guards.iter().filter(|guard| guard.lost().is_lost()).count();
            drop(session);
            stream::iter(guards)
                .for_each_concurrent(64, |guard| async move {
                    let _ = guard.release().await;
                })
                .await;
            measured(
                keeper,
                locks,
                held_for,
                requests_per_sec,
                cpu,
                heap,
                lost,
                longest,
            )
        }
        Keeper::RslockLoop => {
            let manager = rslock::LockManager::new(urls.to_vec());
            let baseline = LIVE.load(Ordering::Relaxed);
            let held: Vec<rslock::Lock> = stream::iter(0..locks)
                .map(|i| {
                    let manager = &manager;
                    let ttl = options.ttl;
                    async move {
                        manager
                            .acquire_no_guard(format!("keep:{i}").as_bytes(), ttl)
                            .await
                            .expect("rslock acquires")
                    }
                })
                .buffer_unordered(64)
                .collect()
                .await;
            let held = Arc::new(held);
            let lost = Arc::new(AtomicUsize::new(0));
            let gaps = Arc::new(Mutex::new(Duration::ZERO));
            let extender = {
                let (manager, held, lost, gaps) = (
                    manager.clone(),
                    Arc::clone(&held),
                    Arc::clone(&lost),
                    Arc::clone(&gaps),
                );
                let ttl = options.ttl;
                tokio::spawn(async move {
                    let mut last = Instant::now();
                    loop {
                        tokio::time::sleep_until(last + ttl / 3).await;
                        let round = Instant::now();
                        let failures = extend_all(&manager, &held, ttl).await;
                        lost.fetch_add(failures, Ordering::Relaxed);
                        let mut gap = gaps.lock().unwrap();
                        *gap = (*gap).max(Instant::now().saturating_duration_since(last));
                        last = round;
                    }
                })
            };
            let watch = Watch::start(cluster).await;
            let mut heap = 0;
            while watch.started.elapsed() < options.hold {
                tokio::time::sleep(Duration::from_secs(1)).await;
                heap = heap.max(LIVE.load(Ordering::Relaxed).saturating_sub(baseline));
            }
            let (held_for, requests_per_sec, cpu) = watch.stop(cluster).await;
            extender.abort();
            let longest = *gaps.lock().unwrap();
            stream::iter(held.iter())
                .for_each_concurrent(64, |lock| manager.unlock(lock))
                .await;
            let lost = lost.load(Ordering::Relaxed);
            measured(
                keeper,
                locks,
                held_for,
                requests_per_sec,
                cpu,
                heap,
                lost,
                longest,
            )
        }
    }
}

/// An rslock user's extension round: `extend` each lock, 64 at a time; the failures.
async fn extend_all(manager: &rslock::LockManager, held: &[rslock::Lock], ttl: Duration) -> usize {
    let mut failures = 0;
    for batch in held.chunks(64) {
        let mut extensions = Vec::with_capacity(batch.len());
        for lock in batch {
            extensions.push(manager.extend(lock, ttl));
        }
        let results = futures::future::join_all(extensions).await;
        failures += results.iter().filter(|result| result.is_err()).count();
    }
    failures
}

#[allow(clippy::too_many_arguments)]
fn measured(
    keeper: Keeper,
    locks: usize,
    held_for: Duration,
    requests_per_sec: f64,
    cpu: Duration,
    heap: usize,
    lost: usize,
    longest_gap: Duration,
) -> Measured {
    Measured {
        keeper,
        locks,
        held_for,
        requests_per_sec,
        cpu_us_per_lock_sec: cpu.as_secs_f64() * 1e6 / (locks as f64 * held_for.as_secs_f64()),
        heap_per_lock: heap as f64 / locks as f64,
        lost,
        longest_gap,
    }
}

/// The hold's clock, CPU and the nodes' command counts, from its start.
struct Watch {
    started: Instant,
    cpu: Duration,
    commands: u64,
}

impl Watch {
    async fn start(cluster: &RedisCluster) -> Watch {
        Watch {
            commands: commands(cluster).await,
            cpu: process_cpu(),
            started: Instant::now(),
        }
    }

    /// How long it ran, the node requests per second, and the client CPU meanwhile.
    async fn stop(self, cluster: &RedisCluster) -> (Duration, f64, Duration) {
        let held_for = self.started.elapsed();
        let cpu = process_cpu().saturating_sub(self.cpu);
        let commands = commands(cluster).await.saturating_sub(self.commands);
        (held_for, commands as f64 / held_for.as_secs_f64(), cpu)
    }
}

/// The script calls every node was sent so far, summed: every keep-alive request of each
/// contender is one (`EVALSHA`, or `EVAL` until the node has the script). The nodes'
/// `total_commands_processed` would also count the commands each script runs, which is
/// the same work per lock for every contender.
async fn commands(cluster: &RedisCluster) -> u64 {
    let mut total = 0;
    for node in cluster.nodes() {
        let client = node.client().expect("a client");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection)
            .await
            .expect("INFO commandstats");
        for command in ["evalsha", "eval"] {
            let prefix = format!("cmdstat_{command}:calls=");
            total += info
                .lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse::<u64>().expect("a call count"));
        }
    }
    total
}

/// The process's user and system time so far.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th, in USER_HZ (100 on every Linux ABI Rust targets).
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}
