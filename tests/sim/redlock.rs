//! The quorum lock's rules: exclusion, ownership, expiry, refresh, auto-release, node
//! failures and the rollback of partial acquisitions. (`tests/servers/redlock.rs` keeps
//! what a real server shows: the keys and TTLs on Redis, connections, passwords.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::sim::SimCluster;
use quorumlock::{DistributedLock, LockConfig, LockError, LockToken, NodeError};
use tokio::time::Instant;

use crate::support::{all_keys, client, cluster, config, holding, retrying, slow_nodes, TTL};

/// Takes `resource` at once and releases it; panics if either fails.
async fn acquire_and_release(lock: &impl DistributedLock, resource: &str) {
    let guard = lock.try_acquire(resource).await.unwrap();
    guard.release().await.unwrap();
}

/// Lets the requests that a decided round no longer waits for land.
async fn landed() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_is_refused_with_a_tally() {
    let cluster = cluster(5);
    let holder = client(&cluster, "holder", config(TTL));
    let rival = client(&cluster, "rival", config(TTL));
    let _held = holder.try_acquire("report").await.unwrap();
    landed().await;

    let err = rival.try_acquire("report").await.unwrap_err();
    match &err {
        LockError::Held { resource, tally } => {
            assert_eq!(resource, "report");
            assert_eq!(tally.granted, 0);
            assert_eq!(tally.refused.len(), 5, "{tally}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(err.to_string().contains("held by another owner"), "{err}");

    // Other resources are independent.
    acquire_and_release(&rival, "report-2").await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_tasks_never_share_the_critical_section() {
    let cluster = cluster(5);
    let config = retrying(200, Duration::from_millis(5), Duration::from_millis(5));
    let locks: Vec<_> = (0..4)
        .map(|i| client(&cluster, &format!("client-{i}"), config.clone()))
        .collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));

    // Two tasks in each of four clients: passes within a client and hand-offs between them.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let lock = locks[i % 4].clone();
            let inside = Arc::clone(&inside);
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = lock.acquire("counter-lock").await.unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    // A deliberately non-atomic read-pause-write.
                    let value = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counter.store(value + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 80);
}

#[tokio::test(start_paused = true)]
async fn nobody_can_release_or_refresh_someone_elses_lock() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(500);
    let lock = client(&cluster, "owner", config(ttl));
    let first = lock.try_acquire("stock").await.unwrap();

    // A raw compare-and-delete with the wrong token leaves the lock alone.
    let node = cluster.node(0).for_client("stranger").to_lock_node();
    let stranger = LockToken::generate();
    let keys = [Arc::from("stock")];
    assert!(!node.unlock(&keys, &stranger).await.unwrap());
    assert!(!node.extend(&keys, &stranger, TTL).await.unwrap());
    assert!(node.holds(&keys, first.token()).await.unwrap());

    // Let the first lock expire (a node keeps a key through its expiry millisecond), and a
    // second owner take it.
    tokio::time::sleep(ttl + Duration::from_millis(1)).await;
    assert!(first.is_expired());
    let second = lock.try_acquire("stock").await.unwrap();

    let mut first = first;
    let refreshed = first.refresh().await.unwrap_err();
    assert!(
        matches!(refreshed, LockError::Expired { .. }),
        "{refreshed:?}"
    );
    assert!(!first.is_acquired().await.unwrap());
    let released = first.release().await.unwrap_err();
    assert!(
        matches!(released, LockError::NotHeld { .. }),
        "{released:?}"
    );

    // The second owner's keys are untouched on every node.
    landed().await;
    assert_eq!(holding(&cluster, &second), 5);
    assert!(second.is_acquired().await.unwrap());
    second.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_expired_lock_can_be_taken_by_another_owner() {
    let cluster = cluster(3);
    let lock = client(&cluster, "owner", config(Duration::from_millis(300)));
    let guard = lock.try_acquire("job").await.unwrap();
    // The drift allowance: 1 % of the TTL and 2 ms.
    assert_eq!(guard.validity(), Duration::from_millis(300 - 5));
    assert!(matches!(
        lock.try_acquire("job").await,
        Err(LockError::Held { .. })
    ));

    // At the local deadline the lock is gone for its holder; the nodes keep the key until
    // the TTL (and the millisecond of its expiry) is over.
    tokio::time::sleep(guard.validity()).await;
    assert!(guard.is_expired());
    assert_eq!(guard.validity(), Duration::ZERO);
    assert!(!guard.is_acquired().await.unwrap());
    tokio::time::sleep(Duration::from_millis(6)).await;
    let next = lock.try_acquire("job").await.unwrap();
    next.release().await.unwrap();
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn refresh_keeps_a_lock_alive_past_several_ttls() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(400);
    let lock = client(&cluster, "owner", config(ttl));
    let mut guard = lock.try_acquire("lease").await.unwrap();
    let first_deadline = guard.deadline();

    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let validity = guard.refresh().await.unwrap();
        // Rounds take no virtual time: the whole TTL less the drift.
        assert_eq!(validity, ttl - lock.config().drift_allowance());
    }
    // 900 ms later, more than two TTLs: still ours, and nobody else can take it.
    assert_eq!(
        guard.deadline(),
        first_deadline + Duration::from_millis(900)
    );
    assert!(guard.is_acquired().await.unwrap());
    assert!(matches!(
        lock.try_acquire("lease").await,
        Err(LockError::Held { .. })
    ));
    assert_eq!(
        cluster.node(2).ttl("lease"),
        Some(ttl),
        "PEXPIRE reset the TTL"
    );

    // The trait's refresh does the same through the lock.
    let validity = lock.refresh(&mut guard).await.unwrap();
    assert_eq!(validity, ttl - lock.config().drift_allowance());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn refresh_never_revives_a_flushed_lock() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    let mut guard = lock.try_acquire("evicted").await.unwrap();
    let deadline = guard.deadline();

    // Keys lost on a majority (an eviction or FLUSHALL on 3 of 5 nodes).
    landed().await;
    for i in 0..3 {
        cluster.node(i).flush();
    }
    let err = guard.refresh().await.unwrap_err();
    match &err {
        LockError::NotHeld { tally, .. } => assert_eq!(tally.refused.len(), 3, "{tally}"),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert_eq!(
        guard.deadline(),
        deadline,
        "a failed refresh leaves the deadline alone"
    );
    for i in 0..3 {
        assert_eq!(
            cluster.node(i).get("evicted"),
            None,
            "key created on node {i}"
        );
    }
    // A failed refresh deleted nothing either: the two surviving keys are still ours.
    assert_eq!(holding(&cluster, &guard), 2);
    assert!(!guard.is_acquired().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_releases_the_lock_in_the_background() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    {
        let _guard = lock.try_acquire("dropped").await.unwrap();
    }
    landed().await;
    assert_eq!(all_keys(&cluster), []);
    acquire_and_release(&lock, "dropped").await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_holder_releases_the_lock() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    let holder = lock.clone();
    let outcome = tokio::spawn(async move {
        let _guard = holder.try_acquire("panicky").await.unwrap();
        panic!("the critical section failed");
    })
    .await;
    assert!(outcome.unwrap_err().is_panic());
    landed().await;
    assert_eq!(all_keys(&cluster), []);
    acquire_and_release(&lock, "panicky").await;
}

#[tokio::test(start_paused = true)]
async fn without_auto_release_a_dropped_guard_keeps_the_lock_until_its_ttl() {
    let cluster = cluster(3);
    let ttl = Duration::from_millis(500);
    let config = LockConfig::builder()
        .ttl(ttl)
        .auto_release(false)
        .retry_count(0)
        .build()
        .unwrap();
    let lock = client(&cluster, "owner", config);
    drop(lock.try_acquire("manual").await.unwrap());
    tokio::time::sleep(ttl).await;
    assert!(matches!(
        lock.try_acquire("manual").await,
        Err(LockError::Held { .. })
    ));
    // A node keeps a key through the millisecond of its expiry.
    tokio::time::sleep(Duration::from_millis(1)).await;
    acquire_and_release(&lock, "manual").await;
}

#[tokio::test(start_paused = true)]
async fn releasing_twice_is_harmless() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    let mut guard = lock.try_acquire("twice").await.unwrap();
    lock.release(&mut guard).await.unwrap();
    assert!(guard.is_released());
    // Someone else takes the lock; a second release of the old guard must not touch it.
    let other = lock.try_acquire("twice").await.unwrap();
    lock.release(&mut guard).await.unwrap();
    guard.release().await.unwrap();
    assert!(other.is_acquired().await.unwrap());
    other.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_guard_from_other_connections_is_rejected() {
    let cluster = cluster(3);
    let lock = client(&cluster, "owner", config(TTL));
    let other = client(&cluster, "other", config(TTL));
    let mut guard = lock.try_acquire("mine").await.unwrap();
    let err = other.release(&mut guard).await.unwrap_err();
    assert!(matches!(err, LockError::ForeignGuard { .. }), "{err:?}");
    // A lock derived with another config shares the connections and accepts it.
    let derived = lock.with_config(config(Duration::from_secs(20)));
    derived.release(&mut guard).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_of_five_nodes_down_still_lock_refresh_and_release() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    cluster.node(0).crash();
    cluster.node(3).crash();

    let mut guard = lock.try_acquire("ha").await.unwrap();
    assert!(matches!(
        lock.try_acquire("ha").await,
        Err(LockError::Held { .. })
    ));
    guard.refresh().await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn three_of_five_nodes_down_fail_with_no_quorum_and_leave_no_key() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    for i in [1, 2, 4] {
        cluster.node(i).crash();
    }

    let err = lock.try_acquire("no-quorum").await.unwrap_err();
    let LockError::NoQuorum { resource, tally } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!(resource, "no-quorum");
    assert!(tally.granted <= 2);
    let failed: Vec<&str> = tally.failures.iter().map(|f| f.node.as_str()).collect();
    for i in [1, 2, 4] {
        assert!(
            failed.contains(&format!("sim-{i}").as_str()),
            "sim-{i} missing from {err}"
        );
    }
    for failure in &tally.failures {
        assert!(
            matches!(failure.error, NodeError::Connection(_)),
            "{failure}"
        );
    }
    // The two live nodes granted the lock, then were rolled back before the error returned.
    assert_eq!(all_keys(&cluster), []);

    // Blocking acquire retries, then reports the same clear error.
    let retrying = lock.with_config(retrying(
        2,
        Duration::from_millis(20),
        Duration::from_millis(10),
    ));
    assert!(matches!(
        retrying.acquire("no-quorum").await,
        Err(LockError::NoQuorum { .. })
    ));
    assert_eq!(all_keys(&cluster), []);

    // Back to a majority: the lock works again without being rebuilt.
    cluster.node(1).restart(true);
    acquire_and_release(&lock, "no-quorum").await;
}

#[tokio::test(start_paused = true)]
async fn partial_acquisitions_are_rolled_back_on_every_node() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    // Another client (any Redlock library: the key is the bare resource name) holds a
    // majority: nodes 0, 1 and 2.
    let foreign = LockToken::from_string("foreign-token");
    for i in 0..3 {
        cluster.node(i).insert("shared", &foreign, TTL);
    }
    let err = lock.try_acquire("shared").await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    for i in 0..3 {
        assert_eq!(cluster.node(i).get("shared"), Some(foreign.clone()));
    }
    // Our SET landed on nodes 3 and 4: the rollback deleted it before the error returned.
    for i in 3..5 {
        assert_eq!(
            cluster.node(i).get("shared"),
            None,
            "node {i} not rolled back"
        );
    }

    // With the other client on a minority only, we win with a quorum of the rest.
    for i in 0..3 {
        cluster.node(i).flush();
    }
    for i in 0..2 {
        cluster.node(i).insert("shared", &foreign, TTL);
    }
    let guard = lock.try_acquire("shared").await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(
        all_keys(&cluster),
        [(0, "shared".to_owned()), (1, "shared".to_owned())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_frozen_node_does_not_stall_acquisition() {
    let cluster = cluster(5);
    let lock = client(&cluster, "owner", config(TTL));
    cluster.node(2).lose_replies(true);

    for i in 0..5 {
        let started = Instant::now();
        let guard = lock.try_acquire(&format!("frozen-{i}")).await.unwrap();
        // Early quorum return: the frozen node is not waited for at all.
        assert_eq!(started.elapsed(), Duration::ZERO, "acquire {i}");
        guard.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_future_leaves_no_key_behind() {
    let cluster = cluster(5);
    // Each node is waited for up to 2 s: the slow nodes keep the round open.
    let lock = client(&cluster, "owner", slow_nodes());
    for i in 0..3 {
        cluster.node(i).set_request_delay(Duration::from_secs(10));
    }
    // Two nodes grant at once; the slow majority keeps the round open. Cancel it.
    let attempt =
        tokio::time::timeout(Duration::from_millis(200), lock.try_acquire("cancelled")).await;
    assert!(
        attempt.is_err(),
        "the round should still be waiting for the slow majority"
    );
    // The two live nodes are unlocked in the background.
    landed().await;
    assert_eq!(all_keys(&cluster), []);
    // The slow nodes apply the SET when it arrives, then the unlock sent after it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn key_prefix_namespaces_the_keys() {
    let cluster = cluster(3);
    let config = LockConfig::builder()
        .key_prefix("locks:")
        .retry_count(0)
        .build()
        .unwrap();
    let lock = client(&cluster, "owner", config);
    let guard = lock.try_acquire("order:7").await.unwrap();
    assert_eq!(guard.key(), "locks:order:7");
    assert_eq!(
        cluster.node(0).get("locks:order:7").as_ref(),
        Some(guard.token())
    );
    assert_eq!(cluster.node(0).get("order:7"), None);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn bad_resource_names_are_rejected_before_any_request() {
    let cluster = cluster(3);
    let lock = client(&cluster, "owner", config(TTL));
    assert!(matches!(
        lock.try_acquire("").await,
        Err(LockError::InvalidResource { .. })
    ));
    let long = "k".repeat(quorumlock::MAX_RESOURCE_LEN + 1);
    let err = lock.acquire(&long).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidResource { .. }));
    assert!(!err.is_retryable());
    assert_eq!(cluster_requests(&cluster), 0);
}

/// How many requests the nodes of `cluster` received.
fn cluster_requests(cluster: &SimCluster) -> usize {
    cluster.log().len()
}
