//! The semaphore on real redis-server nodes: K permits and no more over five nodes, with
//! two of them down. The semaphore's logic (no quorum, a frozen node, a dropped permit, a
//! holder paused past its TTL, concurrent clients, its settings) is tested on the
//! simulation, `tests/sim/semaphore.rs`.

use crate::common::{cluster, config, redlock, TTL};
use quorumlock::{LockError, Redlock, Semaphore};

async fn semaphore(lock: &Redlock, permits: u32) -> Semaphore {
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
