//! Settings that would flood the nodes or never end, refused where they meet a lock: on
//! simulated nodes under tokio's paused clock, so that an acquire that retried for months
//! or a watchdog that extended back to back would show within virtual seconds.

use std::time::Duration;

use quorumlock::sim::{Op, SimCluster};
use quorumlock::{AutoExtend, ConfigError, LockConfig, LockError};
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

/// Retries that would run for about 50 days, 1 ms apart, allowed by a deadline of `timeout`.
fn retry_until(timeout: Duration) -> LockConfig {
    LockConfig::builder()
        .retry_count(u32::MAX)
        .retry_delay(Duration::from_millis(1))
        .retry_jitter(Duration::ZERO)
        .fair(false)
        .notify_releases(false)
        .acquire_timeout(timeout)
        .build()
        .unwrap()
}

fn extensions(cluster: &SimCluster) -> usize {
    cluster
        .log()
        .iter()
        .filter(|(_, record)| matches!(record.op, Op::Extend { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_zero_auto_extend_interval_is_refused_and_sends_no_extension() {
    let cluster = SimCluster::new(3);
    let lock = cluster.redlock(LockConfig::default()).unwrap();
    let mut guard = lock.try_acquire("flood").await.unwrap();
    let err = guard
        .auto_extend(AutoExtend::default().every(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::ExtendIntervalTooShort { .. }),
        "{err:?}"
    );
    // Refused means not started: no extension round in a second (about 900 per second
    // per guard before the check).
    tokio::time::sleep(SECOND).await;
    assert_eq!(extensions(&cluster), 0);
    // A sound interval still runs.
    guard
        .auto_extend(AutoExtend::default().every(Duration::from_millis(200)))
        .unwrap();
    tokio::time::sleep(SECOND).await;
    let sent = extensions(&cluster);
    assert!((3 * 4..=3 * 6).contains(&sent), "{sent} extensions");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_configured_acquire_timeout_ends_acquire_and_with() {
    let cluster = SimCluster::new(3);
    let holder = cluster
        .redlock_for("holder", LockConfig::default())
        .unwrap();
    let waiter = cluster
        .redlock_for("waiter", retry_until(2 * SECOND))
        .unwrap();
    let held = holder.try_acquire("busy").await.unwrap();

    // Without the configured deadline these would retry for about 50 days of virtual time.
    let patience = 10 * SECOND;
    let started = Instant::now();
    let result = tokio::time::timeout(patience, waiter.acquire("busy"))
        .await
        .expect("acquire ignored the configured acquire timeout");
    assert!(
        matches!(
            result,
            Err(LockError::Held { .. } | LockError::TimedOut { .. })
        ),
        "{result:?}"
    );
    assert!(started.elapsed() <= 2 * SECOND, "{:?}", started.elapsed());

    let started = Instant::now();
    let result = tokio::time::timeout(patience, waiter.with("busy", |_lost| async {}))
        .await
        .expect("with ignored the configured acquire timeout");
    assert!(result.is_err(), "{result:?}");
    assert!(started.elapsed() <= 2 * SECOND, "{:?}", started.elapsed());

    let started = Instant::now();
    let result = tokio::time::timeout(patience, waiter.acquire_many(&["busy", "other"]))
        .await
        .expect("acquire_many ignored the configured acquire timeout");
    assert!(result.is_err(), "{result:?}");
    assert!(started.elapsed() <= 2 * SECOND, "{:?}", started.elapsed());
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_per_call_timeout_overrides_the_configured_one_and_never_unbounds_it() {
    let cluster = SimCluster::new(3);
    let holder = cluster
        .redlock_for("holder", LockConfig::default())
        .unwrap();
    let waiter = cluster
        .redlock_for("waiter", retry_until(2 * SECOND))
        .unwrap();
    let held = holder.try_acquire("busy").await.unwrap();

    // A shorter per-call timeout wins...
    let started = Instant::now();
    let result = waiter.acquire_timeout("busy", SECOND / 2).await;
    assert!(result.is_err(), "{result:?}");
    assert!(started.elapsed() <= SECOND / 2, "{:?}", started.elapsed());

    // ...and one too long to represent falls back to the configured deadline rather than
    // to none at all.
    let started = Instant::now();
    let result = tokio::time::timeout(10 * SECOND, waiter.acquire_timeout("busy", Duration::MAX))
        .await
        .expect("an unrepresentable timeout removed the deadline");
    assert!(result.is_err(), "{result:?}");
    assert!(started.elapsed() <= 2 * SECOND, "{:?}", started.elapsed());
    held.release().await.unwrap();
}
