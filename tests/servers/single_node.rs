//! The single-node lock on a real redis-server (the seed's RedisLockAdapterTest):
//! `SET NX PX` acquire, Lua compare-and-delete release, compare-and-pexpire refresh.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{
    acquire_and_release, cluster, config, eventually, raw_connection, retrying, NODE_TIMEOUT, TTL,
};
use quorumlock::backend::RedisNode;
use quorumlock::node::LockNode;
use quorumlock::{DistributedLock, LockConfig, LockError, LockToken, NodeError, RedisLock};
use quorumlock_testkit::RedisCluster;

async fn single(cluster: &RedisCluster, config: LockConfig) -> RedisLock {
    RedisLock::connect(&cluster.urls()[0], config)
        .await
        .unwrap()
}

#[tokio::test]
async fn acquire_sets_the_token_with_a_ttl_and_release_deletes_it() {
    let cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    let node = cluster.node(0);
    assert_eq!(lock.node_name(), cluster.urls()[0]);

    let guard = lock.try_acquire("order:12345").await.unwrap();
    assert_eq!(
        node.get("order:12345").await.unwrap().as_deref(),
        Some(guard.token().as_str())
    );
    let pttl = node.pttl("order:12345").await.unwrap();
    assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
    assert!(guard.is_acquired().await.unwrap());

    guard.release().await.unwrap();
    assert_eq!(node.get("order:12345").await.unwrap(), None);
}

#[tokio::test]
async fn a_second_owner_is_refused_until_release() {
    let cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    let guard = lock.try_acquire("cron:report").await.unwrap();
    let err = lock.try_acquire("cron:report").await.unwrap_err();
    let LockError::Held { tally, .. } = &err else {
        panic!("expected Held, got {err:?}");
    };
    assert_eq!((tally.nodes, tally.quorum, tally.granted), (1, 1, 0));
    guard.release().await.unwrap();
    acquire_and_release(&lock, "cron:report").await;
}

#[tokio::test]
async fn release_and_refresh_check_the_token() {
    let cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    let guard = lock.try_acquire("stock:42").await.unwrap();
    let node = RedisNode::connect(&cluster.urls()[0], NODE_TIMEOUT).await;
    let node: Arc<dyn LockNode> = Arc::new(node.unwrap());
    let stranger = LockToken::generate();
    assert!(!node
        .unlock(&[Arc::from("stock:42")], &stranger)
        .await
        .unwrap());
    assert!(!node
        .extend(
            &[Arc::from("stock:42")],
            &stranger,
            Duration::from_secs(100)
        )
        .await
        .unwrap());
    let pttl = cluster.node(0).pttl("stock:42").await.unwrap();
    assert!(
        pttl <= 10_000,
        "a stranger's extend changed the TTL: {pttl}"
    );
    assert!(node
        .holds(&[Arc::from("stock:42")], guard.token())
        .await
        .unwrap());
    guard.release().await.unwrap();
    // Extending an absent key does not create it.
    assert!(!node
        .extend(&[Arc::from("stock:42")], &stranger, TTL)
        .await
        .unwrap());
    assert_eq!(cluster.node(0).get("stock:42").await.unwrap(), None);
}

#[tokio::test]
async fn refresh_extends_and_expiry_frees_the_lock() {
    let cluster = cluster(1).await;
    let ttl = Duration::from_millis(300);
    let lock = single(&cluster, config(ttl)).await;
    let mut guard = lock.try_acquire("lease").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let validity = lock.refresh(&mut guard).await.unwrap();
    assert!(validity > Duration::from_millis(200), "{validity:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // 400 ms after acquiring, past the original TTL: still held thanks to the refresh.
    assert!(lock.is_acquired(&guard).await.unwrap());
    assert!(matches!(
        lock.try_acquire("lease").await,
        Err(LockError::Held { .. })
    ));

    tokio::time::sleep(guard.validity() + Duration::from_millis(30)).await;
    assert!(!lock.is_acquired(&guard).await.unwrap());
    assert!(matches!(
        lock.refresh(&mut guard).await,
        Err(LockError::Expired { .. })
    ));
    acquire_and_release(&lock, "lease").await;
}

#[tokio::test]
async fn blocking_acquire_waits_for_the_holder() {
    let cluster = cluster(1).await;
    let patient = retrying(20, Duration::from_millis(50), Duration::from_millis(10));
    let lock = single(&cluster, patient).await;
    let guard = lock.try_acquire("queue").await.unwrap();
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await.unwrap();
    });
    let started = Instant::now();
    let waiter = lock.acquire("queue").await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    holder.await.unwrap();
    waiter.release().await.unwrap();
}

#[tokio::test]
async fn blocking_acquire_gives_up_after_its_retries() {
    let cluster = cluster(1).await;
    let config = retrying(3, Duration::from_millis(40), Duration::ZERO);
    let lock = single(&cluster, config).await;
    let _held = lock.try_acquire("busy").await.unwrap();
    let attempts_before = lock.metrics().attempts;
    let started = Instant::now();
    let err = lock.acquire("busy").await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    // 1 + 3 attempts. The one right after subscribing to release announcements follows at
    // once; the other two wait exactly 40 ms each.
    assert_eq!(lock.metrics().attempts - attempts_before, 4);
    assert!(elapsed >= Duration::from_millis(80), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn a_down_node_is_named_in_the_error() {
    let mut cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    cluster.node_mut(0).kill().await.unwrap();
    let err = lock.try_acquire("down").await.unwrap_err();
    let LockError::NoQuorum { tally, .. } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!(tally.failures.len(), 1);
    assert_eq!(tally.failures[0].node, cluster.urls()[0]);
    assert!(
        matches!(tally.failures[0].error, NodeError::Connection(_)),
        "{err}"
    );

    cluster.node_mut(0).restart().await.unwrap();
    eventually(
        "the lock after a restart",
        Duration::from_secs(5),
        || async { lock.try_acquire("down").await.is_ok() },
    )
    .await;
}

#[tokio::test]
async fn scripts_survive_a_script_flush() {
    let cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    acquire_and_release(&lock, "warm").await; // scripts cached
    let mut raw = raw_connection(cluster.node(0)).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();

    // EVALSHA answers NOSCRIPT; the node loads the script and runs it.
    let mut guard = lock.try_acquire("after-flush").await.unwrap();
    guard.refresh().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(cluster.node(0).get("after-flush").await.unwrap(), None);
}

#[tokio::test]
async fn a_wrong_type_key_is_a_redis_error_not_a_panic() {
    let cluster = cluster(1).await;
    let lock = single(&cluster, config(TTL)).await;
    let guard = lock.try_acquire("typed").await.unwrap();
    // Someone replaces the lock key with a list behind our back.
    let mut raw = raw_connection(cluster.node(0)).await;
    let _: () = redis::cmd("DEL")
        .arg("typed")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("typed")
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = guard.release().await.unwrap_err();
    let Some(tally) = err.tally() else {
        panic!("expected a tally, got {err:?}");
    };
    assert!(
        matches!(tally.failures[0].error, NodeError::Redis(_)),
        "{err}"
    );
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}
