//! The lock-delay (`LockConfig::lock_delay`): a lease that ends without a release keeps
//! its resource closed for the delay past its TTL, a clean release frees it at once, and
//! the holder's validity stays the TTL's. Instants are exact: the clock is paused, and a
//! node keeps a key through the millisecond of its expiry (as Redis does), so a key set
//! at `t` with `PX p` is gone at `t + p + 1 ms`.

use std::time::Duration;

use quorumlock::sim::{Op, SimCluster};
use quorumlock::{AutoExtend, LeaseEnd, LockConfig, LockError, RwLock, Semaphore};
use tokio::time::Instant;

use crate::support::{client, cluster, holding};

const TTL: Duration = Duration::from_millis(1_000);
const DELAY: Duration = Duration::from_millis(600);
const MS: Duration = Duration::from_millis(1);

/// A config without retries, a [`TTL`] and a lock-delay of `delay`.
fn delayed(delay: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(TTL / 10)
        .retry_count(0)
        .lock_delay(delay)
        .build()
        .expect("valid lock-delay config")
}

fn held<T>(result: &Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

/// The expiry `key` has left on every node of `cluster`.
fn key_ttls(cluster: &SimCluster, key: &str) -> Vec<Option<Duration>> {
    cluster.nodes().iter().map(|node| node.ttl(key)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_clean_release_frees_the_name_at_once() {
    let cluster = cluster(3);
    let (holder, next) = (
        client(&cluster, "holder", delayed(DELAY)),
        client(&cluster, "next", delayed(DELAY)),
    );
    let guard = holder.try_acquire("report").await.unwrap();
    let key = guard.key().to_owned();
    // Written for the TTL and the delay...
    assert_eq!(key_ttls(&cluster, &key), vec![Some(TTL + DELAY); 3]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    // ...and deleted by the release: nobody waits for either.
    let released = Instant::now();
    let other = next.try_acquire("report").await.unwrap();
    assert_eq!(Instant::now(), released);
    assert_eq!(holding(&cluster, &other), 3);
    other.release().await.unwrap();
}

/// Acquires "report" with `delay`, lets the guard go without a release (a holder that
/// crashed), and returns when it was acquired and the first instant another client got it.
async fn freed_after_an_unclean_end(delay: Duration) -> (Instant, Instant) {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", delayed(delay));
    let next = client(&cluster, "next", delayed(delay));
    let guard = holder.try_acquire("report").await.unwrap();
    let acquired = guard.acquired_at();
    assert_eq!(Instant::now(), acquired, "a round takes no virtual time");
    let deadline = guard.deadline();
    assert_eq!(deadline, acquired + delayed(delay).max_validity());
    std::mem::forget(guard);
    tokio::time::sleep_until(acquired + TTL + delay).await;
    assert!(
        held(&next.try_acquire("report").await),
        "closed through ttl + delay"
    );
    tokio::time::sleep(MS).await;
    let other = next
        .try_acquire("report")
        .await
        .expect("free once the key expired");
    other.release().await.unwrap();
    (acquired, Instant::now())
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_keeps_the_name_closed_for_the_delay_past_its_ttl() {
    let (acquired, freed) = freed_after_an_unclean_end(DELAY).await;
    assert_eq!(freed, acquired + TTL + DELAY + MS);
    // Without a delay, the same end frees it at the TTL.
    let (acquired, freed) = freed_after_an_unclean_end(Duration::ZERO).await;
    assert_eq!(freed, acquired + TTL + MS);
}

#[tokio::test(start_paused = true)]
async fn a_paused_holder_past_its_validity_is_told_so_and_its_late_release_frees_the_name() {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", delayed(DELAY));
    let next = client(&cluster, "next", delayed(DELAY));
    let mut guard = holder.try_acquire("report").await.unwrap();
    // Paused past the TTL, within the delay: the keys are still its own, but the lease is
    // over, and it may not extend it from there.
    tokio::time::sleep(TTL + DELAY / 2).await;
    assert!(guard.is_expired());
    assert!(!guard.is_acquired().await.unwrap());
    assert!(matches!(
        guard.refresh().await,
        Err(LockError::Expired { .. })
    ));
    assert_eq!(holding(&cluster, &guard), 3);
    assert!(held(&next.try_acquire("report").await));
    // Its release (after its late write) still deletes its own keys: free at once.
    guard.release().await.unwrap();
    next.try_acquire("report")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_extension_sets_the_keys_for_ttl_plus_delay_and_the_validity_for_the_ttl() {
    let cluster = cluster(3);
    let config = delayed(DELAY);
    let lock = client(&cluster, "holder", config.clone());
    let mut guard = lock.try_acquire("report").await.unwrap();
    let key = guard.key().to_owned();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let validity = guard.refresh().await.unwrap();
    let extended = Instant::now();
    assert_eq!(validity, config.max_validity());
    assert_eq!(guard.deadline(), extended + config.max_validity());
    assert_eq!(key_ttls(&cluster, &key), vec![Some(TTL + DELAY); 3]);

    // The watchdog keeps the TTL's pace: an extension every third of it, each for both.
    guard.auto_extend(AutoExtend::default()).unwrap();
    tokio::time::sleep(TTL * 3).await;
    let extensions = lock.metrics().extended;
    assert!((9..=10).contains(&extensions), "{:?}", lock.metrics());
    let left = key_ttls(&cluster, &key);
    assert!(
        left.iter()
            .all(|ttl| ttl.is_some_and(|ttl| ttl > TTL / 2 + DELAY)),
        "{left:?}"
    );
    assert!(guard.validity() <= config.max_validity());
    guard.release().await.unwrap();
    assert_eq!(key_ttls(&cluster, &key), vec![None; 3]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_to_unreachable_nodes_keeps_the_delay_from_its_last_extension() {
    let cluster = cluster(3);
    let config = delayed(DELAY);
    let holder = client(&cluster, "holder", config.clone());
    let next = client(&cluster, "next", config.clone());
    let mut guard = holder.try_acquire("report").await.unwrap();
    guard.auto_extend(AutoExtend::default()).unwrap();
    tokio::time::sleep(TTL / 2).await;
    // The holder's requests stop arriving: its watchdog loses the lease before the deadline.
    let last_extended = guard.deadline() - config.max_validity();
    for node in cluster.nodes() {
        node.lose_replies(true);
    }
    let end = guard.lost().await;
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");
    for node in cluster.nodes() {
        node.lose_replies(false);
    }
    // Its keys stay for the TTL and the delay past its last extension, not less.
    tokio::time::sleep_until(last_extended + TTL + DELAY).await;
    assert!(held(&next.try_acquire("report").await));
    tokio::time::sleep(MS).await;
    next.try_acquire("report")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_keys_were_taken_away_keeps_no_delay() {
    // The delay lives in the keys: an eviction, a flush or a restart that lost them takes
    // it away with them (docs/safety.md, "Lock-delay").
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", delayed(DELAY));
    let next = client(&cluster, "next", delayed(DELAY));
    let mut guard = holder.try_acquire("report").await.unwrap();
    guard.auto_extend(AutoExtend::default()).unwrap();
    let key = guard.key().to_owned();
    assert!(cluster.node(0).evict(&key) && cluster.node(1).evict(&key));
    // The minority's key keeps its delay, but a minority closes nothing.
    assert_eq!(cluster.node(2).ttl(&key), Some(TTL + DELAY));
    let evicted = Instant::now();
    let other = next
        .try_acquire("report")
        .await
        .expect("a majority lost the key");
    assert_eq!(Instant::now(), evicted);
    let end = guard.lost().await;
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");
    other.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_family_writes_its_keys_for_ttl_plus_delay() {
    let cluster = cluster(3);
    let lock = client(&cluster, "family", delayed(DELAY));
    let reader = RwLock::new(lock.clone(), "catalog")
        .unwrap()
        .try_read()
        .await
        .unwrap();
    for key in reader.keys() {
        assert_eq!(key_ttls(&cluster, key), vec![Some(TTL + DELAY); 3], "{key}");
    }
    reader.release().await.unwrap();
    let writer = RwLock::new(lock.clone(), "catalog")
        .unwrap()
        .try_write()
        .await
        .unwrap();
    assert_eq!(key_ttls(&cluster, writer.key()), vec![Some(TTL + DELAY); 3]);
    writer.release().await.unwrap();
    let permit = Semaphore::new(lock, "uploads", 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let key = permit.guard().key().to_owned();
    assert_eq!(key_ttls(&cluster, &key), vec![Some(TTL + DELAY); 3]);
    permit.into_guard().release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_queued_waiter_behind_a_crashed_holder_gets_in_after_ttl_plus_delay() {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", delayed(DELAY));
    let retry = Duration::from_millis(70);
    let waiting = delayed(DELAY)
        .to_builder()
        .retry_count(100)
        .retry_delay(retry)
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    assert!(waiting.fair());
    let waiter = client(&cluster, "waiter", waiting);
    let guard = holder.try_acquire("report").await.unwrap();
    let acquired = guard.acquired_at();
    std::mem::forget(guard);
    let got = crate::support::spawn_timed(async move { waiter.acquire("report").await });
    let (at, guard) = got.await.unwrap();
    let guard = guard.expect("in once the key expired");
    // Its first attempt after the key expired (every `retry`, from `acquired`) let it in.
    let free = acquired + TTL + DELAY + MS;
    assert!(at >= free, "in {:?} before the delay ended", free - at);
    assert!(at < free + retry, "in {:?} after it", at - free);
    assert_eq!(guard.deadline(), at + delayed(DELAY).max_validity());
    guard.release().await.unwrap();
}

/// The requests each node got for an acquire, a refresh and a release with `delay`: their
/// kinds and keys, and the expiries they carried.
async fn requests_with(delay: Duration) -> (Vec<String>, Vec<Duration>) {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", delayed(delay));
    let mut guard = lock.try_acquire("report").await.unwrap();
    guard.refresh().await.unwrap();
    guard.release().await.unwrap();
    let (mut kinds, mut expiries) = (Vec::new(), Vec::new());
    for (node, record) in cluster.log() {
        let kind = match record.op {
            Op::Lock { ttl } => {
                expiries.push(ttl);
                "lock"
            }
            Op::Extend { ttl } => {
                expiries.push(ttl);
                "extend"
            }
            Op::Unlock => "unlock",
            ref other => panic!("unexpected request {other:?}"),
        };
        kinds.push(format!("{node} {kind} {:?}", record.keys));
    }
    (kinds, expiries)
}

#[tokio::test(start_paused = true)]
async fn the_delay_costs_no_request_only_another_expiry() {
    let (plain, plain_expiries) = requests_with(Duration::ZERO).await;
    let (delayed, delayed_expiries) = requests_with(DELAY).await;
    // One lock, one extend and one unlock per node, with or without the delay.
    assert_eq!(plain.len(), 9, "{plain:?}");
    assert_eq!(delayed, plain);
    assert_eq!(plain_expiries, vec![TTL; 6]);
    assert_eq!(delayed_expiries, vec![TTL + DELAY; 6]);
}
