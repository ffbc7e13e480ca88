//! The quorum lock on real redis-server nodes: exclusion, ownership, expiry, refresh,
//! auto-release, node failures and rollback of partial acquisitions.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    acquire_and_release, all_keys, cluster, config, eventually, held_on_every_node, no_keys_left,
    redlock, retrying, slow_nodes_config, NODE_TIMEOUT, TTL,
};
use quorumlock::backend::RedisNode;
use quorumlock::node::LockNode;
use quorumlock::{DistributedLock, LockConfig, LockError, LockToken, NodeError, Redlock};
use quorumlock_testkit::{NodeOptions, RedisCluster};

#[tokio::test]
async fn acquire_sets_the_key_on_every_node_and_release_deletes_it() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    assert_eq!(lock.quorum(), 3);

    let guard = lock.try_acquire("order:1").await.unwrap();
    assert_eq!(guard.resource(), "order:1");
    assert_eq!(
        guard.key(),
        "order:1",
        "the key is the resource name itself"
    );
    assert!(guard.validity() > TTL - Duration::from_millis(500));
    assert!(guard.validity() <= TTL - lock.config().drift_allowance());

    // All five nodes answer on loopback; give the last one its reply time.
    eventually(
        "the token on all 5 nodes",
        Duration::from_secs(2),
        || async {
            let mut on = 0;
            for node in cluster.nodes() {
                on += usize::from(
                    node.get("order:1").await.unwrap().as_deref() == Some(guard.token().as_str()),
                );
            }
            on == 5
        },
    )
    .await;
    for node in cluster.nodes() {
        let pttl = node.pttl("order:1").await.unwrap();
        assert!(
            pttl > 9_000 && pttl <= 10_000,
            "PX ttl set atomically, got {pttl}"
        );
    }

    guard.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_held_lock_is_refused_with_a_tally() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let _held = lock.try_acquire("report").await.unwrap();

    let err = lock.try_acquire("report").await.unwrap_err();
    match &err {
        LockError::Held { resource, tally } => {
            assert_eq!(resource, "report");
            assert!(tally.granted < 3);
            assert!(tally.refused.len() >= 3, "{tally}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(err.to_string().contains("held by another owner"), "{err}");

    // Other resources are independent.
    acquire_and_release(&lock, "report-2").await;
}

#[tokio::test]
async fn concurrent_tasks_never_share_the_critical_section() {
    let cluster = cluster(5).await;
    let config = retrying(200, Duration::from_millis(5), Duration::from_millis(5));
    let lock = redlock(&cluster, config).await;
    let counter = cluster.node(0).client().unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));

    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let lock = lock.clone();
            let counter = counter.clone();
            let inside = Arc::clone(&inside);
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                let mut connection = counter.get_multiplexed_async_connection().await.unwrap();
                for _ in 0..10 {
                    let guard = lock.acquire("counter-lock").await.unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    // A deliberately non-atomic read-pause-write.
                    let value: Option<i64> = redis::cmd("GET")
                        .arg("counter")
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(value.unwrap_or(0) + 1)
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 80);
    assert_eq!(
        cluster.node(0).get("counter").await.unwrap().as_deref(),
        Some("80")
    );
}

#[tokio::test]
async fn nobody_can_release_or_refresh_someone_elses_lock() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(Duration::from_millis(500))).await;
    let first = lock.try_acquire("stock").await.unwrap();

    // A raw compare-and-delete with the wrong token leaves the lock alone. (Pick a node
    // that granted: a node still connecting when the quorum was reached is not waited for.)
    let mut granted = None;
    for (i, process) in cluster.nodes().iter().enumerate() {
        if process.get("stock").await.unwrap().as_deref() == Some(first.token().as_str()) {
            granted = Some(i);
        }
    }
    let url = &cluster.urls()[granted.expect("a quorum of nodes hold the token")];
    let node: Arc<dyn LockNode> = Arc::new(RedisNode::connect(url, NODE_TIMEOUT).await.unwrap());
    let stranger = LockToken::generate();
    assert!(!node.unlock(&[Arc::from("stock")], &stranger).await.unwrap());
    assert!(!node
        .extend(&[Arc::from("stock")], &stranger, TTL)
        .await
        .unwrap());
    assert!(node
        .holds(&[Arc::from("stock")], first.token())
        .await
        .unwrap());

    // Let the first lock expire, and a second owner take it.
    tokio::time::sleep(Duration::from_millis(600)).await;
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
    for process in cluster.nodes() {
        assert_eq!(
            process.get("stock").await.unwrap().as_deref(),
            Some(second.token().as_str())
        );
    }
    assert!(second.is_acquired().await.unwrap());
    second.release().await.unwrap();
}

