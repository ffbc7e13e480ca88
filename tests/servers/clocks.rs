//! Server clocks a lock cannot trust, on real redis-server processes under libfaketime
//! (the testkit's fake clock): a clock that runs three times fast, and a forward step of
//! an hour while a lock is held. Each connection samples its server's `TIME` once a second,
//! and a node whose clock misbehaves abstains for the longest lease after that is seen.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{chaos_config, eventually, held_on, proxied_with, redlock_via_on, LOAD_MARGIN};
use quorumlock::{LockGuard, Nodes, Redlock};
use quorumlock_testkit::{NodeOptions, ProxiedCluster};

const TTL: Duration = Duration::from_secs(10);

/// How soon a misbehaving clock is seen: two samples, a second apart, and a margin.
const SEEN_WITHIN: Duration = Duration::from_secs(3);

/// The test config: the TTL above, a per-node timeout for a loaded machine.
fn config() -> quorumlock::LockConfig {
    chaos_config(TTL)
}

/// Whether node `i` of `lock` is excluded for its clock.
fn excluded_for_its_clock(lock: &Redlock, i: usize) -> bool {
    lock.node_metrics()[i]
        .excluded
        .as_deref()
        .is_some_and(|why| why.contains("clock"))
}

#[tokio::test]
async fn nodes_whose_clocks_run_three_times_fast_abstain() {
    let options = NodeOptions::default().with_fake_clock("+0 x3");
    let cluster = quorumlock_testkit::RedisCluster::start_with(3, options)
        .await
        .expect("redis-server under libfaketime (apt-get install faketime gcc)");
    let lock = Redlock::connect(cluster.urls(), config()).await.unwrap();
    // At first, before two samples were compared, the nodes grant.
    lock.try_acquire("fast")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    eventually(
        "every node excluded for its clock",
        SEEN_WITHIN + LOAD_MARGIN,
        || async { (0..3).all(|i| excluded_for_its_clock(&lock, i)) },
    )
    .await;
    let why = lock.node_metrics()[0].excluded.clone().unwrap();
    assert!(
        why.contains("stepped forward") || why.contains("ran at"),
        "{why}"
    );
    assert!(lock.metrics().clock_anomalies >= 3, "{:?}", lock.metrics());
    let err = lock.try_acquire("fast").await.unwrap_err();
    assert!(err.to_string().contains("clock"), "{err}");
}

/// Five nodes with clocks under the test's control, each behind a proxy, and two locks on
/// them whose node sets `nodes_of` changes; every connection has sampled its clock a few
/// times.
async fn stepping_nodes_and_two_locks(
    nodes_of: impl Fn(Nodes) -> Nodes,
) -> (ProxiedCluster, Redlock, Redlock) {
    let options = NodeOptions::default().with_fake_clock("+0");
    let cluster = proxied_with(5, options).await;
    let nodes = || nodes_of(Nodes::new(cluster.urls()).unwrap());
    let first = redlock_via_on(&cluster, nodes(), config()).await;
    let second = redlock_via_on(&cluster, nodes(), config()).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    (cluster, first, second)
}

/// `first` takes "stock:7" on nodes 0 to 2 alone (3 and 4 cut off meanwhile); then node
/// 2's clock steps an hour forward, which expires its copy of the key, and 3 and 4 come
/// back.
async fn hold_on_three_and_step_one(cluster: &ProxiedCluster, first: &Redlock) -> LockGuard {
    for i in 3..5 {
        cluster.proxy(i).partition().await.unwrap();
    }
    let held = first.try_acquire("stock:7").await.unwrap();
    held_on(cluster.cluster(), 0..3, &held).await;
    cluster.node(2).set_clock("+3600").unwrap();
    for i in 3..5 {
        cluster.proxy(i).heal().await.unwrap();
    }
    held
}

/// A lock held on exactly three nodes of five; node 2's clock steps an hour forward, and
/// its copy of the key expires at once. Once the second client's sample shows the step,
/// node 2 abstains, and the second client forms no quorum while the first lock is valid.
#[tokio::test]
async fn a_node_whose_clock_steps_forward_abstains_and_exclusion_holds() {
    let (cluster, first, second) = stepping_nodes_and_two_locks(|nodes| nodes).await;
    let held = hold_on_three_and_step_one(&cluster, &first).await;
    eventually(
        "node 2 excluded for its clock",
        SEEN_WITHIN + LOAD_MARGIN,
        || async { excluded_for_its_clock(&second, 2) },
    )
    .await;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until && !held.is_expired() {
        assert!(
            second.try_acquire("stock:7").await.is_err(),
            "a second holder while the first is valid for {:?} more",
            held.validity()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(second.metrics().clock_anomalies >= 1);
    // The first client abstains node 2 too, so its release may fall short of a quorum of
    // deletions; the keys expire by their TTL.
    let _ = held.release().await;
}

/// The same step with clock checks off: the second client gets the lock while the first
/// still holds it. What the check prevents, demonstrated.
#[tokio::test]
async fn known_limit_without_clock_checks_a_clock_step_breaks_exclusion() {
    let (cluster, first, second) =
        stepping_nodes_and_two_locks(|nodes| nodes.clock_checks(false)).await;
    let held = hold_on_three_and_step_one(&cluster, &first).await;
    let mut overlapping = None;
    let until = Instant::now() + Duration::from_secs(2);
    while overlapping.is_none() && Instant::now() < until {
        overlapping = second.try_acquire("stock:7").await.ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let overlapping = overlapping.expect("nodes 2, 3 and 4 form a second quorum");
    assert!(!held.is_expired() && !overlapping.is_expired());
    let _ = held.release().await;
    overlapping.release().await.unwrap();
}
