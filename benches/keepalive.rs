//! Keeping many locks alive: 1,000, 10,000 and 100,000 locks held for a minute on five
//! local redis-server nodes, kept alive three ways in turn, in one run: a watchdog per
//! guard (`LockGuard::auto_extend`), one `Session` for all, and rslock with a hand-written
//! extension loop (what an rslock user writes: every third of the TTL, `extend` each lock,
//! 64 at a time). See docs/benchmarks.md, "Keeping many locks alive".
//!
//! ```text
//! cargo bench --bench keepalive                         # 1k, 10k, 100k locks, 60 s each
//! cargo bench --bench keepalive -- --locks 10000 --hold 20
//! cargo bench --bench keepalive -- --locks 10000 --keepers session   # one contender
//! QUORUMLOCK_BENCH_SMOKE=1 cargo bench --bench keepalive  # 1,000 locks for 3 s, checked
//! ```
//!
//! Per contender and size it prints the node requests per second (the five servers'
//! `total_commands_processed`, so every request any client sends counts alike), the client
//! CPU per held lock per second (the process's user and system time while the locks are
//! held, acquisition excluded; and that less what the connected client spent in 10 s with
//! no lock held, scaled to the hold: the clock watch's `TIME` a second on each node costs
//! a client as much with no lock as with 10,000), the heap bytes per held lock (live bytes of a counting
//! allocator, relative to the connected client before the first acquisition, sampled once
//! a second: the median, what the locks cost between rounds, and the peak, with a round's
//! buffers), the locks lost, and the longest gap between two extensions of one lock. The
//! gaps are read by a poll of every guard once a second on a thread of its own, whose CPU
//! and memory are the harness's and left out (rslock's loop times its own rounds).

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use quorumlock::{AutoExtend, LockConfig, LockGuard, Redlock, Session, SessionOptions};
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

    fn name(self) -> &'static str {
        match self {
            Keeper::Watchdogs => "watchdogs",
            Keeper::Session => "session",
            Keeper::RslockLoop => "rslock",
        }
    }

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
    keepers: Vec<Keeper>,
    /// The session's locks per request.
    chunk: usize,
    hold: Duration,
    ttl: Duration,
    /// How long the connected client's own CPU is measured before the locks are taken.
    idle: Duration,
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
            keepers: Keeper::ALL.to_vec(),
            chunk: SessionOptions::DEFAULT_CHUNK,
            hold: Duration::from_secs(if smoke { 3 } else { 60 }),
            ttl: Duration::from_secs(if smoke { 3 } else { 30 }),
            idle: Duration::from_secs(if smoke { 1 } else { 10 }),
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
                "--keepers" => {
                    options.keepers = value()?
                        .split(',')
                        .map(|name| {
                            Keeper::ALL
                                .into_iter()
                                .find(|keeper| keeper.name() == name)
                                .ok_or(format!("--keepers: {name:?} (watchdogs, session, rslock)"))
                        })
                        .collect::<Result<_, _>>()?
                }
                "--chunk" => {
                    options.chunk = value()?
                        .parse()
                        .map_err(|_| "--chunk: a number of locks per request".to_owned())?
                }
                "--hold" => options.hold = Duration::from_secs(seconds(&value()?)?),
                "--ttl" => options.ttl = Duration::from_secs(seconds(&value()?)?),
                "--bench" => {}
                "--help" => {
                    return Err("options: --locks N[,N..] --keepers watchdogs,session,rslock --chunk LOCKS --hold SECONDS --ttl SECONDS".into())
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
    /// All the process's CPU while the locks were held.
    cpu_us_per_lock_sec: f64,
    /// That, less what the connected client spent with no lock held (the clock watch's
    /// `TIME` a second on each node, the runtime): the CPU of keeping the locks alive.
    keepalive_us_per_lock_sec: f64,
    /// The median of the samples: what the locks cost between rounds.
    heap_per_lock: f64,
    /// The largest sample: with a round's buffers, when one was running.
    heap_peak_per_lock: f64,
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
        for &keeper in &options.keepers {
            cluster.flush_all().await.expect("flush");
            let measured = measure(&cluster, &urls, keeper, locks, options).await;
            println!(
                "{:>7} locks  {:<34} {:>9.0} node requests/s  {:>7.3} µs CPU per lock-second ({:.3} µs less the idle client)  {:>5.0} B per lock (peak {:.0} B)  {} lost  longest gap {:?}",
                measured.locks,
                keeper.label(),
                measured.requests_per_sec,
                measured.cpu_us_per_lock_sec,
                measured.keepalive_us_per_lock_sec,
                measured.heap_per_lock,
                measured.heap_peak_per_lock,
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
         | locks | kept by | node requests/s | CPU per lock-second (less the idle client) | heap per lock (peak) | lost | longest gap |\n\
         |---|---|---|---|---|---|---|\n",
        options.ttl, options.hold
    );
    for m in all {
        out += &format!(
            "| {} | {} | {:.0} | {:.3} µs ({:.3} µs) | {:.0} B ({:.0} B) | {} | {:.2} s |\n",
            m.locks,
            m.keeper.label(),
            m.requests_per_sec,
            m.cpu_us_per_lock_sec,
            m.keepalive_us_per_lock_sec,
            m.heap_per_lock,
            m.heap_peak_per_lock,
            m.lost,
            m.longest_gap.as_secs_f64()
        );
    }
    out += "\n| locks | watchdogs / session: node requests/s | CPU | CPU less the idle client | heap |\n|---|---|---|---|---|\n";
    for size in all.chunk_by(|a, b| a.locks == b.locks) {
        let find = |keeper| size.iter().find(|m| m.keeper == keeper);
        let (Some(watchdogs), Some(session)) = (find(Keeper::Watchdogs), find(Keeper::Session))
        else {
            continue;
        };
        out += &format!(
            "| {} | {:.0}x | {:.1}x | {:.1}x | {:.2}x |\n",
            watchdogs.locks,
            watchdogs.requests_per_sec / session.requests_per_sec.max(f64::MIN_POSITIVE),
            watchdogs.cpu_us_per_lock_sec / session.cpu_us_per_lock_sec.max(f64::MIN_POSITIVE),
            watchdogs.keepalive_us_per_lock_sec
                / session.keepalive_us_per_lock_sec.max(f64::MIN_POSITIVE),
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
            let idle = idle_cpu(options.idle).await;
            // The gap poll's record is the harness's, not a held lock's: taken before the
            // baseline.
            let last: Vec<Instant> = Vec::with_capacity(locks);
            let baseline = LIVE.load(Ordering::Relaxed);
            // Room for exactly the guards, as a service that knows how many it holds
            // would take (collected, the vector would double past them).
            let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
            let session = (keeper == Keeper::Session).then(|| {
                let options = SessionOptions::default().chunk(options.chunk);
                Session::with_options(&lock, options).expect("--chunk")
            });
            // Each lock kept alive as soon as it is won, as a service would: at 100,000
            // locks the acquisitions take longer than the TTL.
            let mut acquired = stream::iter(0..locks)
                .map(|i| acquire(&lock, i))
                .buffer_unordered(64);
            let mut unacquired = 0;
            while let Some(guard) = acquired.next().await {
                let Some(mut guard) = guard else {
                    unacquired += 1;
                    continue;
                };
                match &session {
                    Some(session) => session.keep(&mut guard).expect("joins"),
                    None => guard
                        .auto_extend(AutoExtend::default())
                        .expect("the default interval"),
                }
                guards.push(guard);
            }
            drop(acquired);
            let guards = Arc::new(guards);
            let watch = Watch::start(cluster).await;
            let poll = Poll::start(Arc::clone(&guards), last);
            let heap = sample_heap(&watch, options.hold, baseline).await;
            let (held_for, requests_per_sec, cpu) = watch.stop(cluster).await;
            let (longest, poll_cpu) = poll.stop().await;
            let guards = Arc::into_inner(guards).expect("the poll let go of the guards");
            // A lock never won counts as lost: the contender could not hold it.
            let lost = unacquired + guards.iter().filter(|guard| guard.lost().is_lost()).count();
            if unacquired > 0 {
                eprintln!(
                    "keepalive: {} could not acquire {unacquired} locks",
                    keeper.label()
                );
            }
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
                cpu.saturating_sub(poll_cpu),
                (idle, options.idle),
                heap,
                lost,
                longest,
            )
        }
        Keeper::RslockLoop => {
            let manager = rslock::LockManager::new(urls.to_vec());
            let idle = idle_cpu(options.idle).await;
            let baseline = LIVE.load(Ordering::Relaxed);
            // The extension loop runs from the first lock on, over the list as it grows,
            // as a service would run it: at 100,000 locks the acquisitions take longer than
            // the TTL.
            let held = Arc::new(tokio::sync::RwLock::new(Vec::with_capacity(locks)));
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
                        let failures = extend_all(&manager, &held.read().await, ttl).await;
                        lost.fetch_add(failures, Ordering::Relaxed);
                        let mut gap = gaps.lock().unwrap();
                        *gap = (*gap).max(Instant::now().saturating_duration_since(last));
                        last = round;
                    }
                })
            };
            let mut acquired = stream::iter(0..locks)
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
                .buffer_unordered(64);
            while let Some(lock) = acquired.next().await {
                held.write().await.push(lock);
            }
            drop(acquired);
            let watch = Watch::start(cluster).await;
            let heap = sample_heap(&watch, options.hold, baseline).await;
            let (held_for, requests_per_sec, cpu) = watch.stop(cluster).await;
            extender.abort();
            let longest = *gaps.lock().unwrap();
            let held = held.read().await;
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
                (idle, options.idle),
                heap,
                lost,
                longest,
            )
        }
    }
}

