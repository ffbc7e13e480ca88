//! The semaphore's logic: K permits over five nodes and no more, with nodes down, one
//! frozen, a holder that drops its permit and one paused past its TTL.
//! (`tests/servers/semaphore.rs` checks the permits on a real Redis.)

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::sim::{Op, Outcome, SimCluster};
use quorumlock::{LockError, Redlock, Semaphore};
use tokio::time::Instant;

use crate::support::{client, cluster, config, retrying, spawn_timed, TTL};

/// The retry delay of a waiter: exact (no jitter), so that when it gets a permit says
/// which attempt got it.
const DELAY: Duration = Duration::from_millis(30);

/// How long the tests let a waiter wait: not a multiple of [`DELAY`].
const WAIT: Duration = Duration::from_millis(100);

/// The instant of the waiter's first attempt after [`WAIT`], counted from its start.
const NEXT_ATTEMPT: Duration = Duration::from_millis(120);

fn semaphore(lock: &Redlock, permits: u32) -> Semaphore {
    Semaphore::new(lock.clone(), "uploads", permits).expect("a valid semaphore")
}

/// The keys of every permit attempt the nodes of `cluster` were sent.
fn keys_tried(cluster: &SimCluster) -> BTreeSet<String> {
    cluster
        .log()
        .into_iter()
        .filter(|(_, record)| matches!(record.op, Op::LockPermit { .. }))
        .flat_map(|(_, record)| record.keys)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn k_permits_and_no_more_with_two_of_five_nodes_down() {
    let cluster = cluster(5);
    let lock = client(&cluster, "uploads", config(TTL));
    cluster.node(0).crash();
    cluster.node(3).crash();
    let uploads = semaphore(&lock, 3);

    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(uploads.try_acquire().await.expect("a free permit"));
    }
    let mut slots: Vec<u32> = permits.iter().map(|permit| permit.slot()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2]);
    for permit in &permits {
        assert_eq!(
            crate::support::holding(&cluster, permit.guard()),
            3,
            "on each live node"
        );
    }
    let refused = uploads.try_acquire().await.unwrap_err();
    assert!(matches!(refused, LockError::Held { ref resource, .. } if resource == "uploads"));

    let freed = permits.pop().unwrap();
    let slot = freed.slot();
    freed
        .release()
        .await
        .expect("released on the three live nodes");
    let again = uploads.try_acquire().await.expect("the freed permit");
    assert_eq!(again.slot(), slot);
}

#[tokio::test(start_paused = true)]
async fn three_of_five_down_is_no_quorum_not_held() {
    let cluster = cluster(5);
    let lock = client(&cluster, "uploads", config(TTL));
    for i in 0..3 {
        cluster.node(i).crash();
    }
    let error = semaphore(&lock, 4).try_acquire().await.unwrap_err();
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");
    // Said at the first slot: the other slots run on the same nodes.
    let tried = keys_tried(&cluster);
    assert_eq!(tried.len(), 1, "{tried:?}");
}

