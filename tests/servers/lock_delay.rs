//! The lock-delay on real servers: a holder paused past its TTL (it just sleeps past its
//! validity, as a GC pause or a stopped VM would make it) wakes and writes a counter in a
//! separate Redis server. With a lock-delay longer than its overrun, nobody else got in
//! before that late write; without one, a second holder is inside and the late write lands
//! in the middle of its read-modify-write, whose update it loses.

use std::time::Duration;

use quorumlock::{LockConfig, Redlock};
use redis::AsyncCommands;
use tokio::time::Instant;

use crate::common::{cluster, raw_connection, redlock, LOAD_MARGIN, NODE_TIMEOUT};

const TTL: Duration = Duration::from_secs(2);
/// How far past its TTL the paused holder sleeps before its late write.
const OVERRUN: Duration = Duration::from_millis(300);
/// How long the second holder's read-modify-write of the counter takes: the late write of
/// an unprotected run lands inside it by the whole overrun and more, either side. Well
/// within the second holder's validity, which it releases in.
const SECOND_HOLD: Duration = Duration::from_secs(1);

fn config(lock_delay: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT.min(TTL / 10))
        .retry_count(1_000)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(10))
        .lock_delay(lock_delay)
        .build()
        .expect("valid lock-delay config")
}

/// What one run saw: the counter at the end, and when (from the first acquisition) the
/// late write landed and the second holder got in.
#[derive(Debug)]
struct Run {
    counter: i64,
    late_write: Duration,
    second_in: Duration,
    /// Whether the paused holder's release, after its late write, found its own keys.
    released_own: bool,
}

/// The paused holder on `first` and the second holder on `second`, around `counter` in
/// the `store` server: the second reads it, holds the lock for [`SECOND_HOLD`], writes
/// what it read plus one; the paused one increments it [`OVERRUN`] past its TTL, then
/// releases (its write done).
async fn run(first: &Redlock, second: &Redlock, store: &redis::aio::MultiplexedConnection) -> Run {
    let counter = "lock-delay:counter";
    let mut db = store.clone();
    let _: () = db.set(counter, 0).await.unwrap();
    let guard = first.try_acquire("ledger").await.unwrap();
    let start = Instant::now();
    let (second, mut db2) = (second.clone(), store.clone());
    let other = tokio::spawn(async move {
        let guard = second
            .acquire("ledger")
            .await
            .expect("the second holder gets in");
        let second_in = start.elapsed();
        let read: i64 = db2.get(counter).await.unwrap();
        tokio::time::sleep(SECOND_HOLD).await;
        let _: () = db2.set(counter, read + 1).await.unwrap();
        guard.release().await.unwrap();
        second_in
    });
    tokio::time::sleep_until(start + TTL + OVERRUN).await;
    assert!(guard.is_expired(), "the pause outlived the validity");
    let _: i64 = db.incr(counter, 1).await.unwrap();
    let late_write = start.elapsed();
    let released_own = guard.release().await.is_ok();
    let second_in = other.await.unwrap();
    Run {
        counter: db.get(counter).await.unwrap(),
        late_write,
        second_in,
        released_own,
    }
}

#[tokio::test]
async fn the_lock_delay_keeps_a_paused_holders_late_write_alone() {
    let nodes = cluster(3).await;
    let store_node = cluster(1).await;
    let store = raw_connection(store_node.node(0)).await;

    // Without a delay the second holder is in at the TTL: the late write lands inside its
    // section, and its update is lost.
    let (first, second) = (
        redlock(&nodes, config(Duration::ZERO)).await,
        redlock(&nodes, config(Duration::ZERO)).await,
    );
    let unprotected = run(&first, &second, &store).await;
    assert!(
        unprotected.second_in < unprotected.late_write,
        "{unprotected:?}"
    );
    assert!(
        unprotected.late_write < unprotected.second_in + SECOND_HOLD,
        "{unprotected:?}"
    );
    assert_eq!(unprotected.counter, 1, "one update lost: {unprotected:?}");
    assert!(!unprotected.released_own, "{unprotected:?}");
    assert!(
        unprotected.second_in < TTL + LOAD_MARGIN.min(OVERRUN),
        "{unprotected:?}"
    );

    // With a delay longer than the overrun nobody is in before the late write; the late
    // release then lets the second holder in at once, not only at ttl + delay.
    let delay = OVERRUN * 4;
    let (first, second) = (
        redlock(&nodes, config(delay)).await,
        redlock(&nodes, config(delay)).await,
    );
    let protected = run(&first, &second, &store).await;
    assert!(protected.late_write < protected.second_in, "{protected:?}");
    assert_eq!(protected.counter, 2, "both updates kept: {protected:?}");
    assert!(protected.released_own, "{protected:?}");
    assert!(protected.second_in < TTL + delay, "{protected:?}");
}
