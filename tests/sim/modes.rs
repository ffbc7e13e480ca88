//! One name is one lock: a mutex of a name excludes its readers and its semaphore's
//! permits and they exclude it (contention, `Held`), and readers, permits of K and permits
//! of another K refuse each other by name (`ModeMismatch`), on the real scripts over five
//! simulated nodes. (`tests/servers/modes.rs` runs the scripts on a real Redis.)

use quorumlock::sim::SimCluster;
use quorumlock::{HeldAs, LockError, LockGuard, Redlock, RwLock, Semaphore};

use crate::support::{client, cluster, config, TTL};

fn lock(cluster: &SimCluster) -> Redlock {
    client(cluster, "modes", config(TTL))
}

fn held<T>(result: Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

/// The mode a refused attempt named, if it was refused as a mismatch.
fn mismatch<T>(result: Result<T, LockError>) -> Option<HeldAs> {
    match result {
        Err(LockError::ModeMismatch { held_as, .. }) => Some(held_as),
        _ => None,
    }
}

async fn release(guard: LockGuard) {
    guard.release().await.expect("released");
}

#[tokio::test(start_paused = true)]
async fn a_mutex_waits_for_the_readers_of_its_name_and_they_for_it() {
    let cluster = cluster(5);
    let lock = lock(&cluster);
    let catalog = RwLock::new(lock.clone(), "catalog").unwrap();

    let reader = catalog.try_read().await.expect("a free lock");
    assert!(
        held(lock.try_acquire("catalog").await),
        "a mutex beside a reader"
    );
    assert!(
        held(lock.try_acquire_many(&["catalog", "other"]).await),
        "a lock of several names, one of them read"
    );
    release(reader).await;

    let mutex = lock.try_acquire("catalog").await.expect("the readers left");
    assert!(held(catalog.try_read().await), "a reader beside a mutex");
    release(mutex).await;
}

#[tokio::test(start_paused = true)]
async fn a_mutex_and_the_permits_of_its_name_exclude_each_other() {
    let cluster = cluster(5);
    let lock = lock(&cluster);
    let uploads = Semaphore::new(lock.clone(), "uploads", 2).unwrap();
    let rwlock = RwLock::new(lock.clone(), "uploads").unwrap();

    let permit = uploads.try_acquire().await.expect("a free permit");
    assert!(
        held(lock.try_acquire("uploads").await),
        "a mutex beside a permit"
    );
    assert!(held(rwlock.try_write().await), "a writer beside a permit");
    permit.release().await.unwrap();

    let mutex = lock
        .try_acquire("uploads")
        .await
        .expect("the permit was given back");
    assert!(held(uploads.try_acquire().await), "a permit beside a mutex");
    release(mutex).await;
    let _permit = uploads.try_acquire().await.expect("free again");
}

#[tokio::test(start_paused = true)]
async fn readers_and_permits_of_another_k_are_refused_by_the_mode_the_name_is_held_in() {
    let cluster = cluster(5);
    let lock = lock(&cluster);
    let two = Semaphore::new(lock.clone(), "jobs", 2).unwrap();
    let three = Semaphore::new(lock.clone(), "jobs", 3).unwrap();
    let rwlock = RwLock::new(lock.clone(), "jobs").unwrap();

    let first = two.try_acquire().await.expect("a free permit");
    let second = two.try_acquire().await.expect("the other permit");
    // Its third slot is free, but two permits of a semaphore of 2 hold the name.
    assert_eq!(
        mismatch(three.try_acquire().await),
        Some(HeldAs::Permits(2))
    );
    assert_eq!(
        mismatch(three.acquire().await),
        Some(HeldAs::Permits(2)),
        "not retried"
    );
    assert_eq!(mismatch(rwlock.try_read().await), Some(HeldAs::Permits(2)));
    assert!(
        held(two.try_acquire().await),
        "a third permit of 2 is contention"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();

    let reader = rwlock
        .try_read()
        .await
        .expect("the permits were given back");
    assert_eq!(mismatch(two.try_acquire().await), Some(HeldAs::Readers));
    release(reader).await;
    // The mode is its holders': once they left, the name can be taken another way.
    let _permit = three.try_acquire().await.expect("nobody holds the name");
}
