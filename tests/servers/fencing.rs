//! Fencing tokens on real redis-server nodes: minted as a quorum max-register, strictly
//! increasing across holders even while minority nodes die and come back, and used by a
//! protected resource to reject a stale holder's write, including in a read-modify-write.

use std::time::Duration;

use crate::common::{cluster, config, raw_connection, redlock, redlock_on, volatile, TTL};
use quorumlock::fencing::{fenced_claim, fenced_set};
use quorumlock::{LockConfig, LockError, Nodes};
use quorumlock_testkit::{NodeOptions, Persistence, RedisCluster};
use redis::AsyncCommands;

/// [`config`] with fencing, and retries for holders that follow one another closely.
fn fenced(ttl: Duration) -> LockConfig {
    config(ttl)
        .to_builder()
        .retry_count(20)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .fencing(true)
        .build()
        .unwrap()
}

/// [`redlock`] with fencing on `cluster`'s nodes: most test nodes keep no append-only
/// file (those that restart do).
async fn fenced_lock(cluster: &RedisCluster, config: LockConfig) -> quorumlock::Redlock {
    redlock_on(cluster, volatile(cluster.urls()), config).await
}

#[tokio::test]
async fn tokens_strictly_increase_and_counters_never_expire() {
    let cluster = cluster(5).await;
    let lock = fenced_lock(&cluster, fenced(TTL)).await;
    let mut last = 0;
    for _ in 0..20 {
        let guard = lock.acquire("fenced").await.unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
    let counter = "quorumlock:fence:fenced";
    for node in cluster.nodes() {
        assert_eq!(
            node.pttl(counter).await.unwrap(),
            -1,
            "a counter must never expire"
        );
    }
    // Without fencing no token is minted.
    let plain = redlock(&cluster, config(TTL)).await;
    let guard = plain.try_acquire("fenced").await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_400_holders_while_minority_nodes_restart() {
    // Counters must survive restarts (the documented requirement), so the nodes persist.
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let mut cluster = RedisCluster::start_with(5, options).await.unwrap();
    // A node killed before a release's background delete reaches it brings the key back
    // from its append-only file on restart, where it blocks that node until its TTL; a
    // short TTL, and retries that outlast it, keep such a leftover from failing the test.
    // Every write is fsynced before the node answers, so on a loaded machine the 50 ms
    // per-node timeout is tight: use the most a 1 s TTL allows.
    let patient = fenced(Duration::from_secs(1))
        .to_builder()
        .retry_count(200)
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let lock = fenced_lock(&cluster, patient).await;
    let mut last = 0;
    // Four rounds of restarts, two nodes each (0 and 2, 1 and 3, 2 and 4, 3 and 0): every
    // node restarts at least once while the tokens go on increasing.
    for holder in 0..HOLDERS {
        if holder % 100 == 50 {
            // Kill two nodes, hold a while on the other three, then bring them back.
            let victims = [holder / 100 % 5, (holder / 100 + 2) % 5];
            for &i in &victims {
                cluster.node_mut(i).kill().await.unwrap();
            }
            for _ in 0..10 {
                let guard = lock.acquire("ledger").await.unwrap();
                let token = guard.fencing_token().unwrap();
                assert!(token > last, "holder {holder}: {token} after {last}");
                last = token;
                release_or_let_expire(guard, holder).await;
            }
            for &i in &victims {
                cluster.node_mut(i).restart().await.unwrap();
            }
        }
        let guard = lock.acquire("ledger").await.unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "holder {holder}: {token} after {last}");
        last = token;
        release_or_let_expire(guard, holder).await;
    }
    assert!(last >= u64::try_from(HOLDERS).unwrap());
}

/// How many holders take the fenced lock in turn.
const HOLDERS: usize = 400;

/// Releases `guard`; a release a quorum did not confirm in time (slow fsyncs on a loaded
/// machine) is tolerated, since the keys expire within the 1 s TTL and the next holder's
/// patient retries outlast them: this test is about the tokens, not release latency.
async fn release_or_let_expire(guard: quorumlock::LockGuard, holder: usize) {
    match guard.release().await {
        Ok(()) => {}
        Err(error @ (LockError::NoQuorum { .. } | LockError::NotHeld { .. })) => {
            eprintln!("holder {holder}: release not confirmed ({error}); the TTL ends it");
        }
        Err(other) => panic!("holder {holder}: release failed: {other:?}"),
    }
}

#[tokio::test]
async fn a_paused_holders_late_write_is_rejected() {
    let cluster = cluster(5).await;
    let lock = fenced_lock(&cluster, fenced(Duration::from_millis(300))).await;
    // The protected resource lives on its own server (here: node 0's server, another key).
    let mut connection = raw_connection(cluster.node(0)).await;

    let first = lock.acquire("stock").await.unwrap();
    let first_token = first.fencing_token().unwrap();
    // The first holder "pauses" past its validity; a second holder takes over and writes.
    tokio::time::sleep(first.validity() + Duration::from_millis(50)).await;
    let second = lock.acquire("stock").await.unwrap();
    let second_token = second.fencing_token().unwrap();
    assert!(second_token > first_token);
    assert!(
        fenced_set(&mut connection, "stock-level", "9", second_token)
            .await
            .unwrap()
    );

    // The first holder wakes up and writes what it computed before the pause: rejected.
    assert!(
        !fenced_set(&mut connection, "stock-level", "10", first_token)
            .await
            .unwrap()
    );
    assert_eq!(
        cluster.node(0).get("stock-level").await.unwrap().as_deref(),
        Some("9")
    );
    // Its lock is gone too, and it says so.
    let mut first = first;
    assert!(matches!(
        first.refresh().await,
        Err(LockError::Expired { .. })
    ));

    // The current holder may write again with the same token.
    assert!(
        fenced_set(&mut connection, "stock-level", "8", second_token)
            .await
            .unwrap()
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn minting_without_a_quorum_fails_and_unlocks() {
    let mut cluster = cluster(5).await;
    let lock = fenced_lock(&cluster, fenced(TTL)).await;
    // The lock keys can be taken on 3 nodes, but make the counter unreadable on 3 of them
    // by storing a non-number there.
    for i in 0..3 {
        cluster
            .node(i)
            .set("quorumlock:fence:broken", "not-a-number", None)
            .await
            .unwrap();
    }
    let err = lock.try_acquire("broken").await.unwrap_err();
    let LockError::NoQuorum { tally, .. } = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert!(tally.failures.len() >= 3, "{tally}");
    for node in cluster.nodes() {
        assert_eq!(
            node.get("broken").await.unwrap(),
            None,
            "lock key left behind"
        );
    }
    cluster.node_mut(4).kill().await.unwrap();
}

/// The two holders of a read-modify-write race, stepped by hand: `OLD` read the stock
/// before a pause that outlasted its lock, `NEW` holds the lock now. Tokens stand in for
/// the two acquisitions, so the interleaving is exact and needs no lock timing.
const OLD: u64 = 7;
const NEW: u64 = 8;

async fn stock(connection: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    connection.get(key).await.unwrap()
}

#[tokio::test]
async fn fencing_only_the_write_loses_an_update_to_a_stale_holder() {
    let cluster = cluster(1).await;
    let mut connection = raw_connection(cluster.node(0)).await;
    let key = "stock:write-only";
    let _: () = connection.set(key, 10).await.unwrap();

    let old_read = stock(&mut connection, key).await; // then the old holder pauses
    let new_read = stock(&mut connection, key).await;
    // The old holder wakes between the new holder's read and write: nothing newer has
    // been written yet, so its fenced write passes.
    let old_level = (old_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &old_level, OLD)
        .await
        .unwrap());
    let new_level = (new_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &new_level, NEW)
        .await
        .unwrap());
    // Both sales were accepted, yet only one unit is gone: the old holder's update is lost.
    assert_eq!(stock(&mut connection, key).await, 9);
}

#[tokio::test]
async fn claiming_before_reading_refuses_the_stale_holders_write() {
    let cluster = cluster(1).await;
    let mut connection = raw_connection(cluster.node(0)).await;

    // The same interleaving, each holder claiming before it reads.
    let key = "stock:claimed";
    let _: () = connection.set(key, 10).await.unwrap();
    assert!(fenced_claim(&mut connection, key, OLD).await.unwrap());
    let old_read = stock(&mut connection, key).await; // then the old holder pauses
    assert!(fenced_claim(&mut connection, key, NEW).await.unwrap());
    let new_read = stock(&mut connection, key).await;
    let old_level = (old_read - 1).to_string();
    assert!(
        !fenced_set(&mut connection, key, &old_level, OLD)
            .await
            .unwrap(),
        "the stale holder's write landed after the new holder's claim"
    );
    // Nor can it claim again, to read a fresh value and write after all.
    assert!(!fenced_claim(&mut connection, key, OLD).await.unwrap());
    let new_level = (new_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &new_level, NEW)
        .await
        .unwrap());
    assert_eq!(stock(&mut connection, key).await, 9, "one sale, one unit");
    // A claim writes nothing but the token, and the holder may claim again.
    assert!(fenced_claim(&mut connection, key, NEW).await.unwrap());
    assert_eq!(stock(&mut connection, key).await, 9);

    // A stale holder's write that lands before the new holder's claim is not lost: the
    // new holder reads it.
    let key = "stock:claimed-late";
    let _: () = connection.set(key, 10).await.unwrap();
    assert!(fenced_claim(&mut connection, key, OLD).await.unwrap());
    let old_read = stock(&mut connection, key).await;
    let old_level = (old_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &old_level, OLD)
        .await
        .unwrap());
    assert!(fenced_claim(&mut connection, key, NEW).await.unwrap());
    let new_read = stock(&mut connection, key).await;
    let new_level = (new_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &new_level, NEW)
        .await
        .unwrap());
    assert_eq!(stock(&mut connection, key).await, 8, "two sales, two units");
}

