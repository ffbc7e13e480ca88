//! Fair hand-off (`LockConfig::fair`): blocking waiters queue on the nodes, and each release
//! is reserved for the first live waiter in line, so the lock goes first come, first served,
//! nobody barges, and a waiter that gives up or dies stops holding the line up.
//!
//! Each `Redlock` below is made by its own `redlock(&cluster, ..)`, with its own
//! connections and client id, as in separate processes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{cluster, eventually, held_on_every_node, raw_connection, redlock, TTL};

use quorumlock::{LockConfig, LockError, LockGuard, Redlock};
use quorumlock_testkit::RedisCluster;
use redis::aio::MultiplexedConnection;
use redis::FromRedisValue;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The resource; without a key prefix it is also the lock key.
const RESOURCE: &str = "fair";
/// The nodes' queue of [`RESOURCE`] and the deadlines of its places.
const QUEUE: &str = "quorumlock:waiters:fair";
const DEADLINES: &str = "quorumlock:waiter-deadlines:fair";
/// What a key reserved for a waiter holds, before the waiter's id.
const RESERVED: &str = "quorumlock:reserved:";

/// Far above any hand-off on a loaded machine: only a waiter that is never served hits it.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

/// A blocking acquire that never runs out of retries, with the default delay and jitter:
/// its queue place lasts 2 * 300 + 4 * 50 + 100 = 900 ms without a refresh. So many
/// retries need a deadline; no passing test comes near it.
fn patient() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap()
}

/// Retries every 100 ms, but with a place that lasts 2 * 100 + 4 * 500 + 100 = 2.3 s: a
/// place that is gone well before that was given back, not left to lapse.
fn long_lived_places() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap()
}

/// Direct connections to every node, for looking at the lock key and its queue.
struct Nodes(Vec<MultiplexedConnection>);

impl Nodes {
    async fn of(cluster: &RedisCluster) -> Self {
        let mut connections = Vec::new();
        for node in cluster.nodes() {
            connections.push(raw_connection(node).await);
        }
        Nodes(connections)
    }

    /// Runs `args` on every node; the replies in node order.
    async fn each<T: FromRedisValue>(&self, args: &[&str]) -> Vec<T> {
        let mut replies = Vec::new();
        for connection in &self.0 {
            let mut connection = connection.clone();
            let mut cmd = redis::cmd(args[0]);
            for arg in &args[1..] {
                cmd.arg(*arg);
            }
            let reply = cmd
                .query_async(&mut connection)
                .await
                .unwrap_or_else(|err| panic!("{args:?}: {err}"));
            replies.push(reply);
        }
        replies
    }

    /// How many waiters each node's queue holds.
    async fn queue_lengths(&self) -> Vec<usize> {
        self.each(&["ZCARD", QUEUE]).await
    }

    /// The lock key's value on each node.
    async fn values(&self) -> Vec<Option<String>> {
        self.each(&["GET", RESOURCE]).await
    }

    /// Waits until every node's queue holds exactly `waiters`.
    async fn wait_queued(&self, waiters: usize) {
        eventually(
            &format!("{waiters} waiter(s) queued on every node"),
            SERVED_WITHIN,
            || async {
                self.queue_lengths()
                    .await
                    .iter()
                    .all(|&queued| queued == waiters)
            },
        )
        .await;
    }

    /// Waits until no node's queue holds a waiter (`ZCARD` of a missing key is 0).
    async fn wait_no_waiters(&self, limit: Duration) {
        eventually("no waiter left in any node's queue", limit, || async {
            self.queue_lengths().await.iter().all(|&queued| queued == 0)
        })
        .await;
    }

    /// Waits until the lock key is gone from every node, asserting on the way that it is
    /// never reserved for anybody.
    async fn wait_free(&self) {
        eventually(
            "the lock key gone from every node",
            Duration::from_secs(2),
            || async {
                let values = self.values().await;
                assert!(
                    !values.iter().flatten().any(|v| v.starts_with(RESERVED)),
                    "the release reserved the key: {values:?}"
                );
                values.iter().all(Option::is_none)
            },
        )
        .await;
    }

