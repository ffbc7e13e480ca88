//! The read-write lock's logic: readers share, a writer excludes everyone, a waiting
//! writer keeps new readers out (unless told not to) and gets in once they leave; with
//! nodes down, a frozen node, a dropped reader and a reader paused past its TTL.
//! (`tests/servers/rwlock.rs` checks the scripts on a real Redis.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::sim::{Outcome, SimCluster};
use quorumlock::{LockError, LockGuard, NodeError, Redlock, RwLock};
use tokio::time::Instant;

use crate::support::{all_keys, client, cluster, config, holding, retrying, spawn_timed, TTL};

/// The retry delay of a blocked side: exact (no jitter), so that when a waiter gets in
/// says which attempt let it in.
const DELAY: Duration = Duration::from_millis(30);

/// How long the tests let a waiter wait: not a multiple of [`DELAY`], so that what the
/// test does then never falls on the instant of an attempt.
const WAIT: Duration = Duration::from_millis(100);

/// The instant of the waiter's first attempt after [`WAIT`], counted from its start.
const NEXT_ATTEMPT: Duration = Duration::from_millis(120);

fn rwlock(lock: &Redlock) -> RwLock {
    RwLock::new(lock.clone(), "catalog").expect("a valid read-write lock")
}

fn held(result: Result<LockGuard, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

/// A lock whose blocking sides retry every [`DELAY`], exactly.
fn waiting(cluster: &SimCluster, name: &str) -> Redlock {
    client(cluster, name, retrying(100, DELAY, Duration::ZERO))
}

/// Whether `key` is live on node `node`.
fn on_node(cluster: &SimCluster, node: usize, key: &str) -> bool {
    cluster.node(node).keys().iter().any(|live| live == key)
}

#[tokio::test(start_paused = true)]
async fn readers_share_and_a_writer_excludes_them_with_two_of_five_down() {
    let cluster = cluster(5);
    let lock = client(&cluster, "catalog", config(TTL));
    cluster.node(1).crash();
    cluster.node(4).crash();
    let catalog = rwlock(&lock);

    let first = catalog.try_read().await.expect("a reader");
    let second = catalog.try_read().await.expect("readers share");
    assert_ne!(
        first.key(),
        second.key(),
        "each reader has an entry of its own"
    );
    assert_eq!(holding(&cluster, &first), 3, "on each live node");
    assert_eq!(holding(&cluster, &second), 3, "on each live node");
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
    assert_eq!(holding(&cluster, &writer), 3, "on each live node");
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

/// A frozen node's requests vanish; a quorum of the others answers at once, so neither
/// side waits out the frozen node's timeout.
#[tokio::test(start_paused = true)]
async fn a_frozen_node_delays_neither_side() {
    let cluster = cluster(5);
    let lock = client(&cluster, "catalog", config(TTL));
    cluster.node(0).lose_replies(true);
    let catalog = rwlock(&lock);
    let started = Instant::now();
    let reader = catalog.try_read().await.unwrap();
    reader.release().await.unwrap();
    let writer = catalog.try_write().await.unwrap();
    writer.release().await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "waited for the frozen node"
    );
    // It was asked each time (two takes, two releases), and never answered.
    let asked = cluster.node(0).log();
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|record| matches!(record.outcome, Outcome::Dropped { .. })),
        "{asked:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let cluster = cluster(5);
    let catalog = rwlock(&waiting(&cluster, "catalog"));
    let reader = catalog.try_read().await.unwrap();
    let started = Instant::now();
    let writer = {
        let catalog = catalog.clone();
        spawn_timed(async move { catalog.write().await })
    };
    tokio::time::sleep(WAIT).await;
    assert!(!writer.is_finished(), "the writer got in past a reader");
    for node in 0..5 {
        assert!(
            on_node(&cluster, node, &catalog.writer_waiting_key()),
            "node {node}: no writer-waiting mark"
        );
    }
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
    let (got_in, writing) = writer.await.unwrap();
    let writing = writing.expect("the writer gets in");
    assert_eq!(
        got_in - started,
        NEXT_ATTEMPT,
        "the writer got in at its first attempt after the release"
    );
    assert!(held(catalog.try_read().await));
    writing.release().await.unwrap();

    // Without writer preference, a waiting writer lets readers in.
    let lenient = rwlock(&waiting(&cluster, "lenient")).writer_preference(false);
    let reader = lenient.try_read().await.unwrap();
    let started = Instant::now();
    let writer = {
        let lenient = lenient.clone();
        spawn_timed(async move { lenient.write_timeout(Duration::from_millis(300)).await })
    };
    tokio::time::sleep(WAIT).await;
    assert!(!writer.is_finished(), "the writer got in past a reader");
    for node in 0..5 {
        assert!(
            !on_node(&cluster, node, &lenient.writer_waiting_key()),
            "node {node}: a writer-waiting mark without writer preference"
        );
    }
    lenient
        .try_read()
        .await
        .expect("readers still come in")
        .release()
        .await
        .unwrap();
    reader.release().await.unwrap();
    let (got_in, writing) = writer.await.unwrap();
    writing.unwrap().release().await.unwrap();
    assert_eq!(got_in - started, NEXT_ATTEMPT);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_reader_lets_the_writer_in_at_once() {
    let cluster = cluster(5);
    let catalog = rwlock(&waiting(&cluster, "catalog"));
    let reader = catalog.try_read().await.unwrap();
    let started = Instant::now();
    let writer = {
        let catalog = catalog.clone();
        spawn_timed(async move { catalog.write().await })
    };
    tokio::time::sleep(WAIT).await;
    assert!(!writer.is_finished(), "the writer got in past a reader");
    drop(reader); // an early return: released in the background
    let (got_in, writing) = writer.await.unwrap();
    // Long before the 10 s TTL: at the writer's first attempt after the drop.
    assert_eq!(got_in - started, NEXT_ATTEMPT);
    writing.unwrap().release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reader_paused_past_its_ttl_loses_its_entry_and_deletes_nothing() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(400);
    let lock = client(&cluster, "catalog", config(ttl));
    let catalog = rwlock(&lock);
    let started = Instant::now();
    let paused = catalog.try_read().await.unwrap();
    let lost = paused.lost();

    // The reader stops (a GC pause, SIGSTOP): no refresh, and its TTL runs out.
    tokio::time::sleep_until(paused.deadline() - Duration::from_millis(1)).await;
    assert!(!lost.is_lost(), "lost before its deadline");
    tokio::time::sleep_until(paused.deadline()).await;
    assert!(lost.is_lost(), "the lost signal fired at the deadline");
    // The entry itself lives on the nodes until its TTL runs out there.
    tokio::time::sleep_until(started + ttl + Duration::from_millis(100)).await;
    for node in 0..5 {
        assert!(
            !on_node(&cluster, node, paused.key()),
            "node {node}: the entry outlived its TTL"
        );
    }
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
    assert_eq!(holding(&cluster, &writer), 5, "the writer's key untouched");
    writer.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn concurrent_readers_overlap_and_never_meet_a_writer() {
    let cluster = cluster(5);
    // Each node a little slower than the last, so that the clients' requests interleave.
    for (i, node) in cluster.nodes().iter().enumerate() {
        node.set_request_delay(Duration::from_micros(100 * i as u64));
    }
    let config = retrying(400, Duration::from_millis(5), Duration::from_millis(4));
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..6 {
        let catalog = rwlock(&client(&cluster, &format!("client-{i}"), config.clone()));
        let writes = i < 2;
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

#[tokio::test(start_paused = true)]
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

#[tokio::test(start_paused = true)]
async fn fenced_readers_are_numbered_on_the_lock_counter_and_leave_no_counter_behind() {
    // A reader's keys are an entry of its own, new on every read: minting its token on
    // them would leave a never-expiring counter per read on nodes that evict nothing.
    let cluster = cluster(3);
    let fenced = config(TTL).to_builder().fencing(true).build().unwrap();
    let lock = client(&cluster, "catalog", fenced);
    let catalog = rwlock(&lock);
    let writer = catalog.try_write().await.expect("the writer");
    let written = writer.fencing_token().expect("a fenced writer has a token");
    writer.release().await.unwrap();
    let counter = format!("quorumlock:fence:{}", catalog.writer_key());
    let mut last = written;
    for _ in 0..3 {
        let reader = catalog.try_read().await.expect("a reader");
        let read = reader.fencing_token().expect("a fenced reader has a token");
        assert!(read > last, "reader {read} after {last}");
        last = read;
        reader.release().await.unwrap();
    }
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(
            node.counter(&counter),
            Some(last),
            "node {i}: the readers were numbered on the lock's counter"
        );
    }
    let counters: Vec<(usize, String)> = all_keys(&cluster)
        .into_iter()
        .filter(|(_, key)| key.starts_with("quorumlock:fence:") && key.contains("reader"))
        .collect();
    assert!(counters.is_empty(), "counters per read: {counters:?}");
}
