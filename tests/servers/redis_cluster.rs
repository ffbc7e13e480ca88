//! Redis Cluster deployments as lock members, on real local clusters
//! ([`ShardedCluster`]): one cluster as a `RedisLock`, a `Redlock` of three clusters, a mix
//! of clusters and standalone masters, and the faults a cluster brings: a master killed, a
//! slot migrated while a lock is held.
//!
//! Each test starts its own small clusters (3 masters, no replicas) and runs several
//! scenarios on them in turn, which keeps the processes started per scenario, and so CI
//! time, low.

use std::time::Duration;

use crate::common::{command_calls, eventually, TTL};
use quorumlock::protocol::keys::counter_key;
use quorumlock::{LockConfig, LockError, Nodes, RedisLock, Redlock, Session, SessionOptions};
use quorumlock_testkit::{RedisCluster, ShardedCluster};

async fn sharded(masters: usize, replicas: usize) -> ShardedCluster {
    ShardedCluster::start(masters, replicas)
        .await
        .expect("start a local Redis Cluster (redis-server 7)")
}

/// The test configuration, on cluster members: no retries, a 10 s TTL, 500 ms per node
/// (a cluster request may follow a redirect, on a loaded machine).
fn cluster_config() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry_count(0)
        .build()
        .unwrap()
}

