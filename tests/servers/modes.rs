//! One name, one lock, on real redis-server nodes: the scripts that take a name exclusively
//! refuse while its readers or permits live, and readers and permits of another K are
//! refused by the mode the name is held in. The rules are tested on the simulation,
//! `tests/sim/modes.rs`.

use std::time::Duration;

use crate::common::{cluster, config, redlock, TTL};
use quorumlock::{HeldAs, LockError, RwLock, Semaphore};

fn held<T>(result: Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Held { .. }))
}

#[tokio::test]
async fn a_name_is_one_lock_with_one_of_three_nodes_down() {
    let mut cluster = cluster(3).await;
    let lock = redlock(&cluster, config(TTL)).await;
    cluster.node_mut(2).kill().await.unwrap();
    let two = Semaphore::new(lock.clone(), "n", 2).unwrap();
    let three = Semaphore::new(lock.clone(), "n", 3).unwrap();
    let rwlock = RwLock::new(lock.clone(), "n").unwrap();

    let permit = two.try_acquire().await.expect("a free permit");
    assert!(held(lock.try_acquire("n").await), "a mutex beside a permit");
    let waited = lock.acquire_timeout("n", Duration::from_millis(300)).await;
    assert!(
        matches!(
            waited,
            Err(LockError::Held { .. } | LockError::TimedOut { .. })
        ),
        "a blocking mutex beside a permit: {waited:?}"
    );
    assert!(held(rwlock.try_write().await), "a writer beside a permit");
    match three.try_acquire().await {
        Err(LockError::ModeMismatch { held_as, .. }) => assert_eq!(held_as, HeldAs::Permits(2)),
        other => panic!("a permit of 3 beside one of 2: {other:?}"),
    }
    match rwlock.try_read().await {
        Err(LockError::ModeMismatch { held_as, .. }) => assert_eq!(held_as, HeldAs::Permits(2)),
        other => panic!("a reader beside a permit: {other:?}"),
    }
    permit.release().await.unwrap();

    let reader = rwlock.try_read().await.expect("the permit was given back");
    assert!(held(lock.try_acquire("n").await), "a mutex beside a reader");
    match two.try_acquire().await {
        Err(LockError::ModeMismatch { held_as, .. }) => assert_eq!(held_as, HeldAs::Readers),
        other => panic!("a permit beside a reader: {other:?}"),
    }
    reader.release().await.unwrap();

    let mutex = lock.try_acquire("n").await.expect("nobody holds the name");
    assert!(held(two.try_acquire().await), "a permit beside a mutex");
    mutex.release().await.unwrap();
}
