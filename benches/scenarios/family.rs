//! The lock family's scenarios, on the same five nodes and in the same run as the others:
//!
//! - `f1`, a read-heavy mix: 8 reader clients and 1 writer client, each doing the same
//!   short piece of work under the lock, on the read-write lock (with writer preference,
//!   and without) and on the mutex doing the same work. Readers must overlap: the table
//!   gives the concurrency they reached, and the writer's wait shows whether it starved.
//! - `f2`, a semaphore with K = 4 and 16 clients: the permits in use over time (the share
//!   of the window spent with 0 to 4 in use), the waits, the throughput.
//!
//! Every client has a lock (and connections) of its own, as separate processes would.
//! What must hold in every run, smoke or full: no writer ever sees a reader, the
//! semaphore never has more than K holders, and every client completes work.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockConfig, LockGuard, Redlock, RwLock, Semaphore};
use quorumlock_testkit::measure::{histogram, record, Histogram};

use crate::options::Options;
use crate::stats::{fmt_rate, fmt_us, median, quantile_us as quantile};

/// The work every holder does under the lock.
const WORK: Duration = Duration::from_millis(2);
/// The writer's pause between two writes: a read-heavy mix.
const WRITER_PAUSE: Duration = Duration::from_millis(10);
/// The semaphore's work under a permit.
const PERMIT_WORK: Duration = Duration::from_millis(5);
const READERS: usize = 8;
const PERMITS: u32 = 4;
const PERMIT_CLIENTS: usize = 16;
/// How often the holders are counted.
const SAMPLE_EVERY: Duration = Duration::from_millis(1);

/// The settings of every client: quick retries (the read-write lock and the semaphore wait
/// on their retry delay; the mutex queues and is woken by the release), no giving up.
fn config() -> LockConfig {
    LockConfig::builder()
        .retry_count(1_000_000)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(5))
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .expect("config")
}

/// How the read-heavy mix takes its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mix {
    RwLock { writer_preference: bool },
    Mutex,
}

impl Mix {
    fn label(self) -> &'static str {
        match self {
            Mix::RwLock {
                writer_preference: true,
            } => "read-write lock",
            Mix::RwLock {
                writer_preference: false,
            } => "read-write lock, no writer preference",
            Mix::Mutex => "mutex (same work)",
        }
    }
}

/// One run of the read-heavy mix.
struct MixRun {
    reads: u64,
    writes: u64,
    elapsed: Duration,
    reader_wait: Histogram<u64>,
    writer_wait: Histogram<u64>,
    /// Readers holding at once: the mean over the samples, and the most.
    mean_readers: f64,
    most_readers: usize,
    violations: u64,
}

/// One run of the semaphore.
struct PermitRun {
    acquisitions: u64,
    elapsed: Duration,
    wait: Histogram<u64>,
    /// The share of samples with 0 to K permits in use.
    in_use: Vec<f64>,
    mean_in_use: f64,
    violations: u64,
}

/// Runs the family's scenarios that `options` wants on `urls`: the markdown tables, and
/// what failed.
pub async fn run(options: &Options, urls: &[String]) -> (String, Vec<String>) {
    let mut tables = String::new();
    let mut failures = Vec::new();
    if options.wants("f1") {
        println!("== f1. read-heavy mix: {READERS} readers, 1 writer, one lock, 5 nodes");
        let mixes = [
            Mix::RwLock {
                writer_preference: true,
            },
            Mix::RwLock {
                writer_preference: false,
            },
            Mix::Mutex,
        ];
        let mut runs: Vec<(Mix, Vec<MixRun>)> =
            mixes.iter().map(|&mix| (mix, Vec::new())).collect();
        for rep in 0..options.reps {
            let mut order: Vec<usize> = (0..mixes.len()).collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for index in order {
                let mix = mixes[index];
                let run = read_heavy(urls, mix, options.window(Duration::from_millis(2_000))).await;
                println!(
                    "   rep {rep} {:<38} reads {:>9} writes {:>8} readers at once {:.2} (max {}) \
                     read wait p99 {:>9} write wait p50 {:>9} p99 {:>9}",
                    mix.label(),
                    fmt_rate(Some(per_sec(run.reads, run.elapsed))),
                    fmt_rate(Some(per_sec(run.writes, run.elapsed))),
                    run.mean_readers,
                    run.most_readers,
                    fmt_us(quantile(&run.reader_wait, 0.99)),
                    fmt_us(quantile(&run.writer_wait, 0.5)),
                    fmt_us(quantile(&run.writer_wait, 0.99)),
                );
                if run.violations > 0 {
                    failures.push(format!(
                        "f1 {}: a writer held with readers {} times",
                        mix.label(),
                        run.violations
                    ));
                }
                if run.reads == 0 || run.writes == 0 {
                    failures.push(format!("f1 {}: no read or no write completed", mix.label()));
                }
                runs[index].1.push(run);
            }
        }
        tables.push_str(&mix_table(&runs));
    }
    if options.wants("f2") {
        println!("== f2. semaphore, K = {PERMITS}, {PERMIT_CLIENTS} clients, 5 nodes");
        let mut runs = Vec::new();
        for rep in 0..options.reps {
            let run = permits(urls, options.window(Duration::from_millis(2_000))).await;
            println!(
                "   rep {rep} acquisitions {:>9} permits in use {:.2} of {PERMITS} wait p50 {:>9} p99 {:>9}",
                fmt_rate(Some(per_sec(run.acquisitions, run.elapsed))),
                run.mean_in_use,
                fmt_us(quantile(&run.wait, 0.5)),
                fmt_us(quantile(&run.wait, 0.99)),
            );
            if run.violations > 0 {
                failures.push(format!(
                    "f2: more than {PERMITS} holders {} times",
                    run.violations
                ));
            }
            if run.acquisitions == 0 {
                failures.push("f2: no permit was taken".to_owned());
            }
            runs.push(run);
        }
        tables.push_str(&permit_table(&runs));
    }
    (tables, failures)
}