/// Lock `keep:{i}`, tried again for a while: on a loaded machine (100,000 watchdogs'
/// extensions on two cores) the nodes may time out for seconds, and a lock not won is a
/// fact to report, not a panic.
async fn acquire(lock: &Redlock, i: usize) -> Option<LockGuard> {
    let resource = format!("keep:{i}");
    for tries in 1..=20u32 {
        match lock.acquire(&resource).await {
            Ok(guard) => return Some(guard),
            Err(err) if tries == 20 => {
                eprintln!("keepalive: {resource} not acquired after {tries} tries: {err}");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50) * tries).await,
        }
    }
    None
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
    (idle, idle_for): (Duration, Duration),
    heap: Heap,
    lost: usize,
    longest_gap: Duration,
) -> Measured {
    let per_lock_sec =
        |cpu: Duration| cpu.as_secs_f64() * 1e6 / (locks as f64 * held_for.as_secs_f64());
    let idle = idle.mul_f64(held_for.as_secs_f64() / idle_for.as_secs_f64());
    Measured {
        keeper,
        locks,
        held_for,
        requests_per_sec,
        cpu_us_per_lock_sec: per_lock_sec(cpu),
        keepalive_us_per_lock_sec: per_lock_sec(cpu.saturating_sub(idle)),
        heap_per_lock: heap.median as f64 / locks as f64,
        heap_peak_per_lock: heap.peak as f64 / locks as f64,
        lost,
        longest_gap,
    }
}

