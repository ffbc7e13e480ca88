//! Connections that heal: a node whose connection went silent without closing (a
//! black-holed route, a forgotten NAT entry) serves locks again soon after the network
//! heals, instead of once the kernel gives up on the connection minutes later. Real
//! redis-server nodes behind the testkit's fault proxy.

use std::time::Duration;

use crate::common::{config, eventually, proxied, redlock_via, LOAD_MARGIN, TTL};
use quorumlock::{LockConfig, Redlock};
use quorumlock_testkit::ProxiedCluster;
use tokio::time::Instant;

/// Cuts node `i` off for good on the connections open now (the route is black-holed and
/// their state forgotten: nothing sent on them ever arrives), as a lost NAT entry does.
fn cut_off(cluster: &ProxiedCluster, i: usize) {
    cluster.proxy(i).blackhole(true);
    cluster.proxy(i).strand_open();
}

/// The test config with the library's default per-node timeout: how soon a silent
/// connection is given up depends on it, and the docs state the time for the default.
fn defaults() -> LockConfig {
    config(TTL)
        .to_builder()
        .node_timeout(LockConfig::DEFAULT_NODE_TIMEOUT)
        .build()
        .unwrap()
}

/// How soon after the heal a node must serve again (measured: 25-95 ms, docs/operations.md,
/// "Connections"); the tests add the margin of a loaded machine.
const HEALED_WITHIN: Duration = Duration::from_secs(2);

/// Whether node `i` grants the lock: it holds the key while a guard does.
async fn node_grants(lock: &Redlock, cluster: &ProxiedCluster, i: usize, resource: &str) -> bool {
    let Ok(guard) = lock.try_acquire(resource).await else {
        return false;
    };
    let token = guard.token().as_str().to_owned();
    let mut held = false;
    for _ in 0..10 {
        held = cluster.node(i).get(guard.key()).await.unwrap().as_deref() == Some(&*token);
        if held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = guard.release().await;
    held
}

#[tokio::test]
async fn a_node_cut_off_and_healed_grants_locks_again_within_two_seconds() {
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, defaults()).await;
    cut_off(&cluster, 0);
    // The lock goes on without node 0 meanwhile (an attempt that a stall on a loaded
    // machine failed does not matter: the requests to node 0 went out all the same).
    let cut = Instant::now();
    let mut served = 0;
    while cut.elapsed() < Duration::from_secs(1) {
        if let Ok(guard) = lock.try_acquire("healing").await {
            served += usize::from(guard.release().await.is_ok());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served > 0, "no lock with four of five nodes");
    cluster.proxy(0).heal().await.unwrap();
    let healed = Instant::now();
    eventually(
        "node 0 grants locks again",
        HEALED_WITHIN + LOAD_MARGIN,
        || node_grants(&lock, &cluster, 0, "healing"),
    )
    .await;
    eprintln!("node 0 granted again {:?} after the heal", healed.elapsed());
}

#[tokio::test]
async fn a_majority_cut_off_and_healed_serves_locks_again_within_two_seconds() {
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, defaults()).await;
    for i in 0..3 {
        cut_off(&cluster, i);
    }
    let cut = Instant::now();
    while cut.elapsed() < Duration::from_secs(1) {
        assert!(
            lock.try_acquire("majority").await.is_err(),
            "a quorum is cut off"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..3 {
        cluster.proxy(i).heal().await.unwrap();
    }
    let healed = Instant::now();
    eventually(
        "the lock can be taken again",
        HEALED_WITHIN + LOAD_MARGIN,
        || async {
            match lock.try_acquire("majority").await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
    eprintln!(
        "the lock was taken again {:?} after the heal",
        healed.elapsed()
    );
}

/// After a majority of the nodes restarted, the first request on each broken connection
/// reconnects at once instead of failing: the very next attempt gets the lock. (Before,
/// that request failed with the connection's error, the attempt had no quorum, and only an
/// attempt made after the reconnect succeeded.)
#[tokio::test]
async fn the_first_attempt_after_a_majority_restarted_reconnects_and_wins() {
    let mut cluster = crate::common::cluster(5).await;
    let lock = crate::common::redlock(&cluster, config(TTL)).await;
    for round in 0..3 {
        for i in 0..3 {
            cluster.node_mut(i).restart().await.unwrap();
        }
        // Long enough for each old connection to see its server go: the request below
        // then meets a connection known to be closed.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let guard = lock
            .try_acquire(&format!("restarted:{round}"))
            .await
            .unwrap_or_else(|err| panic!("round {round}: the first attempt failed: {err}"));
        guard.release().await.unwrap();
    }
}
