//! Fair hand-off (`LockConfig::fair`) end to end on real Redis: a blocking waiter queues on
//! the nodes, and the release grants it the key (sets it to the waiter's token) and
//! announces that on its client's channel with the stamp of the waiter's refresh, and the
//! waiter holds with no round of its own (the direct grant); or, with
//! `direct_grant(false)` and with the release script of the version before it, the release
//! reserves the key for the waiter, which claims it. The fair queue's logic (first come,
//! first served, barging, waiters that give up or die, several keys) is tested on the
//! simulation, `tests/sim/fairness.rs`.

use std::time::Duration;

use crate::common::{
    cluster, eventually, held_on_every_node, proxied, raw_connection, redlock, redlock_via, TTL,
};

use futures::StreamExt;
use quorumlock::node::GrantStamp;
use quorumlock::{LockConfig, LockError, Redlock};
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

/// [`patient`], reserving instead of granting (the protocol before the direct grant).
fn reserving() -> LockConfig {
    patient().to_builder().direct_grant(false).build().unwrap()
}

/// The release script of the version before the direct grant.
const PREVIOUS_UNLOCK: &str = include_str!("previous_protocol/unlock.lua");

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

/// Subscribes to every node's announcements to waiters.
async fn waiter_announcements(cluster: &quorumlock_testkit::RedisCluster) -> Vec<Announcements> {
    let mut announcements = Vec::new();
    for node in cluster.nodes() {
        let mut pubsub = node.client().unwrap().get_async_pubsub().await.unwrap();
        pubsub.psubscribe(WAITER_CHANNELS).await.unwrap();
        announcements.push(pubsub.into_on_message().boxed());
    }
    announcements
}

/// One node's announcements to waiters.
type Announcements = futures::stream::BoxStream<'static, redis::Msg>;

/// The announcements the nodes made to a waiter within half a second each: their payloads
/// with the index of the node that made them, each checked to name a waiter of the client
/// whose channel it went on.
async fn announced(announcements: &mut [Announcements]) -> Vec<(usize, String)> {
    let mut payloads = Vec::new();
    for (node, stream) in announcements.iter_mut().enumerate() {
        let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(500), stream.next()).await
        else {
            continue;
        };
        let channel = message.get_channel_name().to_owned();
        let named: String = message.get_payload().unwrap();
        let client = channel
            .strip_prefix("quorumlock:waiter:")
            .unwrap_or_else(|| panic!("announced on {channel}"));
        assert!(
            named.starts_with(&format!("{client}:")),
            "{named:?} announced on {channel}"
        );
        payloads.push((node, named));
    }
    payloads
}

/// Right after `holder` released [`RESOURCE`] to the line: the key went to the waiter in
/// line (granted or reserved), and `holder` cannot take it straight back.
async fn releaser_cannot_take_it_back(holder: &Redlock) {
    match holder.try_acquire(RESOURCE).await {
        Err(LockError::Held { .. }) => {}
        other => panic!("the releaser took the lock back from the line: {other:?}"),
    }
}

/// On how many nodes [`RESOURCE`] holds `guard`'s token.
async fn holding(nodes: &[MultiplexedConnection], guard: &quorumlock::LockGuard) -> usize {
    let mut holding = 0;
    for connection in nodes {
        let mut connection = connection.clone();
        let value: Option<String> = redis::cmd("GET")
            .arg(RESOURCE)
            .query_async(&mut connection)
            .await
            .unwrap();
        holding += usize::from(value.as_deref() == Some(guard.token().as_str()));
    }
    holding
}

/// A holder of [`RESOURCE`] and a waiter for it in line on every node of three, each a
/// client of its own with `config`, and every node's announcements to waiters subscribed
/// to.
struct Line {
    cluster: quorumlock_testkit::RedisCluster,
    nodes: Vec<MultiplexedConnection>,
    announcements: Vec<Announcements>,
    holder: quorumlock::Redlock,
    held: quorumlock::LockGuard,
    waiter_lock: quorumlock::Redlock,
    /// The waiter's lock's counters before it began to wait.
    before: quorumlock::LockMetrics,
    /// The waiter: when it got the lock, and its guard.
    waiter: tokio::task::JoinHandle<(Instant, quorumlock::LockGuard)>,
}

