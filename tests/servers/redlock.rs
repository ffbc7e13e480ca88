//! The quorum lock on real redis-server nodes: the keys and TTLs a lock leaves on Redis,
//! nodes that come up after the lock was made, passwords, node lists that cannot be
//! served, and the node's own requests (no task per cycle; a request dropped once sent
//! still reaches the server). The lock's rules (exclusion, ownership, expiry, refresh,
//! auto-release, node failures, rollback) are tested on the simulation,
//! `tests/sim/redlock.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    acquire_and_release, cluster, config, eventually, held_on_every_node, no_keys_left, redlock,
    TTL,
};
use quorumlock::backend::RedisNode;
use quorumlock::node::LockNode;
use quorumlock::{LockConfig, LockError, LockToken, Redlock};
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
