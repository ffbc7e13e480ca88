//! Fast hand-off: waiters are woken by the release announcement instead of sleeping out
//! their retry delay; with announcements off or lost, the delay still gets them the lock.
//! (`tests/servers/handoff.rs` checks the announcements on a real server's pub/sub.)

use std::time::Duration;

use quorumlock::sim::SimCluster;
use quorumlock::{LockConfig, Redlock};
use tokio::time::Instant;

use crate::support::{client, cluster, retrying, TTL};

/// A long, exact retry delay: a waiter served before it passes was woken by a release.
const DELAY: Duration = Duration::from_millis(1500);

/// How long the holder holds while the other client waits.
const HOLD: Duration = Duration::from_millis(200);

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

/// Holds `handoff` for [`HOLD`] while another client waits for it; returns how long the
/// waiter waited after the release.
async fn wait_after_release(holder: &Redlock, waiter: &Redlock) -> Duration {
    wait_after_release_of(holder, &["handoff"], waiter, "handoff").await
}

/// As [`wait_after_release`], with the holder holding all of `held` and the waiter waiting
/// for `wanted`.
async fn wait_after_release_of(
    holder: &Redlock,
    held: &[&str],
    waiter: &Redlock,
    wanted: &'static str,
) -> Duration {
    let guard = holder.try_acquire_many(held).await.unwrap();
    let waiter = waiter.clone();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(wanted).await.unwrap();
        let got_it = Instant::now();
        guard.release().await.unwrap();
        got_it
    });
    tokio::time::sleep(HOLD).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    guard.release().await.unwrap();
    waiting.await.unwrap() - released
}

/// Two independent clients, each with its own connections, as in two processes.
fn two_clients(cluster: &SimCluster, notify: bool) -> (Redlock, Redlock) {
    (
        client(cluster, "holder", waiting(notify)),
        client(cluster, "waiter", waiting(notify)),
    )
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_by_the_release() {
    let cluster = cluster(5);
    let (holder, waiter) = two_clients(&cluster, true);
    for _ in 0..3 {
        let waited = wait_after_release(&holder, &waiter).await;
        assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    }
}

#[tokio::test(start_paused = true)]
async fn a_single_node_waiter_is_woken_by_the_release() {
    let cluster = cluster(1);
    let (holder, waiter) = two_clients(&cluster, true);
    let waited = wait_after_release(&holder, &waiter).await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
}

#[tokio::test(start_paused = true)]
async fn a_racing_waiter_is_woken_by_the_release() {
    let cluster = cluster(5);
    let holder = client(&cluster, "holder", racing());
    let waiter = client(&cluster, "waiter", racing());
    for _ in 0..3 {
        let waited = wait_after_release(&holder, &waiter).await;
        assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_for_any_of_its_keys() {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", racing());
    let waiter = client(&cluster, "waiter", racing());
    let waited = wait_after_release_of(&holder, &["first", "second"], &waiter, "second").await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
}

/// An announcement nobody waits for costs the node as much as the compare-and-delete: an
/// uncontended release makes none. A waiter's release is announced, on the key's channel.
#[tokio::test(start_paused = true)]
async fn only_a_release_somebody_waits_for_is_announced() {
    let cluster = cluster(1);
    let holder = client(&cluster, "holder", racing());
    let waiter = client(&cluster, "waiter", racing());
    for resource in ["alone", "alone", "other"] {
        holder
            .try_acquire(resource)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let published = cluster.node(0).published();
    assert!(
        published.is_empty(),
        "an uncontended release was announced: {published:?}"
    );

    let waited = wait_after_release(&holder, &waiter).await;
    assert!(waited < DELAY / 3, "woken {waited:?} after the release");
    let channels: Vec<String> = cluster
        .node(0)
        .published()
        .iter()
        .map(|(_, message)| String::from_utf8_lossy(&message.channel).into_owned())
        .collect();
    // The holder's release, and maybe the waiter's own (the mark that somebody waits
    // outlives the wait by up to its TTL).
    assert!(
        !channels.is_empty(),
        "the awaited release was not announced"
    );
    assert!(
        channels
            .iter()
            .all(|channel| channel == "quorumlock:released:handoff"),
        "{channels:?}"
    );
}

/// The waiter's second attempt comes one full delay after its first, which came at once:
/// it gets the lock [`DELAY`] after it started waiting, [`HOLD`] before the release.
fn served_by_the_delay(waited: Duration) {
    assert_eq!(waited, DELAY - HOLD, "served {waited:?} after the release");
}

#[tokio::test(start_paused = true)]
async fn without_announcements_the_retry_delay_still_hands_over() {
    let cluster = cluster(5);
    let (holder, waiter) = two_clients(&cluster, false);
    served_by_the_delay(wait_after_release(&holder, &waiter).await);
}

#[tokio::test(start_paused = true)]
async fn nodes_that_do_not_announce_leave_the_retry_delay_to_hand_over() {
    let cluster = cluster(3);
    cluster.announce_releases(false);
    let (holder, waiter) = two_clients(&cluster, true);
    served_by_the_delay(wait_after_release(&holder, &waiter).await);
}

#[tokio::test(start_paused = true)]
async fn a_lost_announcement_falls_back_to_the_delay() {
    let cluster = cluster(3);
    for node in cluster.nodes() {
        node.lose_announcements(true);
    }
    let (holder, waiter) = two_clients(&cluster, true);
    served_by_the_delay(wait_after_release(&holder, &waiter).await);
    assert!(
        !cluster.node(0).published().is_empty(),
        "the release was announced, and the announcement lost"
    );
}

#[tokio::test(start_paused = true)]
async fn many_waiters_all_get_their_turn_quickly() {
    let cluster = cluster(5);
    // So many retries need a deadline; the test fails long before it.
    let config = LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_delay(Duration::from_millis(500))
        .retry_jitter(Duration::from_millis(250))
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap();
    let lock = client(&cluster, "many", config);
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
    // A release with a waiter of this process passes the lock to it.
    assert_eq!(metrics.acquired + metrics.passed, 80, "{metrics:?}");
}
