//! Leader election on real redis-server nodes: one leader at a time with strictly
//! increasing tokens and an observer that follows the terms; two of five nodes down and a
//! frozen one, whose requests a thawed Redis runs late (the simulated node's
//! `lose_replies` loses them). The election's logic (a waiting candidate, a dropped
//! leader, a leader cut off past its TTL, its settings, stale records) is tested on the
//! simulation, `tests/sim/election.rs`.

use std::time::Duration;

use crate::common::{cluster, config, eventually, redlock_on, volatile, TTL};
use futures::StreamExt;
use quorumlock::{Election, LockConfig, LockError};
use quorumlock_testkit::RedisCluster;

/// The test config with fencing (the nodes keep no append-only file: the tests do not
/// restart them) and retries a waiting candidate can follow closely.
fn fenced(ttl: Duration) -> LockConfig {
    config(ttl)
        .to_builder()
        .fencing(true)
        .retry_count(5)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .unwrap()
}

async fn election(cluster: &RedisCluster, ttl: Duration) -> Election {
    let lock = redlock_on(cluster, volatile(cluster.urls()), fenced(ttl)).await;
    Election::new(lock, "billing")
        .unwrap()
        .observe_every(Duration::from_millis(20))
}

/// Whether each node has a line of waiters at `queue`.
async fn in_line(cluster: &RedisCluster, queue: &str) -> Vec<bool> {
    let queues = cluster.keys(queue).await.expect("list the queues");
    queues.iter().map(|keys| !keys.is_empty()).collect()
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

    // The candidate that timed out left the line; the next one waits in it.
    let queue = format!("quorumlock:waiters:{}", leading.guard().key());
    eventually("the line empty", Duration::from_secs(10), || async {
        !in_line(&cluster, &queue).await.contains(&true)
    })
    .await;
    let candidate = {
        let second = second.clone();
        tokio::spawn(async move { second.campaign("host-b").await })
    };
    eventually("the candidate in line", Duration::from_secs(10), || async {
        !in_line(&cluster, &queue).await.contains(&false)
    })
    .await;
    assert!(!candidate.is_finished(), "elected beside a leader");
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
    // The resignation returns once a quorum deleted the term's key; a node the unlock has
    // not reached yet still answers the term's record, and `leader` reports the highest
    // record any answering node holds, so the view empties once the last unlock lands.
    eventually(
        "no leader after the resignation",
        Duration::from_secs(5),
        || async { first.leader().await.unwrap().is_none() },
    )
    .await;
}

/// On a real server only: the thawed node runs the campaign's `SET` that reached it while
/// it was stopped, so it holds the term when a second node goes down and the
/// proclamation finds three of five holding the lock. A simulated node that loses
/// requests (`lose_replies`) never got the `SET`, and the proclamation has no quorum.
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