#[tokio::test]
async fn an_expired_lock_can_be_taken_by_another_owner() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(Duration::from_millis(300))).await;
    let guard = lock.try_acquire("job").await.unwrap();
    assert!(guard.validity() <= Duration::from_millis(300 - 5));
    assert!(matches!(
        lock.try_acquire("job").await,
        Err(LockError::Held { .. })
    ));

    tokio::time::sleep(guard.validity() + Duration::from_millis(50)).await;
    assert!(guard.is_expired());
    assert_eq!(guard.validity(), Duration::ZERO);
    assert!(!guard.is_acquired().await.unwrap());
    let next = lock.try_acquire("job").await.unwrap();
    next.release().await.unwrap();
    drop(guard);
}

#[tokio::test]
async fn refresh_keeps_a_lock_alive_past_several_ttls() {
    let cluster = cluster(5).await;
    let ttl = Duration::from_millis(400);
    let lock = redlock(&cluster, config(ttl)).await;
    let mut guard = lock.try_acquire("lease").await.unwrap();
    let first_deadline = guard.deadline();

    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let validity = guard.refresh().await.unwrap();
        assert!(validity > Duration::from_millis(300), "{validity:?}");
        assert!(validity <= ttl - lock.config().drift_allowance());
    }
    // 900 ms later, more than two TTLs: still ours, and nobody else can take it.
    assert!(guard.deadline() > first_deadline + Duration::from_millis(800));
    assert!(guard.is_acquired().await.unwrap());
    assert!(matches!(
        lock.try_acquire("lease").await,
        Err(LockError::Held { .. })
    ));
    let pttl = cluster.node(2).pttl("lease").await.unwrap();
    assert!(pttl > 200, "PEXPIRE reset the TTL, got {pttl}");

    // The trait's refresh does the same through the lock.
    let validity = lock.refresh(&mut guard).await.unwrap();
    assert!(validity > Duration::from_millis(300));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn refresh_never_revives_a_flushed_lock() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let mut guard = lock.try_acquire("evicted").await.unwrap();
    let deadline = guard.deadline();

    // Keys lost on a majority (an eviction or FLUSHALL on 3 of 5 nodes).
    held_on_every_node(&cluster, &guard).await;
    for i in 0..3 {
        cluster.node(i).flush().await.unwrap();
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
            cluster.node(i).get("evicted").await.unwrap(),
            None,
            "no key created on node {i}"
        );
    }
    // A failed refresh deleted nothing either: the two surviving keys are still ours.
    for i in 3..5 {
        assert_eq!(
            cluster.node(i).get("evicted").await.unwrap().as_deref(),
            Some(guard.token().as_str())
        );
    }
    assert!(!guard.is_acquired().await.unwrap());
}

#[tokio::test]
async fn dropping_a_guard_releases_the_lock_in_the_background() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    {
        let _guard = lock.try_acquire("dropped").await.unwrap();
    }
    no_keys_left(&cluster, Duration::from_secs(2)).await;
    acquire_and_release(&lock, "dropped").await;
}

#[tokio::test]
async fn a_panicking_holder_releases_the_lock() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let holder = lock.clone();
    let outcome = tokio::spawn(async move {
        let _guard = holder.try_acquire("panicky").await.unwrap();
        panic!("the critical section failed");
    })
    .await;
    assert!(outcome.unwrap_err().is_panic());
    no_keys_left(&cluster, Duration::from_secs(2)).await;
    acquire_and_release(&lock, "panicky").await;
}

