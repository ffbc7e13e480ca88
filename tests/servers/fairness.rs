//! Fair hand-off (`LockConfig::fair`) end to end on real Redis: a blocking waiter queues on
//! the nodes, the release reserves the key for it and announces that on its client's
//! channel, and the waiter claims the reservation. The fair queue's logic (first come,
//! first served, barging, waiters that give up or die, several keys) is tested on the
//! simulation, `tests/sim/fairness.rs`.

use std::time::Duration;

use crate::common::{cluster, eventually, held_on_every_node, raw_connection, redlock, TTL};

use futures::StreamExt;
use quorumlock::{LockConfig, LockError};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The resource; without a key prefix it is also the lock key.
const RESOURCE: &str = "fair";
/// The nodes' queue of [`RESOURCE`].
const QUEUE: &str = "quorumlock:waiters:fair";
/// The channels on which keys reserved for a client's waiters are announced.
const WAITER_CHANNELS: &str = "quorumlock:waiter:*";

/// A long, exact retry delay: a waiter served well before its next retry was woken by the
/// announcement of its reservation.
const DELAY: Duration = Duration::from_secs(2);

/// Far above any hand-off on a loaded machine: only a waiter that is never served hits it.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

/// A blocking acquire that never runs out of retries, retrying every [`DELAY`], with a
/// node timeout that a loaded machine does not reach.
fn patient() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_delay(DELAY)
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap()
}

/// How many waiters each node's queue of [`RESOURCE`] holds.
async fn queue_lengths(nodes: &[MultiplexedConnection]) -> Vec<usize> {
    let mut lengths = Vec::new();
    for connection in nodes {
        let mut connection = connection.clone();
        let length: usize = redis::cmd("ZCARD")
            .arg(QUEUE)
            .query_async(&mut connection)
            .await
            .expect("ZCARD of the queue");
        lengths.push(length);
    }
    lengths
}

#[tokio::test]
async fn a_release_is_reserved_for_the_waiter_in_line_and_claimed_on_its_announcement() {
    let cluster = cluster(3).await;
    let mut nodes = Vec::new();
    let mut announcements = Vec::new();
    for node in cluster.nodes() {
        nodes.push(raw_connection(node).await);
        let mut pubsub = node.client().unwrap().get_async_pubsub().await.unwrap();
        pubsub.psubscribe(WAITER_CHANNELS).await.unwrap();
        announcements.push(pubsub.into_on_message());
    }
    let holder = redlock(&cluster, patient()).await;
    let held = holder.try_acquire(RESOURCE).await.unwrap();
    let waiter = {
        let lock = redlock(&cluster, patient()).await;
        tokio::spawn(async move {
            let guard = lock.acquire(RESOURCE).await.expect("the waiter's acquire");
            (Instant::now(), guard)
        })
    };
    // Its second attempt, right after the first found the lock held, puts it in line on
    // every node.
    eventually(
        "the waiter in line on every node",
        SERVED_WITHIN,
        || async { queue_lengths(&nodes).await == [1, 1, 1] },
    )
    .await;

    let released = Instant::now();
    held.release().await.unwrap();
    // The key is reserved for the waiter (or already its): the releaser cannot take it.
    match holder.try_acquire(RESOURCE).await {
        Err(LockError::Held { .. }) => {}
        other => panic!("the releaser took the lock back from the line: {other:?}"),
    }
    let (got_it, guard) = tokio::time::timeout(SERVED_WITHIN, waiter)
        .await
        .expect("the waiter was never served")
        .expect("the waiter's task");
    // Claimed on the announcement: its next retry comes a full delay after it queued.
    let took = got_it - released;
    assert!(took < DELAY / 2, "served {took:?} after the release");
    held_on_every_node(&cluster, &guard).await;

    // Each node announced the reservation on the waiter's client channel, naming the
    // waiter ("<client>:<random>"): the key was reserved for it on every node.
    let mut waiters = Vec::new();
    for stream in &mut announcements {
        let message = tokio::time::timeout(SERVED_WITHIN, stream.next())
            .await
            .expect("the reservation was announced")
            .expect("the subscription");
        let channel = message.get_channel_name().to_owned();
        let named: String = message.get_payload().unwrap();
        let client = channel
            .strip_prefix("quorumlock:waiter:")
            .unwrap_or_else(|| panic!("announced on {channel}"));
        assert!(
            named.starts_with(&format!("{client}:")),
            "{named:?} announced on {channel}"
        );
        waiters.push(named);
    }
    assert!(
        waiters.iter().all(|named| *named == waiters[0]),
        "{waiters:?}"
    );
    // The claim took the waiter out of line everywhere.
    eventually("no waiter left in any queue", SERVED_WITHIN, || async {
        queue_lengths(&nodes).await == [0, 0, 0]
    })
    .await;
    guard.release().await.unwrap();
}
