//! Cohorts on real Redis: a release passes the lock to a task of the same process that
//! waits for it, without a round trip, within its bounds; then it goes back to the nodes,
//! where a waiter of another process gets its turn.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{cluster, no_keys_left, raw_connection, redlock, TTL};
use quorumlock::{DistributedLock, LeaseEnd, LockConfig, Redlock};
use redis::AsyncCommands;
use tokio::time::Instant;

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

/// `tasks` tasks sharing `lock` each do `rounds` read-modify-writes of a counter on node
/// 0 under the lock `resource`, holding it `hold` longer; panics if two of them are ever
/// inside at once, or if the counter misses an increment.
async fn contend(
    lock: &Redlock,
    counter: &redis::aio::MultiplexedConnection,
    resource: &'static str,
    tasks: usize,
    rounds: u64,
    hold: Duration,
) {
    let inside = Arc::new(AtomicBool::new(false));
    let key = format!("{resource}:counter");
    let mut conn = counter.clone();
    let () = conn.set(&key, 0).await.unwrap();
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (lock, inside, key) = (lock.clone(), Arc::clone(&inside), key.clone());
            let mut conn = counter.clone();
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.acquire(resource).await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    let value: u64 = conn.get(&key).await.unwrap();
                    tokio::time::sleep(hold).await;
                    let () = conn.set(&key, value + 1).await.unwrap();
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let value: u64 = conn.get(&key).await.unwrap();
    assert_eq!(value, tasks as u64 * rounds, "lost updates");
    let () = conn.del(&key).await.unwrap();
}

#[tokio::test]
async fn tasks_of_one_process_pass_the_lock_without_round_trips() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
    let counter = raw_connection(cluster.node(0)).await;
    let before = lock.metrics();
    contend(&lock, &counter, "passes", 4, 25, Duration::ZERO).await;
    let after = lock.metrics();
    let passed = after.passed - before.passed;
    let acquired = after.acquired - before.acquired;
    assert_eq!(
        passed + acquired,
        100,
        "each critical section got the lock once"
    );
    // Most go by pass: four tasks keep the line busy, and a run lasts 33 holders.
    assert!(passed >= 50, "{passed} passes, {acquired} acquisitions");
    // A pass sends nothing: the nodes saw a release only per acquisition.
    assert!(after.released - before.released <= acquired);
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn after_the_last_pass_allowed_the_lock_goes_back_to_the_nodes() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(3, Duration::from_secs(1))).await;
    let counter = raw_connection(cluster.node(0)).await;
    let before = lock.metrics();
    contend(&lock, &counter, "bounded", 4, 20, Duration::ZERO).await;
    let after = lock.metrics();
    let passed = after.passed - before.passed;
    let acquired = after.acquired - before.acquired;
    assert_eq!(passed + acquired, 80);
    assert!(passed > 0, "no pass at all");
    // Every run is one acquisition on the nodes and at most three passes.
    assert!(
        passed <= 3 * acquired,
        "{passed} passes, {acquired} acquisitions"
    );
    // Each run ended with a real release on the nodes.
    assert!(after.released - before.released >= acquired);
}

#[tokio::test]
async fn no_pass_after_the_window_closed() {
    let cluster = cluster(3).await;
    // Each hold outlasts the window: the lock is won on the nodes every time.
    let lock = redlock(&cluster, cohort(1_000, Duration::from_millis(5))).await;
    let counter = raw_connection(cluster.node(0)).await;
    let before = lock.metrics();
    contend(&lock, &counter, "window", 3, 5, Duration::from_millis(10)).await;
    let after = lock.metrics();
    assert_eq!(after.passed - before.passed, 0);
    assert_eq!(after.acquired - before.acquired, 15);
}

#[tokio::test]
async fn a_waiter_of_another_process_is_served_within_the_window() {
    let cluster = cluster(3).await;
    // Passes unbounded in number: only the window sends the lock back to the nodes.
    let window = Duration::from_millis(200);
    let local = redlock(&cluster, cohort(u32::MAX, window)).await;
    let remote = redlock(&cluster, cohort(u32::MAX, window)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
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
    // the hand-offs, far below the 4 s the local tasks go on for.
    let asked = Instant::now();
    let guard = remote.acquire("shared").await.unwrap();
    let waited = asked.elapsed();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(waited)).await;
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(
        waited < window * 2 + Duration::from_secs(1),
        "the remote waiter waited {waited:?}"
    );
    assert!(local.metrics().passed >= 20);
}