#[tokio::test]
async fn without_auto_release_a_dropped_guard_keeps_the_lock_until_its_ttl() {
    let cluster = cluster(3).await;
    let config = LockConfig::builder()
        .ttl(Duration::from_millis(500))
        .auto_release(false)
        .retry_count(0)
        .build()
        .unwrap();
    let lock = redlock(&cluster, config).await;
    drop(lock.try_acquire("manual").await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(matches!(
        lock.try_acquire("manual").await,
        Err(LockError::Held { .. })
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    acquire_and_release(&lock, "manual").await;
}

#[tokio::test]
async fn releasing_twice_is_harmless() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
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

#[tokio::test]
async fn a_guard_from_other_connections_is_rejected() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let other = redlock(&cluster, config(TTL)).await;
    let mut guard = lock.try_acquire("mine").await.unwrap();
    let err = other.release(&mut guard).await.unwrap_err();
    assert!(matches!(err, LockError::ForeignGuard { .. }), "{err:?}");
    // A lock derived with another config shares the connections and accepts it.
    let derived = lock.with_config(config(Duration::from_secs(20)));
    derived.release(&mut guard).await.unwrap();
}

#[tokio::test]
async fn two_of_five_nodes_down_still_lock_refresh_and_release() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(0).kill().await.unwrap();
    cluster.node_mut(3).kill().await.unwrap();

    let mut guard = lock.try_acquire("ha").await.unwrap();
    assert!(matches!(
        lock.try_acquire("ha").await,
        Err(LockError::Held { .. })
    ));
    guard.refresh().await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn three_of_five_nodes_down_fail_with_no_quorum_and_leave_no_key() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let urls = cluster.urls();
    for i in [1, 2, 4] {
        cluster.node_mut(i).kill().await.unwrap();
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
            failed.contains(&urls[i].as_str()),
            "{} missing from {err}",
            urls[i]
        );
    }
    for failure in &tally.failures {
        assert!(
            matches!(failure.error, NodeError::Connection(_)),
            "{failure}"
        );
    }
    // The two live nodes granted the lock, then were rolled back before the error returned.
    assert!(
        all_keys(&cluster).await.is_empty(),
        "{:?}",
        all_keys(&cluster).await
    );

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
    assert!(all_keys(&cluster).await.is_empty());

    // Back to a majority: the lock works again without being rebuilt.
    cluster.node_mut(1).restart().await.unwrap();
    eventually(
        "a lock once a majority is back",
        Duration::from_secs(5),
        || async {
            match lock.try_acquire("no-quorum").await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
}

#[tokio::test]
async fn partial_acquisitions_are_rolled_back_on_every_node() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    // Another client (any Redlock library: the key is the bare resource name) holds a
    // majority: nodes 0, 1 and 2.
    for i in 0..3 {
        cluster
            .node(i)
            .set("shared", "foreign-token", Some(TTL))
            .await
            .unwrap();
    }
    let err = lock.try_acquire("shared").await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    for i in 0..3 {
        assert_eq!(
            cluster.node(i).get("shared").await.unwrap().as_deref(),
            Some("foreign-token")
        );
    }
    // Our SET landed on nodes 3 and 4 (or was still in flight when a majority refused):
    // once the rollback ran, neither node holds a key.
    for i in 3..5 {
        assert_eq!(
            cluster.node(i).get("shared").await.unwrap(),
            None,
            "node {i} not rolled back"
        );
    }

    // With the other client on a minority only, we win with a quorum of the rest.
    for i in 0..3 {
        cluster.node(i).flush().await.unwrap();
    }
    for i in 0..2 {
        cluster
            .node(i)
            .set("shared", "foreign-token", Some(TTL))
            .await
            .unwrap();
    }
    let guard = lock.try_acquire("shared").await.unwrap();
    guard.release().await.unwrap();
    eventually(
        "only the foreign minority keys left",
        Duration::from_secs(2),
        || async {
            all_keys(&cluster).await == vec![(0, "shared".to_owned()), (1, "shared".to_owned())]
        },
    )
    .await;
}

#[tokio::test]
async fn a_frozen_node_does_not_stall_acquisition() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    // Warm every connection so the measurement is of the lock, not of connecting.
    acquire_and_release(&lock, "warm").await;
    cluster.node_mut(2).freeze().await.unwrap();

    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let started = Instant::now();
        let guard = lock.try_acquire(&format!("frozen-{i}")).await.unwrap();
        slowest = slowest.max(started.elapsed());
        guard.release().await.unwrap();
    }
    // Early quorum return: the frozen node is not waited for at all; allow one per-node
    // timeout of slack for a loaded machine.
    assert!(
        slowest < NODE_TIMEOUT * 2,
        "slowest acquire took {slowest:?}"
    );
    cluster.node_mut(2).thaw().await.unwrap();
}