/// The process's CPU over `idle` with the contender connected and no lock held: the clock
/// watch's `TIME` a second on each node, the runtime's timers.
async fn idle_cpu(idle: Duration) -> Duration {
    let before = process_cpu();
    tokio::time::sleep(idle).await;
    process_cpu().saturating_sub(before)
}

/// The live heap over a hold, relative to the baseline: the median and the largest of one
/// sample a second.
struct Heap {
    median: usize,
    peak: usize,
}

/// Samples the heap once a second until `hold` has passed since `watch` started.
async fn sample_heap(watch: &Watch, hold: Duration, baseline: usize) -> Heap {
    let mut samples = Vec::new();
    while watch.started.elapsed() < hold {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(LIVE.load(Ordering::Relaxed).saturating_sub(baseline));
    }
    samples.sort_unstable();
    Heap {
        median: samples.get(samples.len() / 2).copied().unwrap_or(0),
        peak: samples.last().copied().unwrap_or(0),
    }
}

/// The poll of every guard's last extension, once a second, on a thread of its own, so
/// that its CPU (the same for every contender that polls) can be left out of theirs.
struct Poll {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Duration, Duration)>,
}

impl Poll {
    fn start(guards: Arc<Vec<LockGuard>>, mut last: Vec<Instant>) -> Poll {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let cpu_before = thread_cpu();
                last.extend(guards.iter().map(LockGuard::acquired_at));
                let mut longest = Duration::ZERO;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    for (guard, last) in guards.iter().zip(&mut last) {
                        let now = guard.acquired_at();
                        if now != *last {
                            longest = longest.max(now.saturating_duration_since(*last));
                            *last = now;
                        }
                    }
                }
                drop(guards);
                (longest, thread_cpu().saturating_sub(cpu_before))
            })
        };
        Poll { stop, thread }
    }

    /// The longest gap between two extensions of one lock, and the poll's CPU.
    async fn stop(self) -> (Duration, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join().expect("the poll"))
            .await
            .expect("the poll's join")
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
        let info = commandstats(node).await;
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

/// `INFO commandstats` of `node`, asked again a few times if it still fails.
async fn commandstats(node: &quorumlock_testkit::RedisProcess) -> String {
    let mut tries = 0;
    loop {
        let asked = async {
            let client = node.client().map_err(|err| err.to_string())?;
            // Generous deadlines: a node busy with 100,000 watchdogs' extensions on a
            // loaded machine answers an INFO in seconds, not redis-rs's default 500 ms.
            let patient = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(10)))
                .set_response_timeout(Some(Duration::from_secs(30)));
            let mut connection = client
                .get_multiplexed_async_connection_with_config(&patient)
                .await
                .map_err(|err| err.to_string())?;
            redis::cmd("INFO")
                .arg("commandstats")
                .query_async::<String>(&mut connection)
                .await
                .map_err(|err| err.to_string())
        };
        match asked.await {
            Ok(info) => return info,
            Err(err) if tries < 10 => {
                tries += 1;
                eprintln!("keepalive: INFO commandstats: {err}; asking again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("keepalive: INFO commandstats failed {tries} times: {err}"),
        }
    }
}

/// The process's CPU time so far (every thread's, user and system), to the nanosecond.
fn process_cpu() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The calling thread's CPU time so far.
fn thread_cpu() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn cpu_clock(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clocks are the calling process's and
    // thread's own, which every Linux has.
    let status = unsafe { libc::clock_gettime(clock, &mut now) };
    assert_eq!(status, 0, "clock_gettime of a CPU clock");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