#[tokio::test]
async fn a_lock_holders_claim_refuses_a_paused_holders_read_modify_write() {
    // The same race with real acquisitions and minted tokens.
    let cluster = cluster(5).await;
    let lock = fenced_lock(&cluster, fenced(Duration::from_millis(300))).await;
    let mut connection = raw_connection(cluster.node(0)).await;
    let key = "stock:locked";
    let _: () = connection.set(key, 10).await.unwrap();

    let first = lock.acquire("stock").await.unwrap();
    let first_token = first.fencing_token().unwrap();
    assert!(fenced_claim(&mut connection, key, first_token)
        .await
        .unwrap());
    let first_read = stock(&mut connection, key).await;
    // The first holder pauses past its validity; a second holder takes over, claims, reads.
    tokio::time::sleep(first.validity() + Duration::from_millis(50)).await;
    let second = lock.acquire("stock").await.unwrap();
    let second_token = second.fencing_token().unwrap();
    assert!(fenced_claim(&mut connection, key, second_token)
        .await
        .unwrap());
    let second_read = stock(&mut connection, key).await;
    // The first holder wakes before the second writes: refused.
    let level = (first_read - 1).to_string();
    assert!(!fenced_set(&mut connection, key, &level, first_token)
        .await
        .unwrap());
    let level = (second_read - 1).to_string();
    assert!(fenced_set(&mut connection, key, &level, second_token)
        .await
        .unwrap());
    assert_eq!(stock(&mut connection, key).await, 9);
    drop(first);
    second.release().await.unwrap();
}

