//! ACL users: a user granted exactly the commands, keys and channels that
//! docs/operations.md ("ACL users") lists runs every operation of the library, and the
//! servers log no denial at all (`ACL LOG`). quorumlock-cli/tests/acl.rs does the same
//! for the CLI's commands.

use std::time::Duration;

use crate::acl_user::{acl_cluster, admin, denials, user_urls, PREFIX};
use quorumlock::{redis, LockConfig, Nodes, Redlock};
use quorumlock_testkit::RedisCluster;

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .key_prefix(PREFIX)
        .retry_count(20)
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// Locks built on the user's own clients (a username in the connection info).
async fn lock_for(cluster: &RedisCluster, config: LockConfig) -> Redlock {
    let clients = user_urls(cluster)
        .iter()
        .map(|url| redis::Client::open(url.as_str()).unwrap())
        .collect::<Vec<_>>();
    // The listed grants leave CONFIG out, so the servers cannot say they fsync every
    // write, and fresh ones abstain for a lease (docs/operations.md, "ACL users"): these
    // tests start their own nodes, and opt out.
    let nodes = Nodes::new(clients).unwrap().restart_abstention(false);
    let lock = Redlock::connect(nodes, config).await.unwrap();
    for name in lock.node_names() {
        assert!(!name.contains("secret"), "{name}");
    }
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_listed_grants_runs_every_library_operation() {
    let cluster = acl_cluster().await;
    let lock = lock_for(&cluster, config()).await;
    let other = lock_for(&cluster, config()).await;

    // Take, check, refresh, release.
    let mut guard = lock.acquire("job").await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.refresh().await.unwrap();
    guard.release().await.unwrap();

    // Several resources; a guard dropped (released in the background).
    let many = lock.acquire_many(&["a", "b"]).await.unwrap();
    assert!(many.is_acquired().await.unwrap());
    drop(many);
    crate::common::eventually(
        "the dropped guard's keys are gone",
        Duration::from_secs(2),
        || async {
            cluster
                .keys_on_running("locks:*")
                .await
                .unwrap()
                .iter()
                .all(Vec::is_empty)
        },
    )
    .await;

    // The fair queue: a waiter queues, is handed the lock at release, and is woken by the
    // announcement (a pub/sub subscription).
    for resources in [&["queued"][..], &["q1", "q2"][..]] {
        let held = lock.acquire_many(resources).await.unwrap();
        let waiter = other.clone();
        let wanted: Vec<String> = resources.iter().map(|r| r.to_string()).collect();
        let waiting = tokio::spawn(async move {
            let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
            waiter
                .acquire_many(&wanted)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        waiting.await.unwrap();
    }

    // Racing waiters (not queued): the watch marker and the release channel.
    let racing = config().to_builder().fair(false).build().unwrap();
    let racer = lock_for(&cluster, racing).await;
    let held = lock.acquire("raced").await.unwrap();
    let waiting =
        tokio::spawn(async move { racer.acquire("raced").await.unwrap().release().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    // Fencing: counters read and raised.
    let fenced = lock_for(
        &cluster,
        config().to_builder().fencing(true).build().unwrap(),
    )
    .await;
    let first = fenced.acquire("fenced").await.unwrap();
    let token = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = fenced.acquire("fenced").await.unwrap();
    assert!(second.fencing_token().unwrap() > token);
    second.release().await.unwrap();

    // Scripts flushed: NOSCRIPT, then SCRIPT LOAD.
    for i in 0..cluster.len() {
        admin(cluster.node(i), &["SCRIPT", "FLUSH"]).await;
    }
    let guard = lock.acquire_many(&["after-flush", "too"]).await.unwrap();
    guard.release().await.unwrap();

    let denied = denials(&cluster).await;
    assert!(denied.is_empty(), "denied: {denied:#?}");
}
