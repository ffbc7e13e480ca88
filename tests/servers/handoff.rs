//! Fast hand-off over a real server's pub/sub: a queued waiter is woken by the
//! announcement on its client's channel, a racing one by the key's, and only a release
//! somebody waits for is announced. The hand-off's logic (fallbacks to the retry delay,
//! several keys, many waiters) is tested on the simulation, `tests/sim/handoff.rs`.

use std::time::Duration;

use crate::common::{cluster, redlock, retrying};
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
async fn a_racing_waiter_is_woken_by_the_release() {
    let cluster = cluster(5).await;
    let holder = redlock(&cluster, racing()).await;
    let waiter = redlock(&cluster, racing()).await;
    for _ in 0..3 {
        let waited = wait_after_release(&holder, &waiter, Duration::from_millis(200)).await;
        assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    }
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