#[tokio::test]
async fn a_dropped_acquire_future_leaves_no_key_behind() {
    let mut cluster = cluster(5).await;
    let config = slow_nodes_config();
    let lock = redlock(&cluster, config).await;
    acquire_and_release(&lock, "warm").await;
    for i in 0..3 {
        cluster.node_mut(i).freeze().await.unwrap();
    }
    // Two nodes grant at once; the frozen majority keeps the round open. Cancel it.
    let attempt =
        tokio::time::timeout(Duration::from_millis(200), lock.try_acquire("cancelled")).await;
    assert!(
        attempt.is_err(),
        "the round should still be waiting for the frozen majority"
    );
    // The two live nodes are unlocked in the background.
    no_keys_left(&cluster, Duration::from_secs(2)).await;
    // The frozen nodes apply the queued SET when they wake, then the queued unlock.
    for i in 0..3 {
        cluster.node_mut(i).thaw().await.unwrap();
    }
    no_keys_left(&cluster, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn nodes_down_at_start_join_when_they_come_back() {
    let mut cluster = cluster(3).await;
    for i in 0..3 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    let lock = Redlock::connect(cluster.urls(), config(TTL)).await.unwrap();
    assert!(matches!(
        lock.try_acquire("late").await,
        Err(LockError::NoQuorum { .. })
    ));
    for i in 0..3 {
        cluster.node_mut(i).restart().await.unwrap();
    }
    eventually(
        "a lock once the nodes are up",
        Duration::from_secs(5),
        || async { lock.try_acquire("late").await.is_ok() },
    )
    .await;
}

#[tokio::test]
async fn key_prefix_namespaces_the_keys() {
    let cluster = cluster(3).await;
    let config = LockConfig::builder()
        .key_prefix("locks:")
        .retry_count(0)
        .build()
        .unwrap();
    let lock = redlock(&cluster, config).await;
    let guard = lock.try_acquire("order:7").await.unwrap();
    assert_eq!(guard.key(), "locks:order:7");
    assert_eq!(
        cluster
            .node(0)
            .get("locks:order:7")
            .await
            .unwrap()
            .as_deref(),
        Some(guard.token().as_str())
    );
    assert_eq!(cluster.node(0).get("order:7").await.unwrap(), None);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn passwords_work_and_never_show_in_errors() {
    let mut cluster =
        RedisCluster::start_with(3, NodeOptions::default().with_password("s3cret-pw"))
            .await
            .unwrap();
    let urls = cluster.urls();
    assert!(urls[0].contains("s3cret-pw"));
    let lock = Redlock::connect(&urls, config(TTL)).await.unwrap();
    acquire_and_release(&lock, "auth").await;
    assert!(lock.node_names().all(|name| !name.contains("s3cret-pw")));

    for i in 0..2 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    let err = lock.try_acquire("auth").await.unwrap_err();
    assert!(matches!(err, LockError::NoQuorum { .. }));
    assert!(!format!("{err} {err:?}").contains("s3cret-pw"), "{err}");

    // A wrong password is a Redis error on that node, reported as such.
    let wrong: Vec<String> = urls
        .iter()
        .map(|url| url.replace("s3cret-pw", "wrong"))
        .collect();
    let wrong_lock = Redlock::connect(&wrong[2..], config(TTL)).await.unwrap();
    let err = wrong_lock.try_acquire("auth").await.unwrap_err();
    assert!(!format!("{err:?}").contains("wrong@"), "{err:?}");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
}

#[tokio::test]
async fn bad_node_lists_are_rejected_clearly() {
    let err = Redlock::connect(Vec::<String>::new(), LockConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidNode { .. }), "{err:?}");
    let err = Redlock::connect(
        ["redis://127.0.0.1:1", "redis://127.0.0.1:1"],
        LockConfig::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("listed twice"), "{err}");
    let err = Redlock::connect(["http://:pw@nowhere"], LockConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidNode { .. }), "{err:?}");
    assert!(!err.to_string().contains(":pw@"), "{err}");
}

#[tokio::test]
async fn bad_resource_names_are_rejected_before_any_request() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    assert!(matches!(
        lock.try_acquire("").await,
        Err(LockError::InvalidResource { .. })
    ));
    let long = "k".repeat(quorumlock::MAX_RESOURCE_LEN + 1);
    let err = lock.acquire(&long).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidResource { .. }));
    assert!(!err.is_retryable());
    assert!(all_keys(&cluster).await.is_empty());
}

