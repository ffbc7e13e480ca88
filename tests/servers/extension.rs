//! Keeping locks alive while work runs: the watchdog, the lost-lock signal, the scoped
//! `with` API, acquire deadlines and the metrics, on real redis-server nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    all_keys, cluster, config, eventually, no_keys_left, redlock, retrying, slow_nodes_config, TTL,
};
use quorumlock::{AutoExtend, DistributedLock, LeaseEnd, LockError};
use tokio::time::Instant;

#[tokio::test]
async fn auto_extension_keeps_a_lock_alive_past_several_ttls() {
    let cluster = cluster(5).await;
    let ttl = Duration::from_millis(300);
    let lock = redlock(&cluster, config(ttl)).await;
    let mut guard = lock.try_acquire("long-job").await.unwrap();
    guard.auto_extend(AutoExtend::default()).unwrap();
    let lost = guard.lost();

    tokio::time::sleep(Duration::from_millis(1200)).await; // four TTLs
    assert!(!lost.is_lost());
    assert!(guard.is_acquired().await.unwrap());
    assert!(
        guard.validity() > Duration::from_millis(100),
        "{:?}",
        guard.validity()
    );
    assert!(matches!(
        lock.try_acquire("long-job").await,
        Err(LockError::Held { .. })
    ));
    assert!(lock.metrics().extended >= 3, "{:?}", lock.metrics());

    guard.release().await.unwrap();
    assert_eq!(lost.await, LeaseEnd::Released);
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn losing_a_majority_fires_the_lost_signal_before_the_deadline() {
    let mut cluster = cluster(5).await;
    let ttl = Duration::from_secs(1);
    let lock = redlock(&cluster, config(ttl)).await;
    let mut guard = lock.try_acquire("leader").await.unwrap();
    guard.auto_extend(AutoExtend::default()).unwrap();
    let lost = guard.lost();

    for i in 0..3 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    // No extension can succeed from here on, so this is the deadline to beat.
    let deadline = guard.deadline();
    let end = tokio::time::timeout(Duration::from_secs(3), lost.wait())
        .await
        .expect("lost signal fired");
    let fired = Instant::now();
    assert!(
        fired < deadline,
        "fired {:?} after the deadline",
        fired - deadline
    );
    match &end {
        LeaseEnd::Lost(error) => assert!(matches!(**error, LockError::NoQuorum { .. }), "{error}"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(lost.is_lost());
    assert!(lock.metrics().lost >= 1);
}

#[tokio::test]
async fn without_a_watchdog_the_lost_signal_fires_at_the_deadline() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(Duration::from_millis(300))).await;
    let guard = lock.try_acquire("short").await.unwrap();
    let deadline = guard.deadline();
    let end = guard.lost().await;
    assert_eq!(end, LeaseEnd::Expired);
    assert!(Instant::now() >= deadline);
}

#[tokio::test]
async fn the_watchdog_stops_at_the_hold_cap() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(Duration::from_millis(300))).await;
    let mut guard = lock.try_acquire("capped").await.unwrap();
    let started = Instant::now();
    guard
        .auto_extend(AutoExtend::default().max_hold(Duration::from_millis(500)))
        .unwrap();
    assert_eq!(guard.lost().await, LeaseEnd::Expired);
    let held = started.elapsed();
    // Extended up to the cap, then left to expire: at most cap + one TTL.
    assert!(held >= Duration::from_millis(500), "{held:?}");
    assert!(held < Duration::from_millis(900), "{held:?}");
    eventually(
        "the keys expire after the cap",
        Duration::from_secs(2),
        || async { all_keys(&cluster).await.is_empty() },
    )
    .await;
    drop(guard);
}

#[tokio::test]
async fn with_runs_the_work_and_releases() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(Duration::from_millis(300))).await;
    let value = lock
        .with("scoped", |lost| async move {
            // Longer than two TTLs: the watchdog keeps the lock.
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert!(!lost.is_lost());
            7
        })
        .await
        .unwrap();
    assert_eq!(value, 7);
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn with_cancels_the_work_when_the_lock_is_lost() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(Duration::from_millis(300))).await;
    let finished = Arc::new(AtomicBool::new(false));
    let work_finished = Arc::clone(&finished);
    let flusher = {
        let urls = cluster.urls();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            // An operator (or eviction) wipes the lock on every node.
            for url in urls {
                let client = redis::Client::open(url).unwrap();
                let mut connection = client.get_multiplexed_async_connection().await.unwrap();
                let _: () = redis::cmd("FLUSHALL")
                    .query_async(&mut connection)
                    .await
                    .unwrap();
            }
        })
    };
    let err = lock
        .with("doomed", |_lost| async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            work_finished.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    flusher.await.unwrap();
    match &err {
        LockError::Lost { resource, end } => {
            assert_eq!(resource, "doomed");
            assert!(
                matches!(end, LeaseEnd::Lost(_) | LeaseEnd::Expired),
                "{end:?}"
            );
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work was not cancelled"
    );
}

#[tokio::test]
async fn with_releases_when_the_work_panics() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let task_lock = lock.clone();
    let outcome = tokio::spawn(async move {
        task_lock
            .with("panics", |_lost| async {
                panic!("boom");
            })
            .await
    })
    .await;
    assert!(outcome.unwrap_err().is_panic());
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn acquire_timeout_gives_up_at_its_deadline() {
    let cluster = cluster(3).await;
    let patient = retrying(1_000, Duration::from_millis(30), Duration::from_millis(10));
    let lock = redlock(&cluster, patient).await;
    let _held = lock.try_acquire("busy").await.unwrap();
    let started = Instant::now();
    let err = lock
        .acquire_timeout("busy", Duration::from_millis(300))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    // Either the last attempt's refusal, or the attempt the deadline cut short.
    assert!(
        matches!(err, LockError::Held { .. } | LockError::TimedOut { .. }),
        "{err:?}"
    );
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(600),
        "{waited:?}"
    );
}

#[tokio::test]
async fn acquire_timeout_abandons_a_stuck_attempt_without_leaving_keys() {
    let mut cluster = cluster(5).await;
    let slow_nodes = slow_nodes_config();
    let lock = redlock(&cluster, slow_nodes).await;
    for i in 0..3 {
        cluster.node_mut(i).freeze().await.unwrap();
    }
    let err = lock
        .acquire_timeout("stuck", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::TimedOut { .. }), "{err:?}");
    assert!(!err.is_retryable());
    no_keys_left(&cluster, Duration::from_secs(2)).await;
    for i in 0..3 {
        cluster.node_mut(i).thaw().await.unwrap();
    }
    no_keys_left(&cluster, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn metrics_count_what_happened() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let before = lock.metrics();
    let mut guard = lock.try_acquire("counted").await.unwrap();
    let _ = lock.try_acquire("counted").await.unwrap_err();
    guard.refresh().await.unwrap();
    guard.release().await.unwrap();
    let after = lock.metrics();
    assert_eq!(after.attempts - before.attempts, 2);
    assert_eq!(after.acquired - before.acquired, 1);
    assert_eq!(after.contended - before.contended, 1);
    assert_eq!(after.extended - before.extended, 1);
    assert_eq!(after.released - before.released, 1);
    // Clones and derived locks share the counters.
    let derived = lock.with_config(config(Duration::from_secs(20)));
    assert_eq!(derived.metrics(), after);
}
