//! The lifetimes of the reader list and the leader record on real redis-server nodes: each
//! gets a TTL (PTTL > 0) when written, keeps it through extensions (the list no shorter
//! than its live entry, the record as long as the term's lock key), and is gone after its
//! last use. The steps in between (many extensions, a writer refused at each, a reader
//! that stops) are tested on the simulation, `tests/sim/family_ttl.rs`.

use std::time::Duration;

use crate::common::{
    all_keys, cluster, config, eventually, redlock, redlock_on, volatile, LOAD_MARGIN,
};
use quorumlock::{Election, RwLock, Semaphore};
use quorumlock_testkit::RedisCluster;

/// Short enough to wait out, long enough for a loaded machine's round trips.
const TTL: Duration = Duration::from_secs(2);

/// `key`'s PTTL on every node of `cluster`.
async fn pttls(cluster: &RedisCluster, key: &str) -> Vec<i64> {
    let mut pttls = Vec::new();
    for i in 0..cluster.len() {
        pttls.push(cluster.node(i).pttl(key).await.expect("PTTL"));
    }
    pttls
}

/// Asserts that `list` has a TTL on every node, no shorter than `entry`'s.
async fn outlives(cluster: &RedisCluster, list: &str, entry: &str) {
    let (lists, entries) = (pttls(cluster, list).await, pttls(cluster, entry).await);
    for (list_ms, entry_ms) in lists.iter().zip(&entries) {
        assert!(*entry_ms > 0, "the entry has a TTL: {entries:?}");
        assert!(list_ms >= entry_ms, "list {lists:?}, entry {entries:?}");
    }
}

/// Waits until no key but the fencing counters is left on the nodes.
async fn nothing_left(cluster: &RedisCluster) {
    let limit = TTL + 2 * LOAD_MARGIN;
    eventually("the family's keys expired", limit, || async {
        all_keys(cluster)
            .await
            .iter()
            .all(|(_, key)| key.starts_with("quorumlock:fence:"))
    })
    .await;
}

#[tokio::test]
async fn the_reader_list_and_the_leader_record_get_ttls_and_vanish_after_their_last_use() {
    let cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;

    // A reader: its list gets a TTL, which its extension keeps no shorter than the entry.
    let catalog = RwLock::new(lock.clone(), "catalog").unwrap();
    let mut reading = catalog.try_read().await.unwrap();
    let list = catalog.readers_key();
    outlives(&cluster, &list, reading.key()).await;
    tokio::time::sleep(TTL / 2).await;
    reading.refresh().await.unwrap();
    outlives(&cluster, &list, reading.key()).await;
    reading.release().await.unwrap();

    // A permit: the same list of the semaphore's name.
    let uploads = Semaphore::new(lock.clone(), "uploads", 2).unwrap();
    let mut permit = uploads.try_acquire().await.unwrap();
    let permits = format!(
        "quorumlock:readers:{}",
        lock.config().key_for("uploads").unwrap()
    );
    outlives(&cluster, &permits, permit.guard().key()).await;
    permit.refresh().await.unwrap();
    outlives(&cluster, &permits, permit.guard().key()).await;
    permit.release().await.unwrap();

    // A term: its record has the lock key's TTL, and still has one after the first TTL
    // has passed, on the watchdog's extensions.
    let fenced = config(TTL).to_builder().fencing(true).build().unwrap();
    let candidate = redlock_on(&cluster, volatile(cluster.urls()), fenced.clone()).await;
    let observer = redlock_on(&cluster, volatile(cluster.urls()), fenced).await;
    let leading = Election::new(candidate, "billing")
        .unwrap()
        .campaign("host-a")
        .await
        .unwrap();
    let record = format!("quorumlock:leader:{}", leading.guard().key());
    assert!(pttls(&cluster, &record).await.iter().all(|ms| *ms > 0));
    tokio::time::sleep(TTL + TTL / 4).await;
    assert!(leading.is_leader().await.unwrap());
    let records = pttls(&cluster, &record).await;
    assert!(records.iter().all(|ms| *ms > 0), "{records:?}");
    let observer = Election::new(observer, "billing").unwrap();
    assert_eq!(
        observer.leader().await.unwrap().as_ref(),
        Some(leading.leader())
    );
    leading.resign().await.unwrap();

    nothing_left(&cluster).await;
}
