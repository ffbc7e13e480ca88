//! Cohorts: a release passes the lock to a task of the same process that waits for it,
//! without a round trip, within its bounds; then it goes back to the nodes, where a waiter
//! of another process gets its turn. (`tests/servers/cohort.rs` checks a pass on real
//! Redis.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::sim::{Applied, Op, Outcome, SimCluster};
use quorumlock::{DistributedLock, LeaseEnd, LockConfig, LockError, LockToken, Redlock};
use tokio::time::Instant;
use tokio_test::task;

use crate::support::{all_keys, client, cluster, pending_for, settle, TTL};

/// Blocking acquires that wait as long as a test can take, with cohorts bounded by
/// `passes` and `window`.
fn cohort(passes: u32, window: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .acquire_timeout(Duration::from_secs(60))
        .cohort_passes(passes)
        .cohort_window(window)
        .build()
        .unwrap()
}

/// `tasks` tasks sharing `lock` each do `rounds` read-modify-writes of a counter under the
/// lock `resource`, holding it `hold` longer (and letting the other tasks run between the
/// read and the write); panics if two of them are ever inside at once, or if the counter
/// misses an increment. Returns the token of each critical section, in the order they ran.
async fn contend(
    lock: &Redlock,
    resource: &'static str,
    tasks: usize,
    rounds: u64,
    hold: Duration,
) -> Vec<LockToken> {
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let sections = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let lock = lock.clone();
            let (inside, counter, sections) = (
                Arc::clone(&inside),
                Arc::clone(&counter),
                Arc::clone(&sections),
            );
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.acquire(resource).await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    sections.lock().unwrap().push(guard.token().clone());
                    let value = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(hold).await;
                    counter.store(value + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        tasks as u64 * rounds,
        "lost updates"
    );
    let sections = sections.lock().unwrap().clone();
    sections
}

/// The lengths of the runs of `sections`: consecutive holders with one token, that is one
/// acquisition on the nodes and the passes that followed it.
fn runs(sections: &[LockToken]) -> Vec<usize> {
    let mut runs: Vec<usize> = Vec::new();
    for (i, token) in sections.iter().enumerate() {
        if i > 0 && sections[i - 1] == *token {
            *runs.last_mut().unwrap() += 1;
        } else {
            runs.push(1);
        }
    }
    runs
}

/// How many releases each node ran that released a key (an acquisition dropped while
/// its requests were in flight, as a waiter whose turn a pass ended is, unlocks too, and
/// mostly finds nothing).
fn releases(cluster: &SimCluster) -> Vec<usize> {
    count_applied(cluster, |op, applied| *op == Op::Unlock && applied.result)
}

/// How many releases each node ran that granted the key to the next waiter (set it to
/// the waiter's token: the direct grant).
fn granted_by_releases(cluster: &SimCluster) -> Vec<usize> {
    count_applied(cluster, |op, applied| {
        *op == Op::Unlock
            && applied.after[0]
                .as_ref()
                .is_some_and(|after| after.reserved_for().is_none())
    })
}

/// How many lock attempts each node granted.
fn grants(cluster: &SimCluster) -> Vec<usize> {
    count_applied(cluster, |op, applied| op.is_lock() && applied.result)
}

/// How many requests each node ran that `counted` counts, given their command and what it
/// did.
fn count_applied(cluster: &SimCluster, counted: impl Fn(&Op, &Applied) -> bool) -> Vec<usize> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.log()
                .iter()
                .filter(|record| match &record.outcome {
                    Outcome::Applied(applied) => counted(&record.op, applied),
                    _ => false,
                })
                .count()
        })
        .collect()
}

/// Nothing is left on any node: not the lock, not a place in a queue, not a watch marker.
async fn no_keys_left(cluster: &SimCluster) {
    settle().await;
    assert_eq!(all_keys(cluster), [], "keys left on the nodes");
}

