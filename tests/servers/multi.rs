//! Locks over several resources on real servers: the set's script takes all keys or none
//! on each node, and reaches a fresh node whole. The rest of the multi-resource logic is
//! tested on the simulation, `tests/sim/multi.rs`.

use crate::common::{all_keys, cluster, config, raw_connection, redlock, TTL};
use quorumlock::LockError;

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
