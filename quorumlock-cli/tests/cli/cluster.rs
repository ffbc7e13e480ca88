//! The CLI on a Redis Cluster member: `--nodes redis+cluster://...` takes and reports the
//! lock, `status` names the master that serves the lock's slot, and `release` deletes a
//! lock by its token there and on a Sentinel-managed master (`redis+sentinel://`).

use std::time::Duration;

use quorumlock::{LockConfig, RedisLock};
use quorumlock_testkit::{SentinelDeployment, ShardedCluster};
use tokio::process::Command;

use crate::support::{bare, code, output, stderr, stdout, FOREIGN_TOKEN};

/// A three-master cluster, a `quorumlock` command with it as the one node, and a
/// `RedisLock` on it.
async fn cluster_member() -> (ShardedCluster, impl Fn() -> Command, RedisLock) {
    let cluster = ShardedCluster::start(3, 0)
        .await
        .expect("start a local Redis Cluster (redis-server 7)");
    // In `--nodes` commas separate members: a member's seeds are separated by semicolons.
    let member = cluster.url().replace(',', ";");
    let quorumlock = move || {
        let mut command = bare();
        command.env("QUORUMLOCK_NODES", &member);
        command
    };
    let config = LockConfig::builder()
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let lock = RedisLock::connect(&cluster.url(), config).await.unwrap();
    (cluster, quorumlock, lock)
}

#[tokio::test]
async fn status_names_the_master_of_the_locks_slot_and_run_takes_the_lock() {
    let (cluster, quorumlock, lock) = cluster_member().await;
    let run = output(quorumlock().args(["run", "-r", "nightly", "--", "true"])).await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));

    let guard = lock.try_acquire("nightly").await.unwrap();
    let owner = cluster.owner_of("{nightly}").await.unwrap();
    let slot = cluster.slot_of("{nightly}").await.unwrap();

    let status = output(quorumlock().args(["status", "nightly"])).await;
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let text = stdout(&status);
    assert!(
        text.contains(&format!("slot {slot} on {}", cluster.node(owner).address())),
        "{text}"
    );
    assert!(
        text.contains(&format!("held by {}", guard.token().as_str())),
        "{text}"
    );
    assert!(text.contains("(key \"{nightly}\")"), "{text}");

    let busy = output(quorumlock().args(["run", "-r", "nightly", "--", "true"])).await;
    assert_ne!(code(&busy), 0, "{}", stdout(&busy));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn release_deletes_a_lock_on_a_cluster_member_by_its_token() {
    let (cluster, quorumlock, lock) = cluster_member().await;
    let guard = lock.try_acquire("nightly").await.unwrap();
    let token = guard.token().as_str().to_owned();
    let owner = cluster.owner_of("{nightly}").await.unwrap();
    let value_on_owner = || async { cluster.node(owner).get("{nightly}").await.unwrap() };

    // TLS options a cluster member would ignore are refused, as `run` refuses them.
    let ignored =
        output(quorumlock().args(["release", "nightly", "--token", &token, "--tls-insecure"]))
            .await;
    assert_ne!(code(&ignored), 0, "{}", stdout(&ignored));
    assert!(
        stderr(&ignored).contains("TLS options are not applied to cluster members"),
        "{}",
        stderr(&ignored)
    );
    assert_eq!(value_on_owner().await, Some(token.clone()));

    // A wrong token touches nothing; the holder's deletes the key on the slot's master.
    let wrong = output(quorumlock().args(["release", "nightly", "--token", FOREIGN_TOKEN])).await;
    assert_eq!(code(&wrong), 1, "{}", stderr(&wrong));
    assert_eq!(value_on_owner().await, Some(token.clone()));
    let released = output(quorumlock().args(["release", "nightly", "--token", &token])).await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert_eq!(value_on_owner().await, None);
    let again = lock.try_acquire("nightly").await.expect("free again");
    again.release().await.unwrap();
    drop(guard);
}

#[tokio::test]
async fn release_deletes_a_lock_on_a_sentinel_managed_master_by_its_token() {
    let deployment = SentinelDeployment::start(1)
        .await
        .expect("start a master, a replica and a sentinel (redis-server 7)");
    let url = deployment.url();
    let config = LockConfig::builder()
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let lock = RedisLock::connect(&url, config).await.unwrap();
    let guard = lock.try_acquire("report").await.unwrap();
    let token = guard.token().as_str().to_owned();

    let released = output(
        bare()
            .env("QUORUMLOCK_NODES", &url)
            .args(["release", "report", "--token", &token]),
    )
    .await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert_eq!(deployment.server(0).get("report").await.unwrap(), None);
    let again = lock.try_acquire("report").await.expect("free again");
    again.release().await.unwrap();
    drop(guard);
}