    /// Queues a waiter that will never claim anything, first in line on every node: its
    /// place lapses `lifetime` after each node's clock now. Returns an instant no later
    /// than the earliest moment it lapses.
    async fn insert_ghost(&self, waiter: &str, lifetime: Duration) -> Instant {
        let before = Instant::now();
        let times: Vec<(u64, u64)> = self.each(&["TIME"]).await;
        for (connection, (seconds, micros)) in self.0.iter().zip(times) {
            let lapses = seconds * 1000 + micros / 1000 + lifetime.as_millis() as u64;
            let mut connection = connection.clone();
            let () = redis::pipe()
                .cmd("ZADD")
                .arg(QUEUE)
                .arg(0)
                .arg(waiter)
                .ignore()
                .cmd("HSET")
                .arg(DEADLINES)
                .arg(waiter)
                .arg(lapses)
                .ignore()
                .query_async(&mut connection)
                .await
                .expect("queue the ghost");
        }
        before + lifetime
    }
}

/// A cluster of `nodes` nodes and a client of it, with `config`, that holds [`RESOURCE`].
async fn holding(nodes: usize, config: LockConfig) -> (RedisCluster, Nodes, Redlock, LockGuard) {
    let cluster = cluster(nodes).await;
    let direct = Nodes::of(&cluster).await;
    let holder = redlock(&cluster, config).await;
    let guard = holder.try_acquire(RESOURCE).await.unwrap();
    (cluster, direct, holder, guard)
}

