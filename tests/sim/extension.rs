//! Keeping locks alive while work runs: the watchdog, the lost-lock signal, the scoped
//! `with` API, acquire deadlines and the metrics. (The chaos suite,
//! `tests/servers/chaos.rs`, loses a majority under auto-extension on real servers.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::{AutoExtend, DistributedLock, LeaseEnd, LockError};
use tokio::time::Instant;

use crate::support::{all_keys, client, cluster, config, retrying, slow_nodes, TTL};

#[tokio::test(start_paused = true)]
async fn auto_extension_keeps_a_lock_alive_past_several_ttls() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(300);
    let lock = client(&cluster, "holder", config(ttl));
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
    // An extension every third of the TTL: 12 in four TTLs.
    let extended = lock.metrics().extended;
    assert!((11..=12).contains(&extended), "{:?}", lock.metrics());

    guard.release().await.unwrap();
    assert_eq!(lost.await, LeaseEnd::Released);
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn losing_a_majority_fires_the_lost_signal_before_the_deadline() {
    let cluster = cluster(5);
    let ttl = Duration::from_secs(1);
    let lock = client(&cluster, "holder", config(ttl));
    let mut guard = lock.try_acquire("leader").await.unwrap();
    guard.auto_extend(AutoExtend::default()).unwrap();
    let lost = guard.lost();

    for i in 0..3 {
        cluster.node(i).crash();
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
    assert_eq!(lock.metrics().lost, 1);
}

#[tokio::test(start_paused = true)]
async fn without_a_watchdog_the_lost_signal_fires_at_the_deadline() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(Duration::from_millis(300)));
    let guard = lock.try_acquire("short").await.unwrap();
    let deadline = guard.deadline();
    let end = guard.lost().await;
    assert_eq!(end, LeaseEnd::Expired);
    assert_eq!(Instant::now(), deadline);
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_stops_at_the_hold_cap() {
    let cluster = cluster(3);
    let ttl = Duration::from_millis(300);
    let lock = client(&cluster, "holder", config(ttl));
    let mut guard = lock.try_acquire("capped").await.unwrap();
    let started = Instant::now();
    let cap = Duration::from_millis(500);
    guard
        .auto_extend(AutoExtend::default().max_hold(cap))
        .unwrap();
    assert_eq!(guard.lost().await, LeaseEnd::Expired);
    let held = started.elapsed();
    // Extended up to the cap, then left to expire: at most cap + one TTL.
    assert!(held >= cap, "{held:?}");
    assert!(held <= cap + ttl, "{held:?}");
    // The keys expire on the nodes just after: the local deadline keeps the drift
    // allowance (here 5 ms) short of the nodes' expiry, and a node keeps a key through
    // its expiry millisecond.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(all_keys(&cluster).len(), 3);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(all_keys(&cluster), []);
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn with_runs_the_work_and_releases() {
    let cluster = cluster(5);
    let lock = client(&cluster, "holder", config(Duration::from_millis(300)));
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
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn with_cancels_the_work_when_the_lock_is_lost() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(Duration::from_millis(300)));
    let finished = Arc::new(AtomicBool::new(false));
    let work_finished = Arc::clone(&finished);
    let flusher = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            // An operator (or eviction) wipes the lock on every node.
            for node in cluster.nodes() {
                node.flush();
            }
        })
    };
    let started = Instant::now();
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
            assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // Found at the first extension, a third of the TTL in.
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work was not cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn with_releases_when_the_work_panics() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
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
    // The release goes out in the background.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_gives_up_at_its_deadline() {
    let cluster = cluster(3);
    let patient = retrying(1_000, Duration::from_millis(30), Duration::from_millis(10));
    let holder = client(&cluster, "holder", config(TTL));
    let lock = client(&cluster, "waiter", patient);
    let _held = holder.try_acquire("busy").await.unwrap();
    let started = Instant::now();
    let timeout = Duration::from_millis(300);
    let err = lock.acquire_timeout("busy", timeout).await.unwrap_err();
    let waited = started.elapsed();
    // Either the last attempt's refusal, or the attempt the deadline cut short.
    assert!(
        matches!(err, LockError::Held { .. } | LockError::TimedOut { .. }),
        "{err:?}"
    );
    // No later than the deadline, and no earlier than the last wait that fits before it.
    assert!(
        waited <= timeout && waited >= timeout - Duration::from_millis(40),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_abandons_a_stuck_attempt_without_leaving_keys() {
    let cluster = cluster(5);
    // Each node is waited for up to 2 s: the slow nodes keep the round open.
    let lock = client(&cluster, "holder", slow_nodes());
    for i in 0..3 {
        cluster.node(i).lose_replies(true);
    }
    let started = Instant::now();
    let err = lock
        .acquire_timeout("stuck", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert!(matches!(err, LockError::TimedOut { .. }), "{err:?}");
    assert!(!err.is_retryable());
    // The two live nodes were unlocked; the frozen ones never applied the lock.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(all_keys(&cluster), []);
    for i in 0..3 {
        cluster.node(i).lose_replies(false);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn metrics_count_what_happened() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
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