#[tokio::test(start_paused = true)]
async fn tasks_of_one_process_pass_the_lock_without_round_trips() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let sections = contend(&lock, "passes", 4, 25, Duration::ZERO).await;
    let metrics = lock.metrics();
    let runs = runs(&sections);
    assert_eq!(
        metrics.passed + metrics.acquired,
        100,
        "each critical section got the lock once"
    );
    // Most go by pass: four tasks keep the line busy, and a run lasts 33 holders.
    assert!(metrics.passed >= 50, "{metrics:?}");
    // Each run is one acquisition on the nodes and its passes: the full 33 while other
    // tasks wait; the third ends when the last task with rounds left is alone, and its
    // last three go to the nodes one by one.
    assert_eq!(runs.len() as u64, metrics.acquired, "{runs:?}");
    assert_eq!(runs, [33, 33, 31, 1, 1, 1]);
    // A pass sends nothing: the nodes saw a lock and a release per acquisition only.
    assert!(metrics.released <= metrics.acquired, "{metrics:?}");
    // Each node took the keys once per acquisition: on a lock request, or by a release
    // that granted them to the process's waiter in line.
    let acquired = metrics.acquired as usize;
    let taken: Vec<usize> = grants(&cluster)
        .iter()
        .zip(granted_by_releases(&cluster))
        .map(|(locked, granted)| locked + granted)
        .collect();
    assert_eq!(taken, [acquired; 3], "{metrics:?}");
    assert!(metrics.grants_heard > 0, "{metrics:?}");
    assert_eq!(releases(&cluster), [acquired; 3]);
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn after_the_last_pass_allowed_the_lock_goes_back_to_the_nodes() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(3, Duration::from_secs(1)));
    let sections = contend(&lock, "bounded", 4, 20, Duration::ZERO).await;
    let metrics = lock.metrics();
    let runs = runs(&sections);
    assert_eq!(metrics.passed + metrics.acquired, 80);
    assert!(metrics.passed > 0, "no pass at all");
    // Every run is one acquisition on the nodes and at most three passes; while the four
    // tasks contend, exactly three.
    assert!(metrics.passed <= 3 * metrics.acquired, "{metrics:?}");
    assert_eq!(runs.len() as u64, metrics.acquired, "{runs:?}");
    assert_eq!(runs, [4; 20]);
    // Each run ended with a real release on the nodes.
    assert!(metrics.released >= metrics.acquired, "{metrics:?}");
    let acquired = metrics.acquired as usize;
    assert_eq!(releases(&cluster), [acquired; 3]);
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn no_pass_after_the_window_closed() {
    let cluster = cluster(3);
    // Each hold outlasts the window: the lock is won on the nodes every time.
    let lock = client(&cluster, "cohort", cohort(1_000, Duration::from_millis(5)));
    let sections = contend(&lock, "window", 3, 5, Duration::from_millis(10)).await;
    let metrics = lock.metrics();
    assert_eq!(metrics.passed, 0, "{metrics:?}");
    assert_eq!(metrics.acquired, 15, "{metrics:?}");
    assert_eq!(runs(&sections), [1; 15]);
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn a_waiter_of_another_process_is_served_within_the_window() {
    let cluster = cluster(3);
    // Passes unbounded in number: only the window sends the lock back to the nodes.
    let window = Duration::from_millis(200);
    let local = client(&cluster, "local", cohort(u32::MAX, window));
    let remote = client(&cluster, "remote", cohort(u32::MAX, window));
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (lock, stop, served) = (local.clone(), Arc::clone(&stop), Arc::clone(&served));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = lock.acquire("shared").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    served.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    // The local tasks pass the lock among themselves...
    while local.metrics().passed < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ...and a waiter of another process still gets it once the window closes: within
    // two windows (the run it joined, and one of a local waiter queued before it) and
    // the hand-offs, far below the second the local tasks go on for.
    let asked = Instant::now();
    let guard = remote.acquire("shared").await.unwrap();
    let waited = asked.elapsed();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(waited)).await;
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    // After the first window closed, and by the moment the second did (the nodes answer
    // in no time). A run won by grants counts its window from the refresh the grants were
    // made on, which may be before the release: the second closes a little early then.
    assert!(waited < window * 2, "the remote waiter waited {waited:?}");
    let remote_served = asked + waited - started;
    assert!(
        remote_served > window && remote_served <= window * 2,
        "served {waited:?} after it asked, {:?} after the start",
        asked - started
    );
    assert!(local.metrics().passed >= 20);
    assert!(
        served.load(Ordering::SeqCst) > 500,
        "the local tasks kept going"
    );
}