/// Restarts one node at a time (never a majority down), acquiring between restarts, in the
/// order that makes a node without an append-only file hand out an old token: the last
/// token lives on node 0 alone, and the next holder reads from nodes 1 and 2.
async fn tokens_across_restarts(cluster: &mut RedisCluster, nodes: Nodes) -> Vec<u64> {
    let lock = redlock_on(cluster, nodes, fenced(TTL)).await;
    let mut tokens = Vec::new();
    let mut hold = |guard: quorumlock::LockGuard| {
        tokens.push(guard.fencing_token().unwrap());
        guard
    };
    hold(lock.acquire("ledger").await.unwrap())
        .release()
        .await
        .unwrap();
    cluster.node_mut(0).restart().await.unwrap();
    hold(lock.acquire("ledger").await.unwrap())
        .release()
        .await
        .unwrap();
    for i in 1..3 {
        cluster.node_mut(i).restart().await.unwrap();
    }
    cluster.node_mut(0).freeze().await.unwrap();
    let next = lock.acquire("ledger").await.unwrap();
    hold(next).release().await.unwrap();
    cluster.node_mut(0).thaw().await.unwrap();
    tokens
}

#[tokio::test]
async fn nodes_that_would_forget_their_counters_are_refused_for_fencing() {
    let options = NodeOptions::default().with_persistence(Persistence::None);
    let cluster = RedisCluster::start_with(3, options).await.unwrap();
    let strict = config(TTL).to_builder().fencing(true).build().unwrap();
    let err = quorumlock::Redlock::connect(cluster.urls(), strict)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidNode { reason, .. } if reason.contains("append-only")),
        "{err:?}"
    );
}