/// After a waiter gave its place up: no node queues it any more, well before its place
/// (2.3 s, see [`long_lived_places`]) would lapse; once `held` is released, the key is
/// free everywhere rather than reserved, and `waiter` takes it at once.
async fn gave_its_place_back(nodes: &Nodes, held: LockGuard, waiter: &Redlock) {
    nodes.wait_no_waiters(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    nodes.wait_free().await;
    let guard = waiter
        .try_acquire(RESOURCE)
        .await
        .expect("the released lock is free");
    guard.release().await.unwrap();
}

/// Starts a blocking acquire of [`RESOURCE`] in the background; it answers when it got the
/// lock, and the guard.
fn spawn_waiter(lock: &Redlock) -> JoinHandle<(Instant, LockGuard)> {
    spawn_acquire_of(lock, RESOURCE)
}

/// Waits for a waiter started by [`spawn_waiter`] to get the lock.
async fn served(waiter: JoinHandle<(Instant, LockGuard)>) -> (Instant, LockGuard) {
    tokio::time::timeout(SERVED_WITHIN, waiter)
        .await
        .expect("the waiter was never served")
        .expect("the waiter's task")
}

#[tokio::test]
async fn releases_go_first_come_first_served_across_clients() {
    let (cluster, nodes, _holder, held) = holding(5, patient()).await;

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 1..=3 {
        let lock = redlock(&cluster, patient()).await;
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = lock.acquire(RESOURCE).await.expect("the waiter's acquire");
            order.lock().unwrap().push(id);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("the waiter's release");
        }));
        // The next waiter comes only once this one is in line everywhere.
        nodes.wait_queued(id).await;
    }

    held.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(SERVED_WITHIN * 3, waiter)
            .await
            .expect("every waiter served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3]);
    nodes.wait_no_waiters(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn the_releaser_cannot_barge_in_ahead_of_the_line() {
    let (cluster, nodes, holder, held) = holding(3, patient()).await;
    let waiter = spawn_waiter(&redlock(&cluster, patient()).await);
    nodes.wait_queued(1).await;

    held.release().await.unwrap();
    match holder.try_acquire(RESOURCE).await {
        Err(LockError::Held { .. }) => {}
        other => panic!("the releaser took the lock back from the line: {other:?}"),
    }

    let (_, guard) = served(waiter).await;
    held_on_every_node(&cluster, &guard).await;
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let (cluster, nodes, _holder, held) = holding(3, patient()).await;
    let waiter = redlock(&cluster, long_lived_places()).await;

    let attempts_before = waiter.metrics().attempts;
    let started = Instant::now();
    let outcome = waiter
        .acquire_timeout(RESOURCE, Duration::from_millis(300))
        .await;
    // TimedOut when the deadline cut an attempt short; the last attempt's error when the
    // next wait would have ended past it (see `DistributedLock::acquire_timeout`).
    match outcome {
        Err(LockError::TimedOut { .. } | LockError::Held { .. }) => {}
        other => panic!("expected the waiter to give up: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "gave up late");
    // The second attempt of a blocking acquire that found the lock held is the one that
    // queues it.
    let attempts = waiter.metrics().attempts - attempts_before;
    assert!(
        attempts >= 2,
        "the waiter never queued: {attempts} attempt(s)"
    );

    gave_its_place_back(&nodes, held, &waiter).await;
}

#[tokio::test]
async fn a_dropped_acquire_leaves_the_queue() {
    let (cluster, nodes, _holder, held) = holding(3, patient()).await;
    let waiter = redlock(&cluster, long_lived_places()).await;

    // The acquire is dropped by the timeout, after it was seen in line.
    let (outcome, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(500), waiter.acquire(RESOURCE)),
        nodes.wait_queued(1),
    );
    assert!(outcome.is_err(), "the waiter got a held lock: {outcome:?}");

    gave_its_place_back(&nodes, held, &waiter).await;
}

#[tokio::test]
async fn a_dead_waiter_holds_the_line_up_only_until_its_place_lapses() {
    let (cluster, nodes, _holder, held) = holding(3, patient()).await;
    let waiter = spawn_waiter(&redlock(&cluster, patient()).await);
    nodes.wait_queued(1).await;

    // A waiter that died: first in line (ticket 0), its place lapsing in 1.5 s.
    let ghost = "ghost:1";
    let lapsed = nodes.insert_ghost(ghost, Duration::from_millis(1500)).await;
    held.release().await.unwrap();

    // The release went to the ghost: the key is reserved for it, held by no token, so
    // neither `is_acquired` nor `refresh` of any guard can count it as theirs.
    let reserved = format!("{RESERVED}{ghost}");
    eventually(
        "the key reserved for the ghost on every node",
        Duration::from_secs(1),
        || async {
            let values = nodes.values().await;
            values
                .iter()
                .all(|value| value.as_deref() == Some(&*reserved))
        },
    )
    .await;

    let (got_it, guard) = served(waiter).await;
    // The reservation's PX ends when the ghost's place lapses, never earlier; 100 ms spare
    // for rounding to whole milliseconds.
    assert!(
        got_it + Duration::from_millis(100) >= lapsed,
        "the waiter took the key {:?} before the ghost's place lapsed",
        lapsed - got_it
    );
    // The release that reserved the key for the ghost took it out of line.
    let queues: Vec<Vec<String>> = nodes.each(&["ZRANGE", QUEUE, "0", "-1"]).await;
    assert!(
        !queues.iter().flatten().any(|queued| queued == ghost),
        "{queues:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn unfair_waiters_never_queue() {
    let unfair = patient().to_builder().fair(false).build().unwrap();
    let (cluster, nodes, _holder, held) = holding(3, unfair.clone()).await;
    let lock = redlock(&cluster, unfair).await;
    let attempts_before = lock.metrics().attempts;
    let waiter = spawn_waiter(&lock);

    // Several attempts, none of them queued anywhere.
    eventually("three attempts of the waiter", SERVED_WITHIN, || async {
        let exists: Vec<usize> = nodes.each(&["EXISTS", QUEUE, DEADLINES]).await;
        assert!(exists.iter().all(|&n| n == 0), "queue keys: {exists:?}");
        lock.metrics().attempts - attempts_before >= 3
    })
    .await;

    held.release().await.unwrap();
    let (_, guard) = served(waiter).await;
    guard.release().await.unwrap();
    let exists: Vec<usize> = nodes.each(&["EXISTS", QUEUE, DEADLINES]).await;
    assert!(exists.iter().all(|&n| n == 0), "queue keys: {exists:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_starves_under_contention() {
    const CLIENTS: usize = 4;
    let cluster = cluster(5).await;
    let inside = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(redlock(&cluster, patient()).await);
    }
    let until = Instant::now() + Duration::from_millis(1500);
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|lock| {
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                let mut acquisitions = 0_u32;
                while Instant::now() < until {
                    let guard = lock.acquire(RESOURCE).await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    acquisitions += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
                acquisitions
            })
        })
        .collect();
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.expect("a client broke exclusivity or failed"));
    }
    println!("acquisitions per client: {counts:?}");
    let most = *counts.iter().max().unwrap();
    let least = *counts.iter().min().unwrap();
    assert!(least * 2 >= most, "a client starved: {counts:?}");
}

/// Acquires and releases `resource` with `lock` in a loop until `stop` is set; returns how
/// many times it got the lock.
fn spawn_looper(lock: &Redlock, resource: &'static str, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
    let lock = lock.clone();
    tokio::spawn(async move {
        let mut acquisitions = 0;
        while !stop.load(Ordering::SeqCst) {
            let guard = lock.acquire(resource).await.expect("the looper's acquire");
            acquisitions += 1;
            guard.release().await.expect("the looper's release");
        }
        acquisitions
    })
}

