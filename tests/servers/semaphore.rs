//! The semaphore on real redis-server nodes: K permits over five nodes, with two of them
//! down, one frozen, a holder that drops its permit and one paused past its TTL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{cluster, config, redlock, retrying, TTL};
use quorumlock::{LockError, Redlock, Semaphore};

async fn semaphore(lock: &Redlock, permits: u32) -> Semaphore<Redlock> {
    Semaphore::new(lock.clone(), "uploads", permits).expect("a valid semaphore")
}

#[tokio::test]
async fn k_permits_and_no_more_with_two_of_five_nodes_down() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(0).kill().await.unwrap();
    cluster.node_mut(3).kill().await.unwrap();
    let uploads = semaphore(&lock, 3).await;

    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(uploads.try_acquire().await.expect("a free permit"));
    }
    let mut slots: Vec<u32> = permits.iter().map(|permit| permit.slot()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2]);
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

#[tokio::test]
async fn three_of_five_down_is_no_quorum_not_held() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    for i in 0..3 {
        cluster.node_mut(i).kill().await.unwrap();
    }
    let error = semaphore(&lock, 4).await.try_acquire().await.unwrap_err();
    // Said at the first slot: the other slots run on the same nodes.
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");
}

#[tokio::test]
async fn a_frozen_node_delays_each_slot_by_one_node_timeout_at_most() {
    let mut cluster = cluster(5).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(2).freeze().await.unwrap();
    let uploads = semaphore(&lock, 2).await;
    let started = std::time::Instant::now();
    let first = uploads.try_acquire().await.unwrap();
    let second = uploads.try_acquire().await.unwrap();
    assert!(uploads.try_acquire().await.is_err());
    // Four lock rounds at most (two wins, two refusals before the first win at worst),
    // each bounded by the 50 ms node timeout, with a margin for the loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    cluster.node_mut(2).thaw().await.unwrap();
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_permit_is_given_back_for_the_next_waiter() {
    let cluster = cluster(5).await;
    let lock = redlock(
        &cluster,
        retrying(20, Duration::from_millis(20), Duration::from_millis(10)),
    )
    .await;
    let uploads = semaphore(&lock, 1).await;
    let held = uploads.try_acquire().await.unwrap();
    let waiter = {
        let uploads = uploads.clone();
        tokio::spawn(async move { uploads.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the only permit is held");
    drop(held); // an early return, a panic: released in the background
    let permit = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter gets the permit well within its retries")
        .unwrap()
        .expect("the permit");
    assert_eq!(permit.slot(), 0);
}

#[tokio::test]
async fn a_holder_paused_past_its_ttl_loses_its_permit_and_deletes_nothing() {
    let cluster = cluster(5).await;
    let ttl = Duration::from_millis(400);
    let lock = redlock(&cluster, config(ttl)).await;
    let uploads = semaphore(&lock, 1).await;
    let paused = uploads.try_acquire().await.unwrap();
    let lost = paused.lost();

    // The holder stops (a GC pause, SIGSTOP): no refresh, and its TTL runs out.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(lost.is_lost(), "the lost signal fired at the deadline");
    let next = uploads
        .try_acquire()
        .await
        .expect("the expired slot is free");

    // The paused holder wakes: its release deletes nothing of the new holder's.
    let error = paused.release().await.unwrap_err();
    assert!(matches!(error, LockError::NotHeld { .. }), "{error}");
    assert!(next.is_acquired().await.unwrap());
    assert!(
        uploads.try_acquire().await.is_err(),
        "still one permit in use"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_never_hold_more_than_k_permits() {
    const PERMITS: u32 = 3;
    let cluster = cluster(5).await;
    let config = retrying(200, Duration::from_millis(10), Duration::from_millis(5));
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..8 {
        // Each client has connections of its own, as separate processes would.
        let uploads = semaphore(&redlock(&cluster, config.clone()).await, PERMITS).await;
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

#[tokio::test]
async fn zero_or_too_many_permits_are_refused() {
    let cluster = cluster(1).await;
    let lock = redlock(&cluster, config(TTL)).await;
    for permits in [0, Semaphore::<Redlock>::MAX_PERMITS + 1] {
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