/// A frozen node's requests vanish. A slot won is decided by a quorum of the others at
/// once; a slot refused is heard out to the frozen node's timeout (to tell contention from
/// an outage), then rolled back on the frozen node, whose `SET` may have landed, which
/// waits out its timeout again: two node timeouts per refused slot, nothing per win.
#[tokio::test(start_paused = true)]
async fn a_frozen_node_delays_a_refused_slot_by_two_node_timeouts_and_a_won_one_not_at_all() {
    let cluster = cluster(5);
    let config = config(TTL);
    let refused_slot = 2 * config.node_timeout();
    let lock = client(&cluster, "uploads", config);
    cluster.node(2).lose_replies(true);
    let uploads = semaphore(&lock, 2);

    let started = Instant::now();
    let first = uploads.try_acquire().await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "a win waits for nobody");
    let started = Instant::now();
    let second = uploads.try_acquire().await.unwrap();
    let took = started.elapsed();
    // It started at the free slot, or at the first's and then moved on.
    assert!(
        took == Duration::ZERO || took == refused_slot,
        "the second permit took {took:?}"
    );
    let started = Instant::now();
    assert!(uploads.try_acquire().await.is_err());
    assert_eq!(started.elapsed(), 2 * refused_slot, "two slots refused");
    // It was asked for every slot tried, and never answered.
    let asked = cluster.node(2).log();
    assert!(asked.len() >= 4, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|record| matches!(record.outcome, Outcome::Dropped { .. })),
        "{asked:?}"
    );
    cluster.node(2).lose_replies(false);
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_permit_is_given_back_for_the_next_waiter() {
    let cluster = cluster(5);
    let uploads = semaphore(
        &client(&cluster, "uploads", retrying(20, DELAY, Duration::ZERO)),
        1,
    );
    let held = uploads.try_acquire().await.unwrap();
    let started = Instant::now();
    let waiter = {
        let uploads = uploads.clone();
        spawn_timed(async move { uploads.acquire().await })
    };
    tokio::time::sleep(WAIT).await;
    assert!(!waiter.is_finished(), "the only permit is held");
    drop(held); // an early return, a panic: released in the background
    let (got_it, permit) = waiter.await.unwrap();
    let permit = permit.expect("the permit");
    // Well within its retries: at its first attempt after the drop.
    assert_eq!(got_it - started, NEXT_ATTEMPT);
    assert_eq!(permit.slot(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_holder_paused_past_its_ttl_loses_its_permit_and_deletes_nothing() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(400);
    let lock = client(&cluster, "uploads", config(ttl));
    let uploads = semaphore(&lock, 1);
    let started = Instant::now();
    let paused = uploads.try_acquire().await.unwrap();
    let lost = paused.lost();

    // The holder stops (a GC pause, SIGSTOP): no refresh, and its TTL runs out.
    tokio::time::sleep_until(paused.deadline() - Duration::from_millis(1)).await;
    assert!(!lost.is_lost(), "lost before its deadline");
    tokio::time::sleep_until(paused.deadline()).await;
    assert!(lost.is_lost(), "the lost signal fired at the deadline");
    tokio::time::sleep_until(started + ttl + Duration::from_millis(100)).await;
    let next = uploads
        .try_acquire()
        .await
        .expect("the expired slot is free");

    // The paused holder wakes: its release deletes nothing of the new holder's.
    let error = paused.release().await.unwrap_err();
    assert!(matches!(error, LockError::NotHeld { .. }), "{error}");
    assert!(next.is_acquired().await.unwrap());
    assert_eq!(
        crate::support::holding(&cluster, next.guard()),
        5,
        "the new holder's key untouched"
    );
    assert!(
        uploads.try_acquire().await.is_err(),
        "still one permit in use"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_clients_never_hold_more_than_k_permits() {
    const PERMITS: u32 = 3;
    let cluster = cluster(5);
    // Each node a little slower than the last, so that the clients' requests interleave.
    for (i, node) in cluster.nodes().iter().enumerate() {
        node.set_request_delay(Duration::from_micros(100 * i as u64));
    }
    let config = retrying(200, Duration::from_millis(10), Duration::from_millis(5));
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..8 {
        // Each client has connections of its own, as separate processes would.
        let uploads = semaphore(
            &client(&cluster, &format!("client-{i}"), config.clone()),
            PERMITS,
        );
        let (in_use, most) = (Arc::clone(&in_use), Arc::clone(&most));
        clients.push(tokio::spawn(async move {
            for _ in 0..5 {
                let permit = uploads
                    .acquire()
                    .await
                    .expect("a permit within the retries");
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("released");
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS as usize, "{most} holders at once");
    assert!(most >= 2, "permits were shared: {most} at once");
}

#[tokio::test(start_paused = true)]
async fn zero_or_too_many_permits_are_refused() {
    let cluster = cluster(1);
    let lock = client(&cluster, "uploads", config(TTL));
    for permits in [0, Semaphore::MAX_PERMITS + 1] {
        let error = Semaphore::new(lock.clone(), "uploads", permits).unwrap_err();
        assert!(
            matches!(
                error,
                LockError::Config(quorumlock::ConfigError::InvalidPermits { .. })
            ),
            "{error}"
        );
    }
    let long = "x".repeat(quorumlock::MAX_RESOURCE_LEN - 3);
    let error = Semaphore::new(lock, &long, 2).unwrap_err();
    assert!(
        matches!(error, LockError::InvalidResource { .. }),
        "{error}"
    );
}