/// How many times `lock` acquires and releases `resource` within `window`.
async fn acquisitions_within(lock: &Redlock, resource: &'static str, window: Duration) -> u32 {
    let stop = Arc::new(AtomicBool::new(false));
    let looper = spawn_looper(lock, resource, Arc::clone(&stop));
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::SeqCst);
    looper.await.expect("the looper's task")
}

/// A waiter for `[a, b]` while `b` is held cannot use `a`: releases of `a` must go to
/// those who can, at the rate `a` is used without it, and the waiter must still get both
/// soon after `b` is released, although `a` keeps being taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_several_keys_does_not_throttle_a_key_it_cannot_use_yet() {
    const WINDOW: Duration = Duration::from_secs(2);
    let cluster = cluster(3).await;
    let direct = Nodes::of(&cluster).await;
    let user_of_a = redlock(&cluster, patient()).await;
    let holder_of_b = redlock(&cluster, patient()).await;
    let waiter = redlock(&cluster, patient()).await;

    let alone = acquisitions_within(&user_of_a, "a", WINDOW).await;

    let held = holder_of_b.try_acquire("b").await.unwrap();
    let both = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let guard = waiter
                .acquire_many(&["a", "b"])
                .await
                .expect("acquire [a, b]");
            (Instant::now(), guard)
        })
    };
    eventually(
        "the waiter for [a, b] in line on every node",
        SERVED_WITHIN,
        || async {
            let queued: Vec<usize> = direct
                .each(&[
                    "EVAL",
                    "return redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])",
                    "2",
                    "quorumlock:waiters:a",
                    "quorumlock:waiters:b",
                ])
                .await;
            queued.iter().all(|&waiters| waiters == 1)
        },
    )
    .await;
    let beside_the_waiter = acquisitions_within(&user_of_a, "a", WINDOW).await;
    println!("acquisitions of a in {WINDOW:?}: {alone} alone, {beside_the_waiter} beside the waiter for [a, b]");
    assert!(
        beside_the_waiter * 2 >= alone,
        "the waiter for [a, b] throttled a: {beside_the_waiter} acquisitions in {WINDOW:?}, {alone} without it"
    );

    // Released while a is still in heavy use: the waiter gets both nonetheless.
    let stop = Arc::new(AtomicBool::new(false));
    let looper = spawn_looper(&user_of_a, "a", Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (got_both, guard) = tokio::time::timeout(SERVED_WITHIN, both)
        .await
        .expect("the waiter for [a, b] was never served")
        .expect("the waiter's task");
    let took = got_both - released;
    println!("the waiter for [a, b] got both {took:?} after b was released");
    assert!(
        took < Duration::from_secs(1),
        "the waiter for [a, b] got both only {took:?} after b was released"
    );
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    assert!(looper.await.expect("the looper's task") > 0);
}

/// How many waiters each node's queue of `key` holds.
async fn queued_for(nodes: &Nodes, key: &str) -> Vec<usize> {
    nodes
        .each(&["ZCARD", &format!("quorumlock:waiters:{key}")])
        .await
}

/// Nodes may disagree on which key a waiter for several keys is blocked on, so it may be
/// queued under another key on each node; when it gives up, it leaves every queue.
#[tokio::test]
async fn a_dropped_waiter_for_several_keys_leaves_every_queue() {
    let cluster = cluster(3).await;
    let nodes = Nodes::of(&cluster).await;
    // `a` is held on node 0 only (say, what is left of a failed attempt), `b` everywhere.
    cluster
        .node(0)
        .set("a", "foreign", Some(TTL))
        .await
        .unwrap();
    let holder = redlock(&cluster, patient()).await;
    let held = holder.try_acquire("b").await.unwrap();
    let waiter = redlock(&cluster, long_lived_places()).await;

    let in_line = async {
        eventually(
            "in a's queue on node 0, in b's on the others",
            SERVED_WITHIN,
            || async {
                queued_for(&nodes, "a").await == [1, 0, 0]
                    && queued_for(&nodes, "b").await == [0, 1, 1]
            },
        )
        .await;
    };
    let (outcome, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(600), waiter.acquire_many(&["a", "b"])),
        in_line,
    );
    assert!(outcome.is_err(), "the waiter got a held lock: {outcome:?}");

    // Gone from both queues everywhere, well before its places (2.3 s) would lapse.
    eventually("no waiter in any queue", Duration::from_secs(1), || async {
        queued_for(&nodes, "a").await == [0, 0, 0] && queued_for(&nodes, "b").await == [0, 0, 0]
    })
    .await;
    held.release().await.unwrap();
    let free: Vec<Option<String>> = nodes.each(&["GET", "b"]).await;
    assert_eq!(
        free,
        [None, None, None],
        "b reserved for a waiter that left"
    );
}

