//! The lock factory: locks by name sharing one set of connections, per-lock TTL overrides.

use std::time::Duration;

use quorumlock::sim::SimNode;
use quorumlock::{ConfigError, LockConfig, LockError, LockFactory, RedisLock};

use crate::support::{client, cluster, config, TTL};

#[tokio::test(start_paused = true)]
async fn creates_named_locks_with_the_default_or_an_overridden_ttl() {
    let cluster = cluster(3);
    let base = config(TTL);
    let factory = LockFactory::new(client(&cluster, "factory", base));
    assert_eq!(factory.config().ttl(), TTL);

    let orders = factory.create("order-processing").unwrap();
    assert_eq!(orders.resource(), "order-processing");
    assert_eq!(orders.config().ttl(), TTL);
    let report = factory
        .create_with_ttl("daily-report", Duration::from_secs(60))
        .unwrap();
    assert_eq!(report.config().ttl(), Duration::from_secs(60));
    assert_eq!(
        factory.config().ttl(),
        TTL,
        "the override does not leak into the factory"
    );

    let order_guard = orders.acquire().await.unwrap();
    let report_guard = report.try_acquire().await.unwrap();
    assert_eq!(cluster.node(0).ttl("order-processing"), Some(TTL));
    assert_eq!(
        cluster.node(0).ttl("daily-report"),
        Some(Duration::from_secs(60))
    );

    // Both named locks share the lock's connections: the trait's guard operations work
    // across them.
    assert!(matches!(
        orders.try_acquire().await,
        Err(LockError::Held { .. })
    ));
    order_guard.release().await.unwrap();
    report_guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn rejects_bad_names_and_bad_ttls_when_creating() {
    let node = SimNode::new("single");
    let lock = RedisLock::from_nodes([node.to_lock_node()], LockConfig::default()).unwrap();
    let factory = LockFactory::new(lock);
    assert!(matches!(
        factory.create(""),
        Err(LockError::InvalidResource { .. })
    ));
    assert!(matches!(
        factory.create_with_ttl("x", Duration::ZERO),
        Err(LockError::Config(ConfigError::ZeroTtl))
    ));
    // 100 ms is too short for the default 50 ms per-node timeout.
    let err = factory
        .create_with_ttl("x", Duration::from_millis(100))
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Config(ConfigError::NodeTimeoutTooLong { .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("node timeout"), "{err}");
}