/// The hazard the refusal guards against, reproduced with the opt-out: a token goes 2,
/// then 1, with only one node restarted (empty) at a time.
#[tokio::test]
async fn with_the_opt_out_a_restarted_empty_node_can_hand_out_an_old_token() {
    let options = NodeOptions::default().with_persistence(Persistence::None);
    let mut cluster = RedisCluster::start_with(3, options).await.unwrap();
    // Restart abstention off too: it keeps a restarted node out for a lease, while a
    // counter must outlive every lease (fencing needs the append-only file).
    let nodes = volatile(cluster.urls()).restart_abstention(false);
    let tokens = tokens_across_restarts(&mut cluster, nodes).await;
    assert_eq!(tokens, [1, 2, 1]);
}

#[tokio::test]
async fn on_nodes_with_an_append_only_file_tokens_survive_the_same_restarts() {
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let mut cluster = RedisCluster::start_with(3, options).await.unwrap();
    let strict = Nodes::new(cluster.urls()).unwrap();
    let tokens = tokens_across_restarts(&mut cluster, strict).await;
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "{tokens:?}"
    );
}

/// Shared counters on real nodes: 40 resources leave 4 counter keys on each node (none of
/// their own), and each resource's tokens still increase.
#[tokio::test]
async fn shared_counters_leave_a_bounded_number_of_keys() {
    use quorumlock::fencing::FencingCounters;
    let cluster = cluster(3).await;
    let shared = fenced(TTL)
        .to_builder()
        .fencing_counters(FencingCounters::Shared { buckets: 4 })
        .build()
        .unwrap();
    let lock = fenced_lock(&cluster, shared).await;
    let mut last = vec![0; 40];
    for round in 0..3 {
        for (i, previous) in last.iter_mut().enumerate() {
            let guard = lock.acquire(&format!("account:{i}")).await.unwrap();
            let token = guard.fencing_token().unwrap();
            assert!(
                token > *previous,
                "round {round}, account:{i}: {token} after {previous}"
            );
            *previous = token;
            guard.release().await.unwrap();
        }
    }
    for node in cluster.nodes() {
        let counters = node.keys("quorumlock:fence*").await.unwrap();
        assert!(
            (1..=4).contains(&counters.len())
                && counters
                    .iter()
                    .all(|key| key.starts_with("quorumlock:fence-bucket:")),
            "{counters:?}"
        );
    }
}
