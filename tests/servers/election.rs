//! Leader election on real redis-server nodes: one leader at a time with strictly
//! increasing tokens, observers that follow the terms, two of five nodes down, a frozen
//! node, a leader dropped, and a leader cut off past its TTL by a frozen majority.

use std::time::Duration;

use crate::common::{cluster, config, redlock, TTL};
use futures::StreamExt;
use quorumlock::{ConfigError, Election, LeaseEnd, LockConfig, LockError, Redlock};
use tokio::time::Instant;

/// The test config with fencing (the nodes keep no append-only file: the tests do not
/// restart them) and retries a waiting candidate can follow closely.
fn fenced(ttl: Duration) -> LockConfig {
    config(ttl)
        .to_builder()
        .fencing(true)
        .fencing_on_volatile_nodes(true)
        .retry_count(5)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .unwrap()
}

async fn election(cluster: &quorumlock_testkit::RedisCluster, ttl: Duration) -> Election<Redlock> {
    let lock = redlock(cluster, fenced(ttl)).await;
    Election::new(lock, "billing")
        .unwrap()
        .observe_every(Duration::from_millis(20))
}

#[tokio::test]
async fn one_leader_at_a_time_with_increasing_tokens_and_observers_follow() {
    let cluster = cluster(5).await;
    let first = election(&cluster, TTL).await;
    let second = election(&cluster, TTL).await;
    let mut changes = Box::pin(second.observe());
    assert_eq!(
        changes.next().await.unwrap().unwrap(),
        None,
        "nobody leads yet"
    );

    let leading = first.campaign("host-a").await.unwrap();
    let seen = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!(seen, *leading.leader());
    assert_eq!(
        second.leader().await.unwrap().as_ref(),
        Some(leading.leader())
    );

    // The second candidate waits while the first leads.
    let waiting = second
        .campaign_timeout("host-b", Duration::from_millis(300))
        .await;
    assert!(
        matches!(waiting, Err(LockError::TimedOut { .. })),
        "{waiting:?}"
    );

    let candidate = {
        let second = second.clone();
        tokio::spawn(async move { second.campaign("host-b").await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let old_token = leading.fencing_token();
    leading.resign().await.unwrap();
    let next = candidate.await.unwrap().unwrap();
    assert!(next.fencing_token() > old_token);
    // The observer reports the end of the first term or goes straight to the next one.
    let mut report = changes.next().await.unwrap().unwrap();
    if report.is_none() {
        report = changes.next().await.unwrap().unwrap();
    }
    assert_eq!(report.as_ref(), Some(next.leader()));
    next.resign().await.unwrap();
    assert_eq!(first.leader().await.unwrap(), None);
}

#[tokio::test]
async fn elections_run_with_two_of_five_nodes_down_and_one_frozen_slows_nothing() {
    let mut cluster = cluster(5).await;
    let candidate = election(&cluster, TTL).await;
    cluster.node_mut(0).kill().await.unwrap();
    cluster.node_mut(1).freeze().await.unwrap();
    let started = std::time::Instant::now();
    let leading = candidate.campaign("host-a").await.unwrap();
    assert_eq!(
        candidate.leader().await.unwrap().as_ref(),
        Some(leading.leader())
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    cluster.node_mut(1).thaw().await.unwrap();
    cluster.node_mut(4).kill().await.unwrap(); // two of five down
    let mut leading = leading;
    leading.proclaim("host-a:8080").await.unwrap();
    assert_eq!(
        candidate.leader().await.unwrap().unwrap().value,
        "host-a:8080"
    );
    leading.resign().await.unwrap();
    assert_eq!(candidate.leader().await.unwrap(), None);
}

#[tokio::test]
async fn a_dropped_leader_hands_over_at_once() {
    let cluster = cluster(5).await;
    let first = election(&cluster, TTL).await;
    let second = election(&cluster, TTL).await;
    let leading = first.campaign("host-a").await.unwrap();
    let candidate = tokio::spawn(async move { second.campaign("host-b").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dropped_at = Instant::now();
    drop(leading); // a crash in the leader's task: resigned in the background
    let next = candidate.await.unwrap().unwrap();
    assert!(
        dropped_at.elapsed() < Duration::from_secs(2),
        "long before the 10 s TTL"
    );
    assert_eq!(next.value(), "host-b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_past_its_ttl_is_told_before_the_next_is_elected() {
    let mut cluster = cluster(5).await;
    let ttl = Duration::from_millis(1000);
    let first = election(&cluster, ttl).await;
    let second = election(&cluster, ttl).await;
    let leading = first.campaign("host-a").await.unwrap();
    let lost = leading.lost();
    let deadline_then = leading.deadline();

    // A majority freezes for longer than the TTL: no extension can be confirmed.
    for i in 0..3 {
        cluster.node_mut(i).freeze().await.unwrap();
    }
    let candidate = tokio::spawn(async move {
        let leadership = second.campaign("host-b").await.unwrap();
        (Instant::now(), leadership)
    });
    let end = tokio::time::timeout(Duration::from_secs(3), lost.wait())
        .await
        .expect("the lost signal fires");
    let lost_at = Instant::now();
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end}");
    assert!(
        lost_at <= deadline_then + ttl,
        "fired before the last extended deadline"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    for i in 0..3 {
        cluster.node_mut(i).thaw().await.unwrap();
    }
    let (elected_at, next) = candidate.await.unwrap();
    assert!(
        lost_at < elected_at,
        "the old leader knew before the new one was elected"
    );
    assert!(next.fencing_token() > leading.fencing_token());
}

#[tokio::test]
async fn bad_settings_and_values_are_refused() {
    let cluster = cluster(1).await;
    let unfenced = redlock(&cluster, config(TTL)).await;
    let error = Election::new(unfenced, "billing").unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Config(ConfigError::FencingRequired { .. })
        ),
        "{error}"
    );
    let candidate = election(&cluster, TTL).await;
    let long = "x".repeat(Election::<Redlock>::MAX_VALUE_LEN + 1);
    let error = candidate.campaign(&long).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Config(ConfigError::LeaderValueTooLong { .. })
        ),
        "{error}"
    );
    let fenced_lock = redlock(&cluster, fenced(TTL)).await;
    assert!(matches!(
        Election::new(fenced_lock, "").unwrap_err(),
        LockError::InvalidResource { .. }
    ));
}

#[tokio::test]
async fn a_record_counts_only_while_its_term_holds_the_lock() {
    let cluster = cluster(3).await;
    let candidate = election(&cluster, TTL).await;
    candidate
        .campaign("host-a")
        .await
        .unwrap()
        .resign()
        .await
        .unwrap();
    // The next holder of the lock has not recorded anything yet (it is between winning
    // and proclaiming): the old record, still on the nodes, is not its.
    let plain = redlock(&cluster, fenced(TTL)).await;
    let holder = plain.try_acquire("billing").await.unwrap();
    assert_eq!(candidate.leader().await.unwrap(), None);
    holder.release().await.unwrap();
}