#[tokio::test]
async fn one_cluster_as_a_redis_lock() {
    let cluster = sharded(3, 0).await;
    let lock = RedisLock::connect(&cluster.url(), cluster_config())
        .await
        .unwrap();

    // Acquire: the key is hash-tagged and lives on the master of its slot.
    let guard = lock.try_acquire("order:1").await.unwrap();
    assert_eq!(
        cluster.get("{order:1}").await.unwrap().as_deref(),
        Some(guard.token().as_str())
    );
    let pttl = cluster.pttl("{order:1}").await.unwrap();
    assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");

    // Contention: a second owner is refused.
    let err = lock.try_acquire("order:1").await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");

    // Refresh, check and release, each one script in one slot.
    let mut guard = guard;
    guard.refresh().await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    assert_eq!(cluster.get("{order:1}").await.unwrap(), None);

    // Keys spread over the masters: enough resources reach every master.
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..24 {
        let resource = format!("spread:{i}");
        let guard = lock.try_acquire(&resource).await.unwrap();
        owners.insert(cluster.owner_of(&format!("{{{resource}}}")).await.unwrap());
        guard.release().await.unwrap();
    }
    assert_eq!(owners.len(), 3, "{owners:?}");

    // Multi-resource: one slot works (a common hash tag), two slots are refused up front.
    let both = lock
        .try_acquire_many(&["{orders}:1", "{orders}:2"])
        .await
        .unwrap();
    assert!(cluster.get("{{orders}:1}").await.unwrap().is_some());
    both.release().await.unwrap();
    let err = lock
        .try_acquire_many(&["order:1", "order:2"])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidResource { reason, .. } if reason.contains("hash slot")),
        "{err:?}"
    );

    // Fair hand-off: a blocked waiter gets the lock once the holder releases.
    let fair = RedisLock::connect(
        &cluster.url(),
        cluster_config()
            .to_builder()
            .retry_count(40)
            .retry_delay(Duration::from_millis(50))
            .retry_jitter(Duration::from_millis(10))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let held = fair.try_acquire("queue:1").await.unwrap();
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.acquire("queue:1").await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    held.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    next.release().await.unwrap();

    // A racing (not fair) waiter wakes on the sharded announcement of the release, long
    // before its retry delay: SPUBLISH on the key's shard, no cluster-wide PUBLISH.
    let racing = RedisLock::connect(
        &cluster.url(),
        cluster_config()
            .to_builder()
            .fair(false)
            .retry_count(3)
            .retry_delay(Duration::from_secs(5))
            .retry_jitter(Duration::ZERO)
            .acquire_timeout(Duration::from_secs(8))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let held = racing.try_acquire("race:1").await.unwrap();
    let waiter = {
        let racing = racing.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let guard = racing.acquire("race:1").await;
            (guard, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let (next, waited) = waiter.await.unwrap();
    next.unwrap().release().await.unwrap();
    assert!(
        waited < Duration::from_secs(4),
        "woke by its retry delay: {waited:?}"
    );
    let owner = cluster.owner_of("{race:1}").await.unwrap();
    assert!(command_calls(cluster.node(owner), "spublish").await > 0);
    for node in cluster.nodes() {
        assert_eq!(command_calls(node, "publish").await, 0);
    }

    // Fencing: tokens grow across holders, the counter lives in the lock's slot.
    let fenced = RedisLock::connect(
        Nodes::new(cluster.url())
            .unwrap()
            .fencing_on_volatile_nodes(true),
        cluster_config().to_builder().fencing(true).build().unwrap(),
    )
    .await
    .unwrap();
    let first = fenced.try_acquire("fence:1").await.unwrap();
    let first_token = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = fenced.try_acquire("fence:1").await.unwrap();
    assert!(second.fencing_token().unwrap() > first_token);
    let counter = counter_key("{fence:1}");
    assert_eq!(
        cluster.slot_of(&counter).await.unwrap(),
        cluster.slot_of("{fence:1}").await.unwrap()
    );
    assert_eq!(
        cluster.get(&counter).await.unwrap(),
        Some(second.fencing_token().unwrap().to_string())
    );
    second.release().await.unwrap();

    // A session keeps locks in many slots alive: one call per slot in use (a script
    // touches one slot), each routed to its slot's master.
    let session = Session::with_options(
        &lock,
        SessionOptions::default().every(Duration::from_secs(1)),
    )
    .unwrap();
    let mut kept = Vec::new();
    for i in 0..24 {
        kept.push(session.acquire(&format!("kept:{i}")).await.unwrap());
    }
    let acquired: Vec<_> = kept.iter().map(|guard| guard.acquired_at()).collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (guard, acquired) in kept.iter().zip(acquired) {
        assert!(
            guard.acquired_at() > acquired,
            "{} not extended",
            guard.resource()
        );
        assert!(!guard.lost().is_lost());
        let pttl = cluster.pttl(guard.key()).await.unwrap();
        assert!(pttl > 8_500, "{}: {pttl}", guard.key());
    }
    session.close().await.unwrap();
    for guard in &kept {
        assert_eq!(cluster.get(guard.key()).await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_standalone_url_on_a_cluster_node_is_refused_and_says_what_to_write() {
    let cluster = sharded(3, 0).await;
    let err = RedisLock::connect(&cluster.node(0).url(), cluster_config())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidNode { reason, .. } if reason.contains("redis+cluster://")),
        "{err:?}"
    );
    // Two seeds of one cluster are one member, listed twice.
    let seed = |i: usize| format!("redis+cluster://{}", cluster.node(i).address());
    let standalone = RedisCluster::start(1).await.unwrap();
    let err = Redlock::connect(
        [seed(0), seed(1), standalone.urls()[0].clone()],
        cluster_config(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidNode { reason, .. } if reason.contains("same")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_redlock_of_three_clusters_survives_a_killed_master() {
    let (a, b, c) = tokio::join!(sharded(3, 0), sharded(3, 0), sharded(3, 0));
    let mut clusters = [a, b, c];
    let urls: Vec<String> = clusters.iter().map(ShardedCluster::url).collect();
    let lock = Redlock::connect(&urls, cluster_config()).await.unwrap();

    // Concurrent cycles on distinct resources, spread over every master of every member:
    // none is refused (a release returns once a quorum deleted the key, and the last
    // member's unlock must not be overtaken by the next attempt).
    let tasks: Vec<_> = (0..32)
        .map(|task| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let resource = format!("again:{task}");
                for _ in 0..10 {
                    let cycle = match lock.try_acquire(&resource).await {
                        Ok(guard) => guard.release().await,
                        Err(err) => Err(err),
                    };
                    if let Err(err) = cycle {
                        return Err(format!("{resource}: {err}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }

    let guard = lock.try_acquire("job:1").await.unwrap();
    for cluster in &clusters {
        assert_eq!(
            cluster.get("{job:1}").await.unwrap().as_deref(),
            Some(guard.token().as_str())
        );
    }
    assert!(matches!(
        lock.try_acquire("job:1").await.unwrap_err(),
        LockError::Held { .. }
    ));
    guard.release().await.unwrap();

    // Kill the master of `job:2`'s slot in the first cluster: that member fails for that
    // slot only; the quorum (2 of 3) holds, and the member still serves other slots.
    let owner = clusters[0].owner_of("{job:2}").await.unwrap();
    clusters[0].node_mut(owner).kill().await.unwrap();
    let guard = lock.try_acquire("job:2").await.unwrap();
    let tally = guard.tally().clone();
    assert_eq!(tally.granted, 2, "{tally:?}");
    guard.release().await.unwrap();
    let mut other = None;
    for i in 0..200 {
        let resource = format!("job:other:{i}");
        let served_by = clusters[0].owner_of(&format!("{{{resource}}}")).await;
        if served_by.is_ok_and(|node| node != owner) {
            other = Some(resource);
            break;
        }
    }
    let other = other.unwrap();
    let guard = lock.try_acquire(&other).await.unwrap();
    let key = format!("{{{other}}}");
    eventually(
        "the first cluster serves another slot",
        Duration::from_secs(5),
        || async {
            clusters[0].get(&key).await.ok().flatten().as_deref() == Some(guard.token().as_str())
        },
    )
    .await;
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_slot_migrated_while_the_lock_is_held_and_extended_keeps_exclusion() {
    let cluster = sharded(3, 0).await;
    // A short TTL, extended every 400 ms: the migration takes several extensions. The
    // longest node timeout the TTL allows, for a loaded machine (an extension interval
    // must be at least two of them).
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(2))
        .node_timeout(Duration::from_millis(200))
        .retry_count(0)
        .build()
        .unwrap();
    let lock = RedisLock::connect(&cluster.url(), config).await.unwrap();
    let rival = RedisLock::connect(&cluster.url(), config_clone(&lock))
        .await
        .unwrap();
    let key = "{migrating:1}";
    let mut guard = lock.try_acquire("migrating:1").await.unwrap();
    guard
        .auto_extend(quorumlock::AutoExtend::default().every(Duration::from_millis(400)))
        .unwrap();
    let lost = guard.lost();
    let slot = cluster.slot_of(key).await.unwrap();
    let from = cluster.owner_of_slot(slot).await.unwrap();
    let to = (from + 1) % 3;

    // Half a second in each half of the move: extensions meet the key on the source while
    // the slot is migrating, then through `ASK` on the target once the key moved.
    cluster
        .migrate_slot(slot, to, Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(cluster.owner_of_slot(slot).await.unwrap(), to);
    // Exclusion held throughout: the rival is refused before and after the move.
    assert!(matches!(
        rival.try_acquire("migrating:1").await.unwrap_err(),
        LockError::Held { .. }
    ));
    // Extensions keep landing on the new owner, past the original TTL.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!lost.is_lost(), "{:?}", lost.ended());
    assert_eq!(
        cluster.node(to).get(key).await.unwrap().as_deref(),
        Some(guard.token().as_str())
    );
    assert!(cluster.node(to).pttl(key).await.unwrap() > 0);
    assert!(guard.is_acquired().await.unwrap());
    // Release finds the key where it moved.
    guard.release().await.unwrap();
    assert_eq!(cluster.node(to).get(key).await.unwrap(), None);
    rival
        .try_acquire("migrating:1")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

fn config_clone(lock: &RedisLock) -> LockConfig {
    quorumlock::DistributedLock::config(lock).clone()
}

#[tokio::test]
async fn a_mix_of_a_cluster_and_standalone_masters() {
    let cluster = sharded(3, 0).await;
    let standalone = RedisCluster::start(2).await.unwrap();
    let mut urls = standalone.urls();
    urls.push(cluster.url());
    let config = cluster_config().to_builder().fencing(true).build().unwrap();
    let nodes = Nodes::new(&urls).unwrap().fencing_on_volatile_nodes(true);
    let lock = Redlock::connect(nodes, config).await.unwrap();

    // The whole lock uses the hash-tagged layout, standalone masters included.
    let mut guard = lock.try_acquire("mix:1").await.unwrap();
    let token = Some(guard.token().as_str().to_owned());
    assert_eq!(cluster.get("{mix:1}").await.unwrap(), token);
    eventually(
        "both standalone masters hold the key",
        Duration::from_secs(2),
        || async {
            standalone.node(0).get("{mix:1}").await.unwrap() == token
                && standalone.node(1).get("{mix:1}").await.unwrap() == token
        },
    )
    .await;
    assert!(matches!(
        lock.try_acquire("mix:1").await.unwrap_err(),
        LockError::Held { .. }
    ));
    guard.refresh().await.unwrap();
    let first_token = guard.fencing_token().unwrap();
    guard.release().await.unwrap();
    assert_eq!(cluster.get("{mix:1}").await.unwrap(), None);
    let again = lock.try_acquire("mix:1").await.unwrap();
    assert!(again.fencing_token().unwrap() > first_token);
    again.release().await.unwrap();

    // Several resources in one slot, on every member.
    let both = lock
        .try_acquire_many(&["{batch}:a", "{batch}:b"])
        .await
        .unwrap();
    assert!(cluster.get("{{batch}:b}").await.unwrap().is_some());
    both.release().await.unwrap();

    // The cluster member down entirely: the two standalone masters still make a quorum.
    let mut cluster = cluster;
    for i in 0..3 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    let guard = lock.try_acquire("mix:2").await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn with_replica_acks_a_grant_survives_the_failover_of_its_master() {
    let mut cluster = sharded(3, 1).await;
    // Room for a replica starved of CPU on a loaded machine: 1 s per node, 800 ms for WAIT,
    // and a few attempts, so that a grant the replica was too slow to acknowledge (which
    // does not count, and is undone) is tried again rather than failing the test.
    let config = cluster_config()
        .to_builder()
        .node_timeout(Duration::from_secs(1))
        .retry_count(5)
        .build()
        .unwrap();
    let acknowledged = Nodes::new(cluster.url())
        .unwrap()
        .replica_acks(quorumlock::ReplicaAcks::new(1, Duration::from_millis(800)));
    let lock = RedisLock::connect(acknowledged, config).await.unwrap();
    let rival = RedisLock::connect(&cluster.url(), cluster_config())
        .await
        .unwrap();

    let key = "{failover:1}";
    let guard = lock.acquire("failover:1").await.unwrap();
    let master = cluster.owner_of(key).await.unwrap();
    // The replica of that master is 3 + master (one replica each, in master order).
    let replica = 3 + master;
    assert_eq!(
        cluster.get_on(replica, key).await.unwrap().as_deref(),
        Some(guard.token().as_str()),
        "acknowledged by the replica before the grant counted"
    );

    // Kill the master: the replica takes over with the lock, and exclusion holds.
    cluster.node_mut(master).kill().await.unwrap();
    let promoted = cluster.wait_for_failover(key, master).await.unwrap();
    assert_eq!(promoted, replica);
    eventually(
        "the rival reaches the promoted master and is refused",
        Duration::from_secs(10),
        || async {
            matches!(
                rival.try_acquire("failover:1").await,
                Err(LockError::Held { .. })
            )
        },
    )
    .await;
    eventually(
        "the holder releases on the promoted master",
        Duration::from_secs(10),
        || async {
            lock.try_acquire("failover:1").await.is_err()
                && cluster.get_on(replica, key).await.ok().flatten().as_deref()
                    == Some(guard.token().as_str())
        },
    )
    .await;
    guard.release().await.unwrap();
    assert_eq!(cluster.get_on(replica, key).await.unwrap(), None);

    // With the new master's replica gone (it has none now), a grant cannot be acknowledged:
    // it does not count, and leaves nothing behind.
    let err = lock.try_acquire("failover:1").await.unwrap_err();
    assert!(
        matches!(&err, LockError::NoQuorum { tally, .. } if tally.failures.iter().any(|f| f.error.to_string().contains("WAIT"))),
        "{err:?}"
    );
    eventually(
        "the unacknowledged grant is rolled back",
        Duration::from_secs(2),
        || async { cluster.get_on(replica, key).await.unwrap().is_none() },
    )
    .await;
}

/// A cluster whose masters keep no append-only file and started just now abstains as one
/// member: any master may have restarted without the keys of its slots. (Before, cluster
/// members were not checked for restarts.)
#[tokio::test]
async fn a_cluster_of_fresh_volatile_masters_abstains() {
    let options = quorumlock_testkit::NodeOptions::default()
        .with_persistence(quorumlock_testkit::Persistence::None);
    let cluster = ShardedCluster::start_with(3, 0, options)
        .await
        .expect("start a local Redis Cluster (redis-server 7)");
    let url = format!("redis+cluster://{}", cluster.node(0).address());
    let lock = RedisLock::connect(&url, cluster_config()).await.unwrap();
    let err = lock.try_acquire("fresh").await.unwrap_err();
    assert!(err.to_string().contains("abstains"), "{err}");
    let excluded = lock.node_metrics()[0].excluded.clone();
    assert!(
        excluded
            .as_deref()
            .is_some_and(|why| why.contains("abstains")),
        "{excluded:?}"
    );
    // Opted out (the test started the masters itself), the same cluster serves at once.
    let nodes = Nodes::new(url.as_str()).unwrap().restart_abstention(false);
    let lock = Redlock::connect(nodes, cluster_config()).await.unwrap();
    eventually("the cluster grants", Duration::from_secs(5), || async {
        match lock.try_acquire("fresh").await {
            Ok(guard) => guard.release().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
}
