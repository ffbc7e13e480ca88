//! A `RedisLock` over a Sentinel-managed master, on a real local deployment
//! ([`SentinelDeployment`]: a master, a replica, one sentinel): it finds the master, follows
//! a failover under a held lock, and a Sentinel URL is refused as a `Redlock` member unless
//! the user opts in.

use std::time::Duration;

use crate::common::{eventually, TTL};
use quorumlock::{LockConfig, LockError, Nodes, RedisLock, Redlock, ReplicaAcks};
use quorumlock_testkit::{RedisCluster, SentinelDeployment};

fn sentinel_config() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        // Room for a replica starved of CPU on a loaded machine: a second per node, and a
        // blocking acquire's few attempts.
        .node_timeout(Duration::from_secs(1))
        .retry_count(3)
        .build()
        .unwrap()
}

/// The Sentinel member at `url`, each grant waiting for its replica.
fn acknowledged(url: &str) -> Nodes {
    Nodes::new(url)
        .unwrap()
        .replica_acks(ReplicaAcks::new(1, Duration::from_millis(800)))
}

#[tokio::test]
async fn a_redis_lock_over_sentinel_follows_a_failover_under_a_held_lock() {
    let mut deployment = SentinelDeployment::start(1)
        .await
        .expect("start a master, a replica and a sentinel (redis-server 7)");
    let lock = RedisLock::connect(acknowledged(&deployment.url()), sentinel_config())
        .await
        .unwrap();
    assert_eq!(deployment.master().await.unwrap(), 0);

    // The master takes the lock; the replica acknowledged it before it counted. (A
    // blocking acquire: a grant that a replica starved of CPU did not acknowledge in time
    // does not count and is undone, and the next attempt gets it.)
    let mut guard = lock.acquire("report:daily").await.unwrap();
    let token = Some(guard.token().as_str().to_owned());
    assert_eq!(
        deployment.server(0).get("report:daily").await.unwrap(),
        token
    );
    assert!(matches!(
        lock.try_acquire("report:daily").await.unwrap_err(),
        LockError::Held { .. }
    ));
    guard.refresh().await.unwrap();

    // The master dies; the sentinel promotes the replica, and the node follows it.
    deployment.server_mut(0).kill().await.unwrap();
    let promoted = deployment.wait_for_failover(0).await.unwrap();
    assert_eq!(promoted, 1);
    eventually(
        "the lock is still held, on the promoted master",
        Duration::from_secs(10),
        || async { guard.is_acquired().await.unwrap_or(false) },
    )
    .await;
    assert_eq!(
        deployment.server(1).get("report:daily").await.unwrap(),
        token
    );
    assert!(matches!(
        lock.try_acquire("report:daily").await.unwrap_err(),
        LockError::Held { .. }
    ));
    guard.release().await.unwrap();
    assert_eq!(
        deployment.server(1).get("report:daily").await.unwrap(),
        None
    );

    // The promoted master has no replica left: a grant cannot be acknowledged, and fails.
    let err = lock.try_acquire("report:daily").await.unwrap_err();
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    let relaxed = RedisLock::connect(
        acknowledged(&deployment.url()).replica_acks(None),
        sentinel_config(),
    )
    .await
    .unwrap();
    // Right after a failover the sentinel may answer for a moment that it knows no master
    // of that name (seen under load: MasterNameNotFoundBySentinel) while it rewrites its
    // state; the node asks again at its next connection.
    eventually(
        "the relaxed lock is granted",
        Duration::from_secs(10),
        || async {
            match relaxed.try_acquire("report:daily").await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_sentinel_url_is_refused_as_a_redlock_member_unless_opted_in() {
    let deployment = SentinelDeployment::start(0).await.unwrap();
    let others = RedisCluster::start(2).await.unwrap();
    let mut urls = others.urls();
    urls.push(deployment.url());
    let plain = sentinel_config();
    let err = Redlock::connect(&urls, plain.clone()).await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidNode { reason, .. } if reason.contains("sentinel_members")),
        "{err:?}"
    );
    let opted_in = Nodes::new(&urls).unwrap().sentinel_members(true);
    let lock = Redlock::connect(opted_in, plain).await.unwrap();
    lock.try_acquire("job")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
