//! Fast hand-off: waiters are woken by the release announcement instead of sleeping out
//! their retry delay; with announcements off, the delay still gets them the lock.

use std::time::Duration;

use crate::common::{cluster, redlock, retrying, TTL};
use futures::StreamExt;
use quorumlock::{LockConfig, Redlock};
use quorumlock_testkit::RedisCluster;
use tokio::time::Instant;

/// A long, exact retry delay: a waiter served before it passes was woken by a release.
const DELAY: Duration = Duration::from_millis(1500);

fn waiting(notify: bool) -> LockConfig {
    retrying(3, DELAY, Duration::ZERO)
        .to_builder()
        .notify_releases(notify)
        .build()
        .unwrap()
}

/// As [`waiting`], for waiters that race for each release instead of queueing.
fn racing() -> LockConfig {
    waiting(true).to_builder().fair(false).build().unwrap()
}

/// Holds `resource` for `hold`, while another task waits for it; returns how long the
/// waiter waited after the release.
async fn wait_after_release(holder: &Redlock, waiter: &Redlock, hold: Duration) -> Duration {
    wait_after_release_of(holder, &["handoff"], waiter, "handoff", hold).await
}

/// As [`wait_after_release`], with the holder holding all of `held` and the waiter waiting
/// for `wanted`.
async fn wait_after_release_of(
    holder: &Redlock,
    held: &[&str],
    waiter: &Redlock,
    wanted: &'static str,
    hold: Duration,
) -> Duration {
    let guard = holder.try_acquire_many(held).await.unwrap();
    let waiter = waiter.clone();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(wanted).await.unwrap();
        let got_it = Instant::now();
        guard.release().await.unwrap();
        got_it
    });
    tokio::time::sleep(hold).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    waiting.await.unwrap() - released
}

async fn two_clients(cluster: &RedisCluster, notify: bool) -> (Redlock, Redlock) {
    // Two independent clients, each with its own connections, as in two processes.
    (
        redlock(cluster, waiting(notify)).await,
        redlock(cluster, waiting(notify)).await,
    )
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release() {
    let cluster = cluster(5).await;
    let (holder, waiter) = two_clients(&cluster, true).await;
    for _ in 0..3 {
        let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
        assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    }
}

#[tokio::test]
async fn a_single_node_waiter_is_woken_by_the_release() {
    let cluster = cluster(1).await;
    let (holder, waiter) = two_clients(&cluster, true).await;
    let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
}

#[tokio::test]
async fn a_racing_waiter_is_woken_by_the_release() {
    let cluster = cluster(5).await;
    let holder = redlock(&cluster, racing()).await;
    let waiter = redlock(&cluster, racing()).await;
    for _ in 0..3 {
        let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
        assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    }
}

#[tokio::test]
async fn a_release_wakes_a_waiter_for_any_of_its_keys() {
    let cluster = cluster(3).await;
    let holder = redlock(&cluster, racing()).await;
    let waiter = redlock(&cluster, racing()).await;
    let hold = Duration::from_millis(200);
    let waited =
        wait_after_release_of(&holder, &["first", "second"], &waiter, "second", hold).await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
}

/// An announcement nobody waits for costs the node as much as the compare-and-delete: an
/// uncontended release makes none. A waiter's release is announced (the control: the
/// subscription below does hear announcements).
#[tokio::test]
async fn only_a_release_somebody_waits_for_is_announced() {
    let cluster = cluster(1).await;
    let mut announcements = cluster
        .node(0)
        .client()
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    announcements.psubscribe("quorumlock:*").await.unwrap();
    let mut announcements = announcements.into_on_message();
    let holder = redlock(&cluster, racing()).await;
    let waiter = redlock(&cluster, racing()).await;
    for resource in ["alone", "alone", "other"] {
        holder
            .try_acquire(resource)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let heard = tokio::time::timeout(Duration::from_millis(300), announcements.next()).await;
    assert!(
        heard.is_err(),
        "an uncontended release was announced: {heard:?}"
    );

    let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    let heard = tokio::time::timeout(Duration::from_secs(1), announcements.next()).await;
    let channel = heard
        .expect("the awaited release was announced")
        .unwrap()
        .get_channel_name()
        .to_owned();
    assert_eq!(channel, "quorumlock:released:handoff");
}

#[tokio::test]
async fn without_announcements_the_retry_delay_still_hands_over() {
    let cluster = cluster(5).await;
    let (holder, waiter) = two_clients(&cluster, false).await;
    let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
    // The waiter's second attempt comes one full delay after its first.
    assert!(waited >= DELAY - Duration::from_millis(250), "{waited:?}");
    assert!(waited < DELAY * 2, "{waited:?}");
}

#[tokio::test]
async fn a_lost_announcement_falls_back_to_the_delay() {
    let cluster = cluster(3).await;
    // The holder does not announce (another Redlock library, say); the waiter listens.
    let holder = redlock(&cluster, waiting(false)).await;
    let waiter = redlock(&cluster, waiting(true)).await;
    let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
    assert!(waited >= DELAY - Duration::from_millis(250), "{waited:?}");
    assert!(waited < DELAY * 2, "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_all_get_their_turn_quickly() {
    let cluster = cluster(5).await;
    // So many retries need a deadline; the test fails long before it.
    let config = LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_delay(Duration::from_millis(500))
        .retry_jitter(Duration::from_millis(250))
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap();
    let lock = redlock(&cluster, config).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = lock.acquire("contended").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // 80 hand-offs; sleeping out the 500 ms delay even once per hand-off would take 40 s.
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let metrics = lock.metrics();
    // + the warm-up; a release with a waiter of this process passes the lock to it.
    assert_eq!(metrics.acquired + metrics.passed, 80 + 1, "{metrics:?}");
}