/// Sets up a [`Line`]: the waiter's second attempt, right after the first found the lock
/// held, puts it in line on every node.
async fn in_line(config: LockConfig) -> Line {
    let cluster = cluster(3).await;
    let mut nodes = Vec::new();
    for node in cluster.nodes() {
        nodes.push(raw_connection(node).await);
    }
    let announcements = waiter_announcements(&cluster).await;
    let holder = redlock(&cluster, config.clone()).await;
    let held = holder.try_acquire(RESOURCE).await.unwrap();
    let waiter_lock = redlock(&cluster, config).await;
    let before = waiter_lock.metrics();
    let waiter = {
        let lock = waiter_lock.clone();
        tokio::spawn(async move {
            let guard = lock.acquire(RESOURCE).await.expect("the waiter's acquire");
            (Instant::now(), guard)
        })
    };
    eventually(
        "the waiter in line on every node",
        SERVED_WITHIN,
        || async { queue_lengths(&nodes).await == [1, 1, 1] },
    )
    .await;
    Line {
        cluster,
        nodes,
        announcements,
        holder,
        held,
        waiter_lock,
        before,
        waiter,
    }
}

#[tokio::test]
async fn a_release_grants_the_lock_to_the_waiter_in_line_without_a_round_of_its_own() {
    let Line {
        cluster: _cluster,
        nodes,
        mut announcements,
        holder,
        held,
        waiter_lock,
        before,
        waiter,
    } = in_line(patient()).await;

    let released = Instant::now();
    held.release().await.unwrap();
    releaser_cannot_take_it_back(&holder).await;
    let (got_it, guard) = tokio::time::timeout(SERVED_WITHIN, waiter)
        .await
        .expect("the waiter was never served")
        .expect("the waiter's task");
    let took = got_it - released;
    assert!(took < DELAY / 2, "served {took:?} after the release");
    // On a quorum at least (a node whose release comes after the waiter won and left its
    // line hands the key to nobody).
    assert!(holding(&nodes, &guard).await >= 2);
    // Two attempts (the one that found the lock held, the one that queued it), and the
    // grants heard: no round to claim the lock.
    let metrics = waiter_lock.metrics();
    assert_eq!(metrics.attempts - before.attempts, 2, "{metrics:?}");
    assert!(
        metrics.grants_heard - before.grants_heard >= 2,
        "{metrics:?}"
    );

    // Each node announced the grant, with the stamp of the refresh whose place it was
    // made on, which names the node too: the same waiter and refresh on every node.
    let payloads = announced(&mut announcements).await;
    assert!(payloads.len() >= 2, "{payloads:?}");
    let waiter_id = payloads[0]
        .1
        .split_once(' ')
        .expect("a grant names its stamp")
        .0;
    for (node, named) in &payloads {
        let stamp = GrantStamp {
            refresh: 1,
            node: *node,
        };
        assert_eq!(
            *named,
            format!("{waiter_id} {}", stamp.encode().unwrap()),
            "{payloads:?}"
        );
    }
    assert!(waiter_id.contains(':'), "{waiter_id}");
    eventually("no waiter left in any queue", SERVED_WITHIN, || async {
        queue_lengths(&nodes).await == [0, 0, 0]
    })
    .await;
    guard.release().await.unwrap();
}

