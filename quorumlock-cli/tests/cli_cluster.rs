//! The CLI on a Redis Cluster member: `--nodes redis+cluster://...` takes and reports the
//! lock, and `status` names the master that serves the lock's slot.

mod cli_support;

use std::time::Duration;

use cli_support::{bare, code, output, stderr, stdout};
use quorumlock::{LockConfig, RedisLock};
use quorumlock_testkit::ShardedCluster;

#[tokio::test]
async fn status_names_the_master_of_the_locks_slot_and_run_takes_the_lock() {
    let cluster = ShardedCluster::start(3, 0)
        .await
        .expect("start a local Redis Cluster (redis-server 7)");
    // In `--nodes` commas separate members: a member's seeds are separated by semicolons.
    let member = cluster.url().replace(',', ";");
    let quorumlock = || {
        let mut command = bare();
        command.env("QUORUMLOCK_NODES", &member);
        command
    };

    let run = output(quorumlock().args(["run", "-r", "nightly", "--", "true"])).await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));

    let config = LockConfig::builder()
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let lock = RedisLock::connect(&cluster.url(), config).await.unwrap();
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
