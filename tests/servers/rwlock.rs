//! The read-write lock on real redis-server nodes: readers share, a writer excludes
//! everyone, a waiting writer keeps new readers out; with two of five nodes down, a
//! frozen node, a dropped holder and a holder paused past its TTL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{cluster, config, redlock, retrying, TTL};
use quorumlock::{LockError, NodeError, Redlock, RwLock};

fn rwlock(lock: &Redlock) -> RwLock<Redlock> {
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

#[tokio::test]
async fn a_frozen_node_delays_neither_side() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(0).freeze().await.unwrap();
    let catalog = rwlock(&lock);
    let started = std::time::Instant::now();
    let reader = catalog.try_read().await.unwrap();
    reader.release().await.unwrap();
    let writer = catalog.try_write().await.unwrap();
    writer.release().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    cluster.node_mut(0).thaw().await.unwrap();
}

#[tokio::test]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let cluster = cluster(5).await;
    let lock = redlock(
        &cluster,
        retrying(100, Duration::from_millis(20), Duration::from_millis(10)),
    )
    .await;
    let catalog = rwlock(&lock);
    let reader = catalog.try_read().await.unwrap();
    let writer = {
        let catalog = catalog.clone();
        tokio::spawn(async move { catalog.write().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished());
    assert!(
        held(catalog.try_read().await),
        "a writer waits: new readers wait too"
    );
    // The reader present can still extend its own entry.
    let mut reader = reader;
    reader
        .refresh()
        .await
        .expect("a reader present is not evicted");
    reader.release().await.unwrap();
    let writing = writer.await.unwrap().expect("the writer gets in");
    assert!(held(catalog.try_read().await));
    writing.release().await.unwrap();

    // Without writer preference, a waiting writer lets readers in.
    let lenient = rwlock(&lock).writer_preference(false);
    let reader = lenient.try_read().await.unwrap();
    let writer = {
        let lenient = lenient.clone();
        tokio::spawn(async move { lenient.write_timeout(Duration::from_millis(300)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    lenient
        .try_read()
        .await
        .expect("readers still come in")
        .release()
        .await
        .unwrap();
    reader.release().await.unwrap();
    writer.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_reader_lets_the_writer_in_at_once() {
    let cluster = cluster(5).await;
    let lock = redlock(
        &cluster,
        retrying(100, Duration::from_millis(20), Duration::from_millis(10)),
    )
    .await;
    let catalog = rwlock(&lock);
    let reader = catalog.try_read().await.unwrap();
    let writer = {
        let catalog = catalog.clone();
        tokio::spawn(async move { catalog.write().await })
    };
    tokio::time::sleep(Duration::from_millis(60)).await;
    drop(reader); // an early return: released in the background
    let writing = tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .expect("long before the 10 s TTL")
        .unwrap()
        .unwrap();
    writing.release().await.unwrap();
}

#[tokio::test]
async fn a_reader_paused_past_its_ttl_loses_its_entry_and_deletes_nothing() {
    let cluster = cluster(5).await;
    let ttl = Duration::from_millis(400);
    let lock = redlock(&cluster, config(ttl)).await;
    let catalog = rwlock(&lock);
    let paused = catalog.try_read().await.unwrap();
    let lost = paused.lost();
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(lost.is_lost());
    let writer = catalog
        .try_write()
        .await
        .expect("the expired reader holds nothing");
    let mut paused = paused;
    let refused = paused.refresh().await.unwrap_err();
    assert!(matches!(refused, LockError::Expired { .. }), "{refused}");
    let error = paused.release().await.unwrap_err();
    assert!(matches!(error, LockError::NotHeld { .. }), "{error}");
    assert!(writer.is_acquired().await.unwrap());
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_overlap_and_never_meet_a_writer() {
    let cluster = cluster(5).await;
    let config = retrying(400, Duration::from_millis(5), Duration::from_millis(4));
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for client in 0..6 {
        let catalog = rwlock(&redlock(&cluster, config.clone()).await);
        let writes = client < 2;
        let (readers, writers) = (Arc::clone(&readers), Arc::clone(&writers));
        let (most_readers, violations) = (Arc::clone(&most_readers), Arc::clone(&violations));
        clients.push(tokio::spawn(async move {
            for _ in 0..6 {
                if writes {
                    let guard = catalog.write().await.expect("the write side");
                    let before = writers.fetch_add(1, Ordering::SeqCst);
                    if before > 0 || readers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                } else {
                    let guard = catalog.read().await.expect("the read side");
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a reader met a writer"
    );
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers overlapped"
    );
}

/// A node that does not know the read-write lock's requests.
#[derive(Debug)]
struct MutexOnly;

impl quorumlock::node::LockNode for MutexOnly {
    fn name(&self) -> &str {
        "mutex-only"
    }

    fn call<'a>(
        &'a self,
        request: quorumlock::node::NodeRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<quorumlock::node::NodeReply, NodeError>> {
        use quorumlock::node::{NodeReply, NodeRequest};
        let reply = match request {
            NodeRequest::Unlock { .. } | NodeRequest::Holds { .. } => NodeReply::Done(false),
            _ => NodeReply::Unsupported,
        };
        Box::pin(async move { Ok(reply) })
    }
}

#[tokio::test]
async fn nodes_without_the_requests_are_a_typed_failure_never_a_grant() {
    let nodes: Vec<Arc<dyn quorumlock::node::LockNode>> = vec![Arc::new(MutexOnly)];
    let lock = Redlock::from_nodes(nodes, config(TTL)).unwrap();
    for result in [
        rwlock(&lock).try_read().await,
        rwlock(&lock).try_write().await,
    ] {
        let error = result.unwrap_err();
        let LockError::NoQuorum { tally, .. } = &error else {
            panic!("{error}");
        };
        assert!(
            matches!(tally.failures[0].error, NodeError::Unsupported(_)),
            "{error}"
        );
    }
}

#[tokio::test]
async fn fenced_readers_are_numbered_on_the_lock_counter_and_leave_no_counter_behind() {
    // A reader's keys are an entry of its own, new on every read: minting its token on
    // them would leave a never-expiring counter per read on nodes that evict nothing.
    let cluster = cluster(3).await;
    let fenced = config(TTL)
        .to_builder()
        .fencing(true)
        .fencing_on_volatile_nodes(true)
        .build()
        .unwrap();
    let lock = redlock(&cluster, fenced).await;
    let catalog = rwlock(&lock);
    let writer = catalog.try_write().await.expect("the writer");
    let written = writer.fencing_token().expect("a fenced writer has a token");
    writer.release().await.unwrap();
    for _ in 0..3 {
        let reader = catalog.try_read().await.expect("a reader");
        let read = reader.fencing_token().expect("a fenced reader has a token");
        assert!(read > written, "reader {read} after writer {written}");
        reader.release().await.unwrap();
    }
    let counters = cluster.keys("quorumlock:fence:*reader*").await.unwrap();
    for (node, keys) in counters.iter().enumerate() {
        assert!(keys.is_empty(), "node {node}: counters per read {keys:?}");
    }
}
