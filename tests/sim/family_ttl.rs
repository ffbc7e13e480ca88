//! The lifetimes of the lock family's keys that name other keys: a reader list (the
//! shared holders of a name: reader entries and permit slots) and an election's leader
//! record. Each expires after its last use, and never while what it names lives: the list
//! outlives every live entry however often that entry was extended (a writer is refused
//! at every step), and the record lives exactly as long as the term it belongs to.
//! (`tests/servers/family_ttl.rs` checks the TTLs on a real Redis.)

use std::time::Duration;

use quorumlock::sim::SimCluster;
use quorumlock::{Election, LockError, Redlock, RwLock, Semaphore};

use crate::support::{all_keys, client, cluster, config, TTL};

/// How many times the tests extend a holder: five TTLs' worth.
const EXTENSIONS: u32 = 10;

/// A TTL and the millisecond after it: a key is gone once its expiry has passed.
const PAST_TTL: Duration = TTL.saturating_add(Duration::from_millis(1));

fn held<T: std::fmt::Debug>(result: Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

/// The remaining TTL of `key` on every node of `cluster` (`None` where it has none, or
/// is gone).
fn ttls(cluster: &SimCluster, key: &str) -> Vec<Option<Duration>> {
    cluster.nodes().iter().map(|node| node.ttl(key)).collect()
}

/// Asserts that `list` expires on every node, no sooner than `entry`.
fn outlives(cluster: &SimCluster, list: &str, entry: &str) {
    for (index, node) in cluster.nodes().iter().enumerate() {
        let entry_ttl = node.ttl(entry).expect("the entry lives, with a TTL");
        let list_ttl = node.ttl(list).expect("the list lives, with a TTL");
        assert!(
            list_ttl >= entry_ttl,
            "node {index}: the list expires in {list_ttl:?}, its entry in {entry_ttl:?}"
        );
        assert!(list_ttl <= TTL, "node {index}: {list_ttl:?}");
    }
}

/// The key of the holder list of the name `name` on `lock`'s nodes.
fn list_of(lock: &Redlock, name: &str) -> String {
    format!(
        "quorumlock:readers:{}",
        lock.config().key_for(name).unwrap()
    )
}

#[tokio::test(start_paused = true)]
async fn the_reader_list_is_gone_a_ttl_after_the_last_reader_leaves_or_expires() {
    let cluster = cluster(3);
    let lock = client(&cluster, "reader", config(TTL));
    let catalog = RwLock::new(lock.clone(), "catalog").unwrap();
    let list = catalog.readers_key();

    let first = catalog.try_read().await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    let second = catalog.try_read().await.unwrap();
    // The list took the later reader's expiry: it outlives both entries.
    outlives(&cluster, &list, first.key());
    outlives(&cluster, &list, second.key());
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert!(ttls(&cluster, &list).iter().all(Option::is_some), "listed");

    // Nobody reads any more: within a TTL of the last reader's acquisition, nothing of
    // the lock is left on the nodes.
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(all_keys(&cluster), [], "keys left on the nodes");

    // A reader that stops (a crashed process: no release) leaves nothing a TTL on.
    let stopped = catalog.try_read().await.unwrap();
    std::mem::forget(stopped);
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(all_keys(&cluster), [], "keys left on the nodes");
}

#[tokio::test(start_paused = true)]
async fn a_reader_extended_far_past_its_ttl_keeps_its_list_and_writers_out() {
    let cluster = cluster(3);
    let reader = client(&cluster, "reader", config(TTL));
    let writer = client(&cluster, "writer", config(TTL));
    let catalog = RwLock::new(reader, "catalog").unwrap();
    let writers = RwLock::new(writer.clone(), "catalog").unwrap();
    let list = catalog.readers_key();

    let mut reading = catalog.try_read().await.unwrap();
    for step in 0..EXTENSIONS {
        tokio::time::sleep(TTL / 2).await;
        reading.refresh().await.unwrap();
        assert!(held(writers.try_write().await), "step {step}: a writer");
        assert!(
            held(writer.try_acquire("catalog").await),
            "step {step}: a mutex"
        );
        outlives(&cluster, &list, reading.key());
    }
    reading.release().await.unwrap();
    let writing = writers
        .try_write()
        .await
        .expect("the writer, once the reader left");
    writing.release().await.unwrap();
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(all_keys(&cluster), [], "keys left on the nodes");
}

#[tokio::test(start_paused = true)]
async fn a_permit_extended_far_past_its_ttl_keeps_its_list_then_the_list_expires() {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", config(TTL));
    let other = client(&cluster, "other", config(TTL));
    let uploads = Semaphore::new(holder.clone(), "uploads", 2).unwrap();
    let list = list_of(&holder, "uploads");
    let readers = RwLock::new(other.clone(), "uploads").unwrap();

    let mut permit = uploads.try_acquire().await.unwrap();
    for step in 0..EXTENSIONS {
        tokio::time::sleep(TTL / 2).await;
        permit.refresh().await.unwrap();
        assert!(
            held(other.try_acquire("uploads").await),
            "step {step}: a mutex"
        );
        assert!(held(readers.try_write().await), "step {step}: a writer");
        outlives(&cluster, &list, permit.guard().key());
    }
    permit.release().await.unwrap();
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(all_keys(&cluster), [], "keys left on the nodes");
}

#[tokio::test(start_paused = true)]
async fn the_leader_record_is_seen_throughout_the_term_and_expires_after_it() {
    let cluster = cluster(3);
    let fenced = config(TTL).to_builder().fencing(true).build().unwrap();
    let leader = Election::new(client(&cluster, "host-a", fenced.clone()), "billing").unwrap();
    let observer = Election::new(client(&cluster, "host-b", fenced), "billing").unwrap();

    let leading = leader.campaign("host-a").await.unwrap();
    let key = leading.guard().key().to_owned();
    let record = format!("quorumlock:leader:{key}");
    // The term runs on its watchdog's extensions, for several TTLs.
    for step in 0..EXTENSIONS {
        tokio::time::sleep(TTL / 4).await;
        assert_eq!(
            observer.leader().await.unwrap().as_ref(),
            Some(leading.leader()),
            "step {step}"
        );
        assert_eq!(
            ttls(&cluster, &record),
            ttls(&cluster, &key),
            "step {step}: the record lives as long as the lock key"
        );
        assert!(
            ttls(&cluster, &record).iter().all(Option::is_some),
            "step {step}"
        );
    }
    leading.resign().await.unwrap();
    assert_eq!(observer.leader().await.unwrap(), None, "nobody leads");
    tokio::time::sleep(PAST_TTL).await;
    let left: Vec<_> = all_keys(&cluster)
        .into_iter()
        .filter(|(_, key)| key.starts_with("quorumlock:leader:"))
        .collect();
    assert_eq!(left, [], "leader records left on the nodes");
}
