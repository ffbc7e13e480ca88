//! Cohorts on real Redis: a release passes the lock to a task of the same process that
//! waits for it, without a round trip, within its window; then it goes back to the nodes,
//! where a waiter of another process gets its turn. The cohorts' logic (their bounds, a
//! guard dropped mid-cohort, a receiver that went away, fencing, TTLs) is tested on the
//! simulation, `tests/sim/cohort.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{cluster, eventually, no_keys_left, redlock, TTL};
use quorumlock::LockConfig;
use tokio::time::Instant;

/// Far above any hand-off on a loaded machine: only a waiter that is never served hits it.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_waiter_of_another_process_is_served_within_the_window() {
    let cluster = cluster(3).await;
    // Passes unbounded in number: only the window sends the lock back to the nodes. A
    // node timeout that a loaded machine does not reach.
    let window = Duration::from_millis(200);
    let config = LockConfig::builder()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry_count(10_000)
        .acquire_timeout(Duration::from_secs(60))
        .cohort_passes(u32::MAX)
        .cohort_window(window)
        .build()
        .unwrap();
    let local = redlock(&cluster, config.clone()).await;
    let remote = redlock(&cluster, config).await;
    let passed_before = local.metrics().passed;
    // The local tasks go on until the remote waiter was served: without the window, it
    // would never be.
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (lock, stop) = (local.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = lock.acquire("shared").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    // The local tasks pass the lock among themselves...
    eventually("20 passes among the local tasks", SERVED_WITHIN, || async {
        local.metrics().passed - passed_before >= 20
    })
    .await;
    // ...and a waiter of another process still gets it once the window closes: within
    // two windows (the run it joined, and one of a local waiter queued before it), its
    // retry delay and the hand-offs, with a margin for a loaded machine.
    let asked = Instant::now();
    let passed_when_asked = local.metrics().passed;
    let guard = tokio::time::timeout(SERVED_WITHIN, remote.acquire("shared"))
        .await
        .expect("the remote waiter was never served")
        .unwrap();
    let waited = asked.elapsed();
    // The local tasks went on passing the lock while it waited.
    let passed_meanwhile = local.metrics().passed - passed_when_asked;
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(
        waited < window * 2 + Duration::from_millis(1500),
        "the remote waiter waited {waited:?}"
    );
    assert!(
        passed_meanwhile > 0,
        "no pass while the remote waiter waited"
    );
    no_keys_left(&cluster, Duration::from_secs(5)).await;
}
