//! Sessions on real servers: one `EVALSHA` per node per interval and chunk, and the faults
//! a keep-alive meets: a node killed, a node frozen, a key deleted behind the session's
//! back, a lock taken over by another owner. (`tests/sim/session.rs` has the timing, on
//! tokio's paused clock.)

use std::time::Duration;

use crate::common::{cluster, command_calls, config, node_command, redlock, LOAD_MARGIN};
use quorumlock::{LeaseEnd, LockError, LockGuard, Session, SessionEnd, SessionOptions};

const TTL: Duration = Duration::from_millis(1500);

async fn hold(session: &Session, prefix: &str, count: usize) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        guards.push(session.acquire(&format!("{prefix}:{i}")).await.unwrap());
    }
    guards
}

/// The time `guard`'s key has left to live on node `node`, which must hold its token.
async fn kept_on(
    cluster: &quorumlock_testkit::RedisCluster,
    node: usize,
    guard: &LockGuard,
) -> i64 {
    let node = cluster.node(node);
    assert_eq!(
        node.get(guard.key()).await.unwrap().as_deref(),
        Some(guard.token().as_str()),
        "{}",
        guard.key()
    );
    node.pttl(guard.key()).await.unwrap()
}

#[tokio::test]
async fn many_locks_are_extended_by_one_call_per_node_and_chunk() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let session = Session::with_options(&lock, SessionOptions::default().chunk(250)).unwrap();
    let guards = hold(&session, "many", 1000).await;
    for node in cluster.nodes() {
        node_command(node, &["CONFIG", "RESETSTAT"]).await;
    }
    // Two rounds at least, a third of the TTL apart.
    tokio::time::sleep(TTL * 2 / 3 + TTL / 6).await;
    for (index, node) in cluster.nodes().iter().enumerate() {
        let calls = command_calls(node, "evalsha").await + command_calls(node, "eval").await;
        // 1000 locks in chunks of 250: four calls a round. Rounds come every interval
        // (500 ms) less their lead (at most a quarter of the interval), and a retry may
        // resend a round's unconfirmed chunks on a busy machine: two to four rounds in
        // these 1.25 s, and a few retried chunks. A call per lock would be 1000 a round.
        assert!((8..=24).contains(&calls), "node {index}: {calls} calls");
    }
    for guard in &guards {
        assert!(!guard.lost().is_lost());
        for node in 0..3 {
            let pttl = kept_on(&cluster, node, guard).await;
            assert!(pttl > (TTL / 3).as_millis() as i64, "{pttl}");
        }
    }
    session.close().await.unwrap();
    assert!(cluster
        .keys("many:*")
        .await
        .unwrap()
        .iter()
        .all(Vec::is_empty));
}

#[tokio::test]
async fn a_killed_node_is_outvoted_and_a_killed_majority_ends_the_session() {
    let mut cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let session = Session::new(&lock);
    let guards = hold(&session, "killed", 50).await;
    let end = session.end();
    cluster.node_mut(2).kill().await.unwrap();
    tokio::time::sleep(TTL * 2).await;
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        for node in 0..2 {
            kept_on(&cluster, node, guard).await;
        }
    }
    assert!(session.ended().is_none());

    cluster.node_mut(1).kill().await.unwrap();
    let deadline = guards.iter().map(LockGuard::deadline).max().unwrap();
    let ended = tokio::time::timeout(TTL + LOAD_MARGIN, end.wait())
        .await
        .expect("the session ended");
    assert!(matches!(ended, SessionEnd::Lost(_)), "{ended:?}");
    assert!(
        tokio::time::Instant::now() < deadline,
        "before the deadline"
    );
    for guard in &guards {
        assert!(matches!(guard.lost().ended(), Some(LeaseEnd::Lost(_))));
    }
}

#[tokio::test]
async fn a_frozen_node_does_not_hold_the_locks_back() {
    let mut cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let session = Session::with_options(&lock, SessionOptions::default().chunk(5)).unwrap();
    let guards = hold(&session, "frozen", 200).await;
    cluster.node_mut(2).freeze().await.unwrap();
    let before: Vec<_> = guards.iter().map(LockGuard::acquired_at).collect();
    // Three rounds: each waits one node timeout for the frozen node, not one per chunk
    // (forty chunks, four in flight, of a node timeout each would outlast the TTL).
    tokio::time::sleep(TTL * 3 / 2).await;
    for (guard, before) in guards.iter().zip(before) {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        assert!(
            guard.acquired_at() > before,
            "{} not extended",
            guard.resource()
        );
        for node in 0..2 {
            kept_on(&cluster, node, guard).await;
        }
    }
    cluster.node_mut(2).thaw().await.unwrap();
    session.close().await.unwrap();
}

#[tokio::test]
async fn a_key_deleted_or_taken_over_ends_that_lock_alone() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    let session = Session::new(&lock);
    let guards = hold(&session, "edited", 4).await;
    // Deleted on two nodes behind the session's back.
    for node in 0..2 {
        node_command(cluster.node(node), &["DEL", guards[0].key()]).await;
    }
    // Taken over on two nodes by another owner (as after an expiry there).
    for node in 1..3 {
        cluster
            .node(node)
            .set(
                guards[1].key(),
                "another-owner",
                Some(Duration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    for guard in &guards[..2] {
        let end = tokio::time::timeout(TTL / 3 + LOAD_MARGIN, guard.lost().wait())
            .await
            .expect("lost at the next round");
        assert!(
            matches!(&end, LeaseEnd::Lost(error) if matches!(**error, LockError::NotHeld { .. })),
            "{}: {end:?}",
            guard.resource()
        );
    }
    // The other owner's keys were left alone: its value, and its own TTL.
    for node in 1..3 {
        let node = cluster.node(node);
        assert_eq!(
            node.get(guards[1].key()).await.unwrap().as_deref(),
            Some("another-owner")
        );
        assert!(node.pttl(guards[1].key()).await.unwrap() > 55_000);
    }
    tokio::time::sleep(TTL).await;
    for guard in &guards[2..] {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        for node in 0..3 {
            kept_on(&cluster, node, guard).await;
        }
    }
    assert!(session.ended().is_none());
}