/// A waiter hears a node's grants on a pub/sub connection of that node's, which is not
/// checked for the server it reaches, as the lock connections are. Here node 0's name moves
/// to node 1's server (a DNS change, a VIP failover) after the waiter's lock connections
/// were made, so its announcements for node 0 come from node 1. Nodes 0 and 2 are held by
/// another client; node 1 grants the waiter the key, and announces it on both
/// subscriptions. The waiter must count that grant once, for node 1 (the node its stamp
/// names), and go on waiting: counted by the connection it came on, it made a quorum of
/// two while another client held the other two nodes.
#[tokio::test]
async fn a_grant_heard_on_another_nodes_connection_counts_once_for_the_node_that_made_it() {
    let cluster = proxied(3).await;
    let mut nodes = Vec::new();
    for node in 0..3 {
        nodes.push(raw_connection(cluster.node(node)).await);
    }
    // Its lock connections made (and checked) now, through the proxies.
    let waiter_lock = redlock_via(&cluster, patient()).await;
    let node_1 = ([127, 0, 0, 1], cluster.node(1).port()).into();
    cluster.proxy(0).redirect(node_1);
    let holder: Redlock = redlock(cluster.cluster(), patient()).await;
    let held = holder.try_acquire(RESOURCE).await.unwrap();
    let waiter = {
        let lock = waiter_lock.clone();
        tokio::spawn(async move { lock.acquire(RESOURCE).await })
    };
    eventually(
        "the waiter in line on every node",
        SERVED_WITHIN,
        || async { queue_lengths(&nodes).await == [1, 1, 1] },
    )
    .await;
    // Another client takes nodes 0 and 2, a quorum, as the holder's keys there go.
    for node in [0, 2] {
        let () = redis::cmd("SET")
            .arg(RESOURCE)
            .arg("another-client")
            .arg("PX")
            .arg(60_000)
            .query_async(&mut nodes[node].clone())
            .await
            .unwrap();
    }
    // Released on node 1 only: the other two are no longer the holder's.
    assert!(matches!(
        held.release().await,
        Err(LockError::NotHeld { .. })
    ));
    let granted: Option<String> = redis::cmd("GET")
        .arg(RESOURCE)
        .query_async(&mut nodes[1].clone())
        .await
        .unwrap();
    assert!(
        granted.is_some_and(|token| token != "another-client"),
        "node 1 did not grant the key to the waiter"
    );
    // Past the refresh's wait for grants (the retry delay) and into the next refresh.
    tokio::time::sleep(DELAY + DELAY / 2).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took the lock that another client holds on nodes 0 and 2: {:?}",
        waiter.await
    );
    waiter.abort();
    let metrics = waiter_lock.metrics();
    assert_eq!(metrics.grants_heard, 1, "{metrics:?}");
}

/// A client of the version before the direct grant, releasing with its own script, reserves
/// the key for a waiter of the direct grant (whose place's grant terms it does not read);
/// the waiter hears the reservation, stops waiting for grants, and claims it at once.
#[tokio::test]
async fn a_release_by_a_client_of_the_previous_version_is_claimed_by_a_waiter_of_the_direct_grant()
{
    let Line {
        cluster: _cluster,
        nodes,
        mut announcements,
        holder: _holder,
        held,
        waiter_lock,
        before: _,
        waiter,
    } = in_line(patient()).await;

    // The previous version's release, on every node (the waiter may claim the first
    // reservations before the last nodes are released).
    let released = Instant::now();
    let keys = [
        RESOURCE,
        QUEUE,
        "quorumlock:waiter-deadlines:fair",
        "quorumlock:watched:fair",
    ];
    for connection in &nodes {
        let mut connection = connection.clone();
        let released: i64 = redis::cmd("EVAL")
            .arg(PREVIOUS_UNLOCK)
            .arg(keys.len())
            .arg(&keys[..])
            .arg(held.token().as_str())
            .arg("quorumlock:released:")
            .query_async(&mut connection)
            .await
            .expect("the previous release script");
        assert_eq!(released, 1);
    }
    let (got_it, guard) = tokio::time::timeout(SERVED_WITHIN, waiter)
        .await
        .expect("the waiter was never served")
        .expect("the waiter's task");
    let took = got_it - released;
    assert!(took < DELAY / 2, "served {took:?} after the release");
    // On a quorum at least: it may win on the first two nodes released, and leave the
    // third node's line before that node's release reaches it.
    assert!(holding(&nodes, &guard).await >= 2);
    // The nodes released before the waiter won announced a reservation (the waiter, no
    // stamp), which it claimed: a quorum of them at least.
    let payloads = announced(&mut announcements).await;
    assert!(payloads.len() >= 2, "{payloads:?}");
    assert!(
        payloads.iter().all(|(_, named)| !named.contains(' ')),
        "{payloads:?}"
    );
    assert_eq!(waiter_lock.metrics().grants_heard, 0);
    drop(held); // its release finds the key another's: nothing to do
    guard.release().await.unwrap();
}

#[tokio::test]
async fn with_reservations_a_release_is_reserved_for_the_waiter_in_line_and_claimed_on_its_announcement(
) {
    let Line {
        cluster,
        nodes,
        mut announcements,
        holder,
        held,
        waiter_lock: _,
        before: _,
        waiter,
    } = in_line(reserving()).await;

    let released = Instant::now();
    held.release().await.unwrap();
    // The key is reserved for the waiter (or already its): the releaser cannot take it.
    releaser_cannot_take_it_back(&holder).await;
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