#[tokio::test]
async fn a_guard_dropped_mid_cohort_passes_the_lock_on() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
    let guard = lock.try_acquire("dropped").await.unwrap();
    let lost = guard.lost();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("dropped").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = lock.metrics();
    drop(guard); // an early return or a panic in the holder's task
    let next = tokio::time::timeout(TTL, waiter).await.unwrap().unwrap();
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
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_released_guard_that_passed_the_lock_holds_nothing() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
    let mut guard = lock.try_acquire("passer").await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("passer").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    lock.release(&mut guard).await.unwrap();
    let next = waiter.await.unwrap();
    assert_eq!(guard.token(), next.token(), "the keys stayed on the nodes");
    assert!(!lock.is_acquired(&guard).await.unwrap());
    let refused = lock.refresh(&mut guard).await.unwrap_err();
    assert!(
        matches!(refused, quorumlock::LockError::NotHeld { .. }),
        "{refused}"
    );
    assert!(
        next.lost().ended().is_none(),
        "refusing the passer ends nothing of the next"
    );
    next.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

/// Drives `future` until its first attempt was refused, so that it took its seat in the
/// line (an acquisition of keys not contended in this process sits down only then).
async fn poll_once<F: std::future::Future + Unpin>(future: &mut F) {
    let refused = tokio::time::timeout(Duration::from_millis(100), future).await;
    assert!(
        refused.is_err(),
        "the acquisition ended while the lock was held"
    );
}

#[tokio::test]
async fn a_pass_to_a_waiter_dropped_before_it_took_it_goes_to_the_next() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
    let guard = lock.try_acquire("gone").await.unwrap();
    // Refused, it takes the process's turn on the nodes...
    let second = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("gone").await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...so this one sits down at once and waits for that turn: the first seat without it.
    let mut first = Box::pin(lock.acquire("gone"));
    poll_once(&mut first).await;
    let before = lock.metrics();
    // The baton goes to that waiter, which is never polled again.
    guard.release().await.unwrap();
    drop(first);
    let next = tokio::time::timeout(TTL, second).await.unwrap().unwrap();
    assert_eq!(lock.metrics().passed - before.passed, 1);
    assert!(next.is_acquired().await.unwrap());
    next.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_pass_to_the_only_waiter_dropped_meanwhile_releases_on_the_nodes() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
    let guard = lock.try_acquire("alone").await.unwrap();
    let mut only = Box::pin(lock.acquire("alone"));
    poll_once(&mut only).await;
    guard.release().await.unwrap();
    drop(only);
    // Nothing left behind: not the lock, not a place in a queue.
    no_keys_left(&cluster, Duration::from_secs(2)).await;
    let again = lock.try_acquire("alone").await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn fencing_turns_cohorts_off() {
    let cluster = cluster(3).await;
    let fenced = cohort(32, Duration::from_secs(1))
        .to_builder()
        .fencing(true)
        .fencing_on_volatile_nodes(true)
        .build()
        .unwrap();
    let lock = redlock(&cluster, fenced).await;
    let counter = raw_connection(cluster.node(0)).await;
    contend(&lock, &counter, "fenced", 3, 5, Duration::ZERO).await;
    assert_eq!(lock.metrics().passed, 0);
}

#[tokio::test]
async fn a_lock_passes_only_to_waiters_of_its_ttl() {
    // A passer's extension may still be in flight when it passes; landing after the
    // receiver's own, it would set the passer's TTL. A shorter one could end the keys
    // before the receiver's deadline, so a lock never passes across TTLs.
    let cluster = cluster(3).await;
    let short = redlock(&cluster, cohort(32, Duration::from_secs(1))).await;
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
    let before = short.metrics().passed + long.metrics().passed;
    guard.release().await.unwrap();
    let next = tokio::time::timeout(TTL, waiter).await.unwrap().unwrap();
    let passed = short.metrics().passed + long.metrics().passed - before;
    assert_eq!(passed, 0, "passed to a waiter of another TTL");
    next.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}