#[tokio::test(start_paused = true)]
async fn a_guard_dropped_mid_cohort_passes_the_lock_on() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let guard = lock.try_acquire("dropped").await.unwrap();
    let lost = guard.lost();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let next = lock.acquire("dropped").await.unwrap();
            (Instant::now(), next)
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let before = lock.metrics();
    let requests = cluster.log().len();
    let dropped = Instant::now();
    drop(guard); // an early return or a panic in the holder's task
    let (got_it, next) = waiter.await.unwrap();
    assert_eq!(got_it, dropped, "passed at once");
    // A pass sends no lock or release: the receiver only gives up its place in the nodes'
    // queue, which it had as the process's waiter there.
    let sent: Vec<Op> = cluster.log()[requests..]
        .iter()
        .map(|(_, record)| record.op)
        .collect();
    assert_eq!(sent, [Op::LeaveQueue; 3], "a pass sends nothing else");
    assert_eq!(lock.metrics().passed - before.passed, 1);
    assert_eq!(
        lost.ended(),
        Some(LeaseEnd::Released),
        "the passer holds nothing"
    );
    assert!(
        next.lost().ended().is_none(),
        "the receiver's lease is its own"
    );
    assert!(next.is_acquired().await.unwrap());
    next.release().await.unwrap();
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn a_released_guard_that_passed_the_lock_holds_nothing() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let mut guard = lock.try_acquire("passer").await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("passer").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    lock.release(&mut guard).await.unwrap();
    let next = waiter.await.unwrap();
    assert_eq!(guard.token(), next.token(), "the keys stayed on the nodes");
    assert_eq!(crate::support::holding(&cluster, &next), 3);
    assert!(!lock.is_acquired(&guard).await.unwrap());
    let refused = lock.refresh(&mut guard).await.unwrap_err();
    assert!(matches!(refused, LockError::NotHeld { .. }), "{refused}");
    assert!(
        next.lost().ended().is_none(),
        "refusing the passer ends nothing of the next"
    );
    assert_eq!(crate::support::holding(&cluster, &next), 3);
    next.release().await.unwrap();
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn a_pass_to_a_waiter_dropped_before_it_took_it_goes_to_the_next() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let guard = lock.try_acquire("gone").await.unwrap();
    // Refused, it takes the process's turn on the nodes...
    let second = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("gone").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished(), "the waiter got a held lock");
    // ...so this one sits down at once and waits for that turn: the first seat without it.
    let mut first = task::spawn(lock.acquire("gone"));
    pending_for(&mut first, Duration::from_millis(100)).await;
    let before = lock.metrics();
    // The baton goes to that waiter, which is never polled again.
    guard.release().await.unwrap();
    drop(first);
    let next = second.await.unwrap();
    assert_eq!(lock.metrics().passed - before.passed, 1);
    assert!(next.is_acquired().await.unwrap());
    next.release().await.unwrap();
    no_keys_left(&cluster).await;
}

#[tokio::test(start_paused = true)]
async fn a_pass_to_the_only_waiter_dropped_meanwhile_releases_on_the_nodes() {
    let cluster = cluster(3);
    let lock = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let guard = lock.try_acquire("alone").await.unwrap();
    let mut only = task::spawn(lock.acquire("alone"));
    pending_for(&mut only, Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    drop(only);
    // Nothing left behind: not the lock, not a place in a queue.
    no_keys_left(&cluster).await;
    let again = lock.try_acquire("alone").await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fencing_turns_cohorts_off() {
    let cluster = cluster(3);
    let fenced = cohort(32, Duration::from_secs(1))
        .to_builder()
        .fencing(true)
        .build()
        .unwrap();
    let lock = client(&cluster, "cohort", fenced);
    let sections = contend(&lock, "fenced", 3, 5, Duration::ZERO).await;
    assert_eq!(lock.metrics().passed, 0);
    assert_eq!(lock.metrics().acquired, 15);
    assert_eq!(runs(&sections), [1; 15], "every holder mints its own token");
}

#[tokio::test(start_paused = true)]
async fn a_lock_passes_only_to_waiters_of_its_ttl() {
    // A passer's extension may still be in flight when it passes; landing after the
    // receiver's own, it would set the passer's TTL. A shorter one could end the keys
    // before the receiver's deadline, so a lock never passes across TTLs.
    let cluster = cluster(3);
    let short = client(&cluster, "cohort", cohort(32, Duration::from_secs(1)));
    let long = short.with_config(
        cohort(32, Duration::from_secs(1))
            .to_builder()
            .ttl(TTL * 2)
            .build()
            .unwrap(),
    );
    let guard = short.try_acquire("ttls").await.unwrap();
    let waiter = tokio::spawn({
        let long = long.clone();
        async move { long.acquire("ttls").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let before = short.metrics().passed + long.metrics().passed;
    let passer = guard.token().clone();
    guard.release().await.unwrap();
    let next = waiter.await.unwrap();
    let passed = short.metrics().passed + long.metrics().passed - before;
    assert_eq!(passed, 0, "passed to a waiter of another TTL");
    assert_ne!(
        *next.token(),
        passer,
        "won on the nodes, with a token of its own"
    );
    next.release().await.unwrap();
    no_keys_left(&cluster).await;
}
