//! The read-write lock's scripts on real redis-server nodes: readers share and a writer
//! excludes them, with two of five nodes down. The lock's logic (a waiting writer, a
//! frozen node, a dropped reader, a reader paused past its TTL, concurrent clients,
//! fencing) is tested on the simulation, `tests/sim/rwlock.rs`.

use crate::common::{cluster, config, redlock, TTL};
use quorumlock::{LockError, Redlock, RwLock};

fn rwlock(lock: &Redlock) -> RwLock {
    RwLock::new(lock.clone(), "catalog").expect("a valid read-write lock")
}

fn held(result: Result<quorumlock::LockGuard, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_them_with_two_of_five_down() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(1).kill().await.unwrap();
    cluster.node_mut(4).kill().await.unwrap();
    let catalog = rwlock(&lock);

    let first = catalog.try_read().await.expect("a reader");
    let second = catalog.try_read().await.expect("readers share");
    assert_ne!(
        first.key(),
        second.key(),
        "each reader has an entry of its own"
    );
    assert!(
        held(catalog.try_write().await),
        "no writer while readers hold it"
    );
    first.release().await.unwrap();
    assert!(
        held(catalog.try_write().await),
        "one reader is enough to keep it"
    );
    second.release().await.unwrap();

    let writer = catalog
        .try_write()
        .await
        .expect("the writer, once readers left");
    assert_eq!(writer.key(), catalog.writer_key());
    assert!(
        held(catalog.try_read().await),
        "no reader while the writer holds it"
    );
    assert!(held(catalog.try_write().await), "one writer");
    writer.release().await.unwrap();
    catalog
        .try_read()
        .await
        .expect("readers again")
        .release()
        .await
        .unwrap();
}