/// On nodes that answer, an uncontended acquire and release spawn no task: the requests
/// that a decided round no longer awaits are already queued on open connections (each late
/// `SET` before the unlock that deletes it), and the node keeps them until answered. A
/// task per round cost the client about a twentieth of its instructions per cycle.
#[tokio::test(flavor = "current_thread")]
async fn an_uncontended_cycle_on_answering_nodes_spawns_no_task() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    // Let the warm-up's background work finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = metrics.num_alive_tasks();
    for i in 0..20 {
        let guard = lock.try_acquire(&format!("cycle-{i}")).await.unwrap();
        assert_eq!(metrics.num_alive_tasks(), before, "after acquire {i}");
        // ...and yet the lock reaches every node, not only the quorum that answered first.
        held_on_every_node(&cluster, &guard).await;
        guard.release().await.unwrap();
        assert_eq!(metrics.num_alive_tasks(), before, "after release {i}");
    }
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

/// A node request polled once (so queued for the connection's writer) and then dropped
/// still reaches the node. redis-rs skips a queued request whose answer nobody awaits any
/// more, and a round decided by a quorum drops its last requests: a late `SET` that never
/// went out would leave the lock on fewer nodes, a release's last unlock that never went
/// out would leave a key until its TTL.
#[tokio::test(flavor = "current_thread")]
async fn a_node_request_dropped_once_sent_still_reaches_the_node() {
    let cluster = cluster(1).await;
    let node = RedisNode::connect(&cluster.urls()[0], Duration::from_secs(1)).await;
    let node: Arc<dyn LockNode> = Arc::new(node.unwrap());
    let token = LockToken::generate();
    let keys: Vec<Arc<str>> = vec!["sent-then-dropped".into()];
    // Connected first, so that the first poll queues the command at once.
    assert!(!node.holds(&keys, &token).await.unwrap());
    let mut request = node.try_lock(&keys, &token, Duration::from_secs(30));
    assert!(futures::poll!(&mut request).is_pending());
    drop(request);
    eventually("the dropped SET landed", Duration::from_secs(2), || async {
        node.holds(&keys, &token).await.unwrap_or(false)
    })
    .await;
    // The same for an unlock.
    let mut request = node.unlock(&keys, &token);
    assert!(futures::poll!(&mut request).is_pending());
    drop(request);
    eventually(
        "the dropped unlock deleted the key",
        Duration::from_secs(2),
        || async { cluster.keys_on_running("sent-then-dropped").await.unwrap()[0].is_empty() },
    )
    .await;
}
