//! Fencing counters on simulated nodes, which run the real counter scripts: shared
//! counters bound the keys on each node while every resource's tokens still strictly
//! increase, a move from per-resource counters keeps tokens above the old ones, and
//! hash-tagged nodes are refused.

use std::collections::HashMap;

use crate::support::{client, cluster, config, TTL};
use futures::future::join_all;
use quorumlock::fencing::FencingCounters;
use quorumlock::{ConfigError, LockConfig, LockError, Nodes, Redlock};

const BUCKETS: u32 = 4;

fn fenced(counters: FencingCounters) -> LockConfig {
    config(TTL)
        .to_builder()
        .fencing(true)
        .fencing_counters(counters)
        .build()
        .unwrap()
}

/// The fencing counter keys on a node: per-resource and shared ones.
fn counter_keys(keys: Vec<String>) -> Vec<String> {
    keys.into_iter()
        .filter(|key| key.starts_with("quorumlock:fence"))
        .collect()
}

/// Takes `resource`, returns its token, and releases it.
async fn token_of(lock: &Redlock, resource: &str) -> u64 {
    let guard = lock.try_acquire(resource).await.unwrap();
    let token = guard.fencing_token().unwrap();
    guard.release().await.unwrap();
    token
}

#[tokio::test(start_paused = true)]
async fn shared_counters_bound_the_keys_while_each_resources_tokens_increase() {
    let cluster = cluster(3);
    let shared = FencingCounters::Shared { buckets: BUCKETS };
    let locks: Vec<Redlock> = (0..3)
        .map(|i| client(&cluster, &format!("client-{i}"), fenced(shared)))
        .collect();
    let mut last: HashMap<String, u64> = HashMap::new();
    for round in 0..12 {
        if round == 6 {
            // A minority node down for a while, back with its data.
            cluster.node(0).crash();
        }
        if round == 9 {
            cluster.node(0).restart(true);
        }
        // Every client locks its own share of 30 resources at once: mints of one bucket
        // for different resources run side by side.
        let mints = locks.iter().enumerate().flat_map(|(i, lock)| {
            (0..10).map(move |j| {
                let resource = format!("order:{}", (j * 3 + i + round) % 30);
                async move { (resource.clone(), token_of(lock, &resource).await) }
            })
        });
        for (resource, token) in join_all(mints).await {
            let previous = last.insert(resource.clone(), token).unwrap_or(0);
            assert!(token > previous, "{resource}: {token} after {previous}");
        }
    }
    assert_eq!(last.len(), 30);
    // One resource alone, its bucket raised by nobody else meanwhile.
    for _ in 0..3 {
        let (resource, previous) = ("order:0", last["order:0"]);
        let token = token_of(&locks[1], resource).await;
        assert!(token > previous, "{resource}: {token} after {previous}");
        last.insert(resource.to_owned(), token);
    }
    for node in cluster.nodes() {
        let counters = counter_keys(node.keys());
        assert!(counters.len() <= BUCKETS as usize, "{counters:?}");
        assert!(
            counters
                .iter()
                .all(|key| key.starts_with("quorumlock:fence-bucket:")),
            "{counters:?}"
        );
    }
    // Per resource, the same schedule leaves a counter for each of the 30.
    let per_resource = client(
        &cluster,
        "per-resource",
        fenced(FencingCounters::PerResource),
    );
    for i in 0..30 {
        token_of(&per_resource, &format!("job:{i}")).await;
    }
    let counters = counter_keys(cluster.node(1).keys());
    assert_eq!(counters.len(), 30 + BUCKETS as usize, "{counters:?}");
}

#[tokio::test(start_paused = true)]
async fn moving_to_shared_counters_keeps_tokens_above_the_old_ones() {
    let cluster = cluster(3);
    let before = client(&cluster, "before", fenced(FencingCounters::PerResource));
    let mut old = 0;
    for _ in 0..5 {
        old = token_of(&before, "ledger").await;
    }
    assert_eq!(old, 5);
    let after = client(
        &cluster,
        "after",
        fenced(FencingCounters::Shared { buckets: BUCKETS }),
    );
    let first = token_of(&after, "ledger").await;
    assert!(first > old, "{first} after {old}");
    // The old counter is only read: it stays where it was, and the bucket took over.
    for node in cluster.nodes() {
        assert_eq!(node.counter("quorumlock:fence:ledger"), Some(5));
    }
    assert!(token_of(&after, "ledger").await > first);
}

#[tokio::test]
async fn shared_counters_are_refused_on_hash_tagged_nodes() {
    let shared = fenced(FencingCounters::Shared { buckets: BUCKETS });
    // Refused before any connection is made: nothing listens on these ports.
    let tagged = Nodes::new([
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ])
    .unwrap()
    .hash_tags(true);
    let member = Nodes::new("redis+cluster://127.0.0.1:1").unwrap();
    for nodes in [tagged, member] {
        let refused = Redlock::connect(nodes, shared.clone()).await.unwrap_err();
        assert!(
            matches!(
                refused,
                LockError::Config(ConfigError::SharedFencingCountersOnHashTags)
            ),
            "{refused:?}"
        );
    }
}