/// A release reserved for a waiter for several keys that cannot use it (another of its
/// keys is held) goes on to the next in line at once, not when the waiter's place lapses.
#[tokio::test]
async fn a_reservation_a_waiter_for_several_keys_cannot_use_goes_on_at_once() {
    let cluster = cluster(3).await;
    let nodes = Nodes::of(&cluster).await;
    let holder = redlock(&cluster, long_lived_places()).await;
    let held_a = holder.try_acquire("a").await.unwrap();
    let waiter = redlock(&cluster, long_lived_places()).await;
    let both = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire_many(&["a", "b"]).await })
    };
    // `b` is free, so the waiter is in line for `a`, the key it is blocked on.
    eventually(
        "the waiter for [a, b] in a's queue",
        SERVED_WITHIN,
        || async { queued_for(&nodes, "a").await == [1, 1, 1] },
    )
    .await;
    let held_b = holder.try_acquire("b").await.unwrap();
    let user_of_a = spawn_acquire_of(&redlock(&cluster, long_lived_places()).await, "a");
    eventually("a second waiter in a's queue", SERVED_WITHIN, || async {
        queued_for(&nodes, "a").await == [2, 2, 2]
    })
    .await;

    let released = Instant::now();
    held_a.release().await.unwrap();
    let (got_a, guard) = served(user_of_a).await;
    // A reservation left to lapse would last up to the waiter's place lifetime, 2.3 s.
    let took = got_a - released;
    assert!(
        took < Duration::from_secs(1),
        "a went on only after {took:?}"
    );
    // Meanwhile the waiter for [a, b] moved to the line of `b`, which blocks it now.
    eventually(
        "the waiter for [a, b] in b's queue",
        SERVED_WITHIN,
        || async {
            queued_for(&nodes, "b").await == [1, 1, 1] && queued_for(&nodes, "a").await == [0, 0, 0]
        },
    )
    .await;

    guard.release().await.unwrap();
    held_b.release().await.unwrap();
    let both = tokio::time::timeout(SERVED_WITHIN, both)
        .await
        .expect("the waiter for [a, b] was never served")
        .expect("the waiter's task")
        .expect("the waiter's acquire");
    both.release().await.unwrap();
}

/// The release of a lock over several keys hands each key to the first waiter in its own
/// line, not only the first key.
#[tokio::test]
async fn a_release_of_several_keys_hands_each_to_its_own_line() {
    // Waiters that retry only every second: a waiter served sooner was handed the key.
    let slow = LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_delay(Duration::from_secs(1))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap();
    let cluster = cluster(3).await;
    let nodes = Nodes::of(&cluster).await;
    let holder = redlock(&cluster, slow.clone()).await;
    let held = holder.try_acquire_many(&["a", "b"]).await.unwrap();
    let waiter_a = spawn_acquire_of(&redlock(&cluster, slow.clone()).await, "a");
    let waiter_b = spawn_acquire_of(&redlock(&cluster, slow).await, "b");
    eventually("a waiter in each queue", SERVED_WITHIN, || async {
        queued_for(&nodes, "a").await == [1, 1, 1] && queued_for(&nodes, "b").await == [1, 1, 1]
    })
    .await;

    let released = Instant::now();
    held.release().await.unwrap();
    for waiter in [waiter_a, waiter_b] {
        let (got_it, guard) = served(waiter).await;
        let took = got_it - released;
        assert!(
            took < Duration::from_millis(500),
            "served {took:?} after the release"
        );
        guard.release().await.unwrap();
    }
}

/// Starts a blocking acquire of `resource` in the background; it answers when it got the
/// lock, and the guard.
fn spawn_acquire_of(lock: &Redlock, resource: &'static str) -> JoinHandle<(Instant, LockGuard)> {
    let lock = lock.clone();
    tokio::spawn(async move {
        let guard = lock.acquire(resource).await.expect("the waiter's acquire");
        (Instant::now(), guard)
    })
}
