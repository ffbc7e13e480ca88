//! Locks over several resources: on each node all keys or none, the quorum rule over
//! nodes, one guard for all. (`tests/servers/multi.rs` runs the set's scripts on a real
//! server.)

use std::time::Duration;

use quorumlock::{LockError, LockToken};
use tokio::time::Instant;

use crate::support::{all_keys, client, cluster, config, holding, retrying, TTL};

#[tokio::test(start_paused = true)]
async fn all_resources_are_taken_together_and_released_together() {
    let cluster = cluster(5);
    let lock = client(&cluster, "holder", config(TTL));
    let guard = lock
        .try_acquire_many(&["account:7", "account:3"])
        .await
        .unwrap();
    assert_eq!(guard.resource(), "account:3 + account:7");
    assert_eq!(guard.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
    // Every node got both keys, the two the quorum did not wait for too.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(holding(&cluster, &guard), 5);
    // Each resource alone, and any overlapping set, is now held.
    assert!(matches!(
        lock.try_acquire("account:3").await,
        Err(LockError::Held { .. })
    ));
    assert!(matches!(
        lock.try_acquire_many(&["account:7", "account:9"]).await,
        Err(LockError::Held { .. })
    ));
    // A failed overlapping attempt took nothing, not even the free account:9.
    for node in cluster.nodes() {
        assert_eq!(node.get("account:9"), None);
    }
    let mut guard = guard;
    guard.refresh().await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn a_node_never_holds_part_of_a_lock() {
    let cluster = cluster(5);
    let lock = client(&cluster, "holder", config(TTL));
    // Another owner holds "b" on nodes 0-2 only.
    let foreign = LockToken::from_string("foreign");
    for i in 0..3 {
        cluster.node(i).insert("b", &foreign, TTL);
    }
    let err = lock.try_acquire_many(&["a", "b", "c"]).await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    // Nodes 0-2 refused the whole set: no "a" or "c" there. Nodes 3-4 granted it and were
    // rolled back: nothing there either.
    assert_eq!(
        all_keys(&cluster),
        [
            (0, "b".to_owned()),
            (1, "b".to_owned()),
            (2, "b".to_owned())
        ]
    );

    // With "b" held on a minority only, the set is taken on the other three nodes.
    cluster.node(2).flush();
    let guard = lock.try_acquire_many(&["a", "b", "c"]).await.unwrap();
    for i in 0..2 {
        let node = cluster.node(i);
        assert_eq!(node.get("a"), None, "node {i} holds part of the set");
        assert_eq!(node.get("c"), None, "node {i} holds part of the set");
    }
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_expired_part_makes_refresh_fail_without_extending_the_rest() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let mut guard = lock.try_acquire_many(&["x", "y"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(holding(&cluster, &guard), 3);
    // "y" vanishes (evicted) on two of the three nodes.
    for i in 0..2 {
        assert!(cluster.node(i).evict("y"));
    }
    let before: Vec<Duration> = (0..2).map(|i| cluster.node(i).ttl("x").unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let err = guard.refresh().await.unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    // "x" was not extended where "y" was gone, and "y" was not recreated.
    for (i, before) in before.into_iter().enumerate() {
        let after = cluster.node(i).ttl("x").unwrap();
        assert_eq!(
            after,
            before - Duration::from_millis(10),
            "node {i}: x extended"
        );
        assert_eq!(cluster.node(i).get("y"), None);
    }
    assert!(!guard.is_acquired().await.unwrap());
    // Release still deletes what is ours, and reports that the lock was not whole.
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(all_keys(&cluster), []);
}

#[tokio::test(start_paused = true)]
async fn blocking_multi_acquire_waits_for_the_holder_and_bad_sets_are_rejected() {
    let cluster = cluster(3);
    let patient = retrying(50, Duration::from_millis(500), Duration::ZERO);
    let holder = client(&cluster, "holder", config(TTL));
    let lock = client(&cluster, "waiter", patient);
    let held = holder.try_acquire("p").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_many(&["q", "p"]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the set was taken while p was held");
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    // Woken by the release of "p", not by the 500 ms delay.
    let waited = released.elapsed();
    assert!(waited < Duration::from_millis(100), "{waited:?}");
    guard.release().await.unwrap();

    for bad in [&[][..], &["a", "a"][..], &["ok", ""][..]] {
        let err = lock.try_acquire_many(bad).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidResource { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn fencing_tokens_cover_every_resource_of_a_set() {
    let cluster = cluster(3);
    // The simulated nodes keep their counters: none restarts here.
    let fenced = config(TTL).to_builder().fencing(true).build().unwrap();
    let lock = client(&cluster, "holder", fenced);
    let single = lock.try_acquire("m").await.unwrap();
    let first = single.fencing_token().unwrap();
    single.release().await.unwrap();
    // The set's token exceeds every earlier token of each of its resources.
    let both = lock.try_acquire_many(&["m", "n"]).await.unwrap();
    let second = both.fencing_token().unwrap();
    assert!(second > first);
    both.release().await.unwrap();
    let again = lock.try_acquire("n").await.unwrap();
    assert!(again.fencing_token().unwrap() > second);
    again.release().await.unwrap();
}
