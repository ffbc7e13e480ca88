//! Locks over several resources: on each node all keys or none, the quorum rule over
//! nodes, one guard for all.

use std::time::Duration;

use crate::common::{
    all_keys, cluster, config, held_on_every_node, no_keys_left, raw_connection, redlock, retrying,
    TTL,
};
use quorumlock::LockError;

#[tokio::test]
async fn all_resources_are_taken_together_and_released_together() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let guard = lock
        .try_acquire_many(&["account:7", "account:3"])
        .await
        .unwrap();
    assert_eq!(guard.resource(), "account:3 + account:7");
    assert_eq!(guard.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
    held_on_every_node(&cluster, &guard).await;
    for node in cluster.nodes() {
        for key in ["account:3", "account:7"] {
            assert_eq!(
                node.get(key).await.unwrap().as_deref(),
                Some(guard.token().as_str())
            );
        }
    }
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
        assert_eq!(node.get("account:9").await.unwrap(), None);
    }
    let mut guard = guard;
    guard.refresh().await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_node_never_holds_part_of_a_lock() {
    let cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    // Another owner holds "b" on nodes 0-2 only.
    for i in 0..3 {
        cluster
            .node(i)
            .set("b", "foreign", Some(TTL))
            .await
            .unwrap();
    }
    let err = lock.try_acquire_many(&["a", "b", "c"]).await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    // Nodes 0-2 refused the whole set: no "a" or "c" there. Nodes 3-4 granted it and were
    // rolled back: nothing there either.
    let keys = all_keys(&cluster).await;
    assert_eq!(
        keys,
        vec![
            (0, "b".to_owned()),
            (1, "b".to_owned()),
            (2, "b".to_owned())
        ]
    );

    // With "b" held on a minority only, the set is taken on the other three nodes.
    cluster.node(2).flush().await.unwrap();
    let guard = lock.try_acquire_many(&["a", "b", "c"]).await.unwrap();
    for i in 0..2 {
        let node = cluster.node(i);
        assert_eq!(
            node.get("a").await.unwrap(),
            None,
            "node {i} holds part of the set"
        );
        assert_eq!(
            node.get("c").await.unwrap(),
            None,
            "node {i} holds part of the set"
        );
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn an_expired_part_makes_refresh_fail_without_extending_the_rest() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let mut guard = lock.try_acquire_many(&["x", "y"]).await.unwrap();
    held_on_every_node(&cluster, &guard).await;
    // "y" vanishes (evicted) on two of the three nodes.
    let mut raw = Vec::new();
    for i in 0..2 {
        let mut connection = raw_connection(cluster.node(i)).await;
        let _: () = redis::cmd("DEL")
            .arg("y")
            .query_async(&mut connection)
            .await
            .unwrap();
        raw.push(connection);
    }
    let before: Vec<i64> = futures::future::join_all((0..2).map(|i| cluster.node(i).pttl("x")))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let err = guard.refresh().await.unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    // "x" was not extended where "y" was gone, and "y" was not recreated.
    for (i, before) in before.into_iter().enumerate() {
        let after = cluster.node(i).pttl("x").await.unwrap();
        assert!(
            after <= before,
            "node {i}: x extended from {before} to {after}"
        );
        assert_eq!(cluster.node(i).get("y").await.unwrap(), None);
    }
    assert!(!guard.is_acquired().await.unwrap());
    // Release still deletes what is ours, and reports that the lock was not whole.
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
    no_keys_left(&cluster, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn blocking_multi_acquire_waits_for_the_holder_and_bad_sets_are_rejected() {
    let cluster = cluster(3).await;
    let patient = retrying(50, Duration::from_millis(500), Duration::ZERO);
    let lock = redlock(&cluster, patient).await;
    let holder = lock.try_acquire("p").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire_many(&["q", "p"]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await.unwrap();
    let started = tokio::time::Instant::now();
    let guard = waiter.await.unwrap().unwrap();
    // Woken by the release of "p", the first key of the set, not by the 500 ms delay.
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();

    for bad in [&[][..], &["a", "a"][..], &["ok", ""][..]] {
        let err = lock.try_acquire_many(bad).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidResource { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test]
async fn fencing_tokens_cover_every_resource_of_a_set() {
    let cluster = cluster(3).await;
    // The nodes keep no append-only file, and none restarts here.
    let fenced = config(TTL)
        .to_builder()
        .fencing(true)
        .fencing_on_volatile_nodes(true)
        .build()
        .unwrap();
    let lock = redlock(&cluster, fenced).await;
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

/// The calls of each script command on `node`, from `INFO commandstats`.
async fn script_commands(node: &quorumlock_testkit::RedisProcess) -> Vec<(String, u64)> {
    let mut connection = raw_connection(node).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            matches!(name, "eval" | "evalsha" | "script|load" | "script")
                .then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// A node that has not run a script yet gets it whole (`EVAL`) in one command, not an
/// `EVALSHA` that fails with `NOSCRIPT` and needs a `SCRIPT LOAD` and a second try: a
/// request still in flight when its round was decided (nobody awaits its answer) then
/// still takes effect once sent. Once the node ran it, the script goes by hash.
#[tokio::test]
async fn a_fresh_node_runs_each_script_in_one_command() {
    let cluster = cluster(1).await;
    let lock = quorumlock::Redlock::connect(cluster.urls(), config(TTL))
        .await
        .unwrap();
    let guard = lock.try_acquire_many(&["p", "q"]).await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(
        script_commands(cluster.node(0)).await,
        [("eval".to_owned(), 2)],
        "lock and unlock sent whole, nothing loaded"
    );
    let guard = lock.try_acquire_many(&["p", "q"]).await.unwrap();
    guard.release().await.unwrap();
    let mut seen = script_commands(cluster.node(0)).await;
    seen.sort();
    assert_eq!(seen, [("eval".to_owned(), 2), ("evalsha".to_owned(), 2)]);
}