fn per_sec(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// One client's lock over `urls`.
async fn connect(urls: &[String]) -> Redlock {
    Redlock::connect(urls, config()).await.expect("connect")
}

/// Counts holders every millisecond until `stop`: the mean and the share at each count.
async fn sample(
    holders: Arc<AtomicUsize>,
    until: Instant,
    buckets: usize,
) -> (f64, usize, Vec<u64>) {
    let mut counts = vec![0u64; buckets + 1];
    let (mut sum, mut samples, mut most) = (0u64, 0u64, 0usize);
    while Instant::now() < until {
        let now = holders.load(Ordering::SeqCst);
        counts[now.min(buckets)] += 1;
        sum += now as u64;
        samples += 1;
        most = most.max(now);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    (sum as f64 / samples.max(1) as f64, most, counts)
}

async fn read_heavy(urls: &[String], mix: Mix, window: Duration) -> MixRun {
    let readers = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..=READERS {
        clients.push(connect(urls).await);
    }
    let started = Instant::now();
    let until = started + window;
    let mut tasks = Vec::new();
    for (index, lock) in clients.into_iter().enumerate() {
        let writer = index == READERS;
        let (readers, writing, violations) = (
            Arc::clone(&readers),
            Arc::clone(&writing),
            Arc::clone(&violations),
        );
        tasks.push(tokio::spawn(async move {
            let rwlock = RwLock::new(lock.clone(), "f1-mix").expect("rwlock");
            let rwlock = match mix {
                Mix::RwLock { writer_preference } => rwlock.writer_preference(writer_preference),
                Mix::Mutex => rwlock,
            };
            let mut waits = histogram();
            let mut done = 0u64;
            while Instant::now() < until {
                if writer {
                    tokio::time::sleep(WRITER_PAUSE).await;
                }
                let asked = Instant::now();
                let guard: LockGuard = match (mix, writer) {
                    (Mix::Mutex, _) => lock.acquire("f1-mix").await,
                    (_, true) => rwlock.write().await,
                    (_, false) => rwlock.read().await,
                }
                .expect("the lock, within the retries");
                record(&mut waits, asked.elapsed());
                if writer {
                    writing.fetch_add(1, Ordering::SeqCst);
                    if readers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) > 0 && mix != Mix::Mutex {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(WORK).await;
                if writer {
                    writing.fetch_sub(1, Ordering::SeqCst);
                } else {
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                let _ = guard.release().await;
                done += 1;
            }
            (writer, done, waits)
        }));
    }
    let (mean_readers, most_readers, _) = sample(Arc::clone(&readers), until, READERS).await;
    let (mut reads, mut writes) = (0, 0);
    let (mut reader_wait, mut writer_wait) = (histogram(), histogram());
    for task in tasks {
        let (writer, done, waits) = task.await.expect("a client task");
        if writer {
            writes += done;
            writer_wait.add(&waits).expect("same bounds");
        } else {
            reads += done;
            reader_wait.add(&waits).expect("same bounds");
        }
    }
    MixRun {
        reads,
        writes,
        elapsed: started.elapsed(),
        reader_wait,
        writer_wait,
        mean_readers,
        most_readers,
        violations: violations.load(Ordering::SeqCst),
    }
}

async fn permits(urls: &[String], window: Duration) -> PermitRun {
    let in_use = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..PERMIT_CLIENTS {
        clients.push(connect(urls).await);
    }
    let started = Instant::now();
    let until = started + window;
    let mut tasks = Vec::new();
    for lock in clients {
        let (in_use, violations) = (Arc::clone(&in_use), Arc::clone(&violations));
        tasks.push(tokio::spawn(async move {
            let semaphore = Semaphore::new(lock, "f2-uploads", PERMITS).expect("semaphore");
            let mut waits = histogram();
            let mut done = 0u64;
            while Instant::now() < until {
                let asked = Instant::now();
                let permit = semaphore
                    .acquire()
                    .await
                    .expect("a permit, within the retries");
                record(&mut waits, asked.elapsed());
                if in_use.fetch_add(1, Ordering::SeqCst) >= PERMITS as usize {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(PERMIT_WORK).await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                let _ = permit.release().await;
                done += 1;
            }
            (done, waits)
        }));
    }
    let (mean_in_use, _, counts) = sample(Arc::clone(&in_use), until, PERMITS as usize).await;
    let mut wait = histogram();
    let mut acquisitions = 0;
    for task in tasks {
        let (done, waits) = task.await.expect("a client task");
        acquisitions += done;
        wait.add(&waits).expect("same bounds");
    }
    let samples = counts.iter().sum::<u64>().max(1) as f64;
    PermitRun {
        acquisitions,
        elapsed: started.elapsed(),
        wait,
        in_use: counts.iter().map(|&n| n as f64 / samples).collect(),
        mean_in_use,
        violations: violations.load(Ordering::SeqCst),
    }
}

fn mix_table(runs: &[(Mix, Vec<MixRun>)]) -> String {
    let mut table = format!(
        "\n### Read-heavy mix: {READERS} readers, 1 writer (every {} between writes), {} of work \
         under the lock\n\nMedians over the repetitions. \"Readers at once\" is the mean number of \
         readers holding the lock, sampled every millisecond, and the most seen.\n\n\
         | lock | reads/s | writes/s | readers at once (max) | read wait p50 | read wait p99 | write wait p50 | write wait p99 |\n\
         |---|---|---|---|---|---|---|---|\n",
        fmt_us(Some(WRITER_PAUSE.as_micros() as f64)),
        fmt_us(Some(WORK.as_micros() as f64)),
    );
    for (mix, runs) in runs {
        let m = |f: &dyn Fn(&MixRun) -> Option<f64>| median(runs.iter().map(f));
        table.push_str(&format!(
            "| {} | {} | {} | {:.2} ({:.0}) | {} | {} | {} | {} |\n",
            mix.label(),
            fmt_rate(m(&|r| Some(per_sec(r.reads, r.elapsed)))),
            fmt_rate(m(&|r| Some(per_sec(r.writes, r.elapsed)))),
            m(&|r| Some(r.mean_readers)).unwrap_or(0.0),
            m(&|r| Some(r.most_readers as f64)).unwrap_or(0.0),
            fmt_us(m(&|r| quantile(&r.reader_wait, 0.5))),
            fmt_us(m(&|r| quantile(&r.reader_wait, 0.99))),
            fmt_us(m(&|r| quantile(&r.writer_wait, 0.5))),
            fmt_us(m(&|r| quantile(&r.writer_wait, 0.99))),
        ));
    }
    table
}

fn permit_table(runs: &[PermitRun]) -> String {
    let m = |f: &dyn Fn(&PermitRun) -> Option<f64>| median(runs.iter().map(f));
    let mut table = format!(
        "\n### Semaphore: K = {PERMITS}, {PERMIT_CLIENTS} clients, {} under each permit\n\n\
         Medians over the repetitions. The share of the window with n permits in use is \
         sampled every millisecond.\n\n\
         | acquisitions/s | permits in use (mean) | wait p50 | wait p99 | wait max |",
        fmt_us(Some(PERMIT_WORK.as_micros() as f64)),
    );
    for n in 0..=PERMITS {
        table.push_str(&format!(" {n} in use |"));
    }
    table.push_str("\n|---|---|---|---|---|");
    for _ in 0..=PERMITS {
        table.push_str("---|");
    }
    table.push_str(&format!(
        "\n| {} | {:.2} | {} | {} | {} |",
        fmt_rate(m(&|r| Some(per_sec(r.acquisitions, r.elapsed)))),
        m(&|r| Some(r.mean_in_use)).unwrap_or(0.0),
        fmt_us(m(&|r| quantile(&r.wait, 0.5))),
        fmt_us(m(&|r| quantile(&r.wait, 0.99))),
        fmt_us(m(&|r| quantile(&r.wait, 1.0))),
    ));
    for n in 0..=PERMITS as usize {
        let share = m(&|r| r.in_use.get(n).copied()).unwrap_or(0.0);
        table.push_str(&format!(" {:.0} % |", share * 100.0));
    }
    table.push('\n');
    table
}
