//! Fair hand-off (`LockConfig::fair`): blocking waiters queue on the nodes, and each release
//! is reserved for the first live waiter in line, so the lock goes first come, first served,
//! nobody barges, and a waiter that gives up or dies stops holding the line up.
//! (`tests/servers/fairness.rs` checks the hand-off end to end on real Redis.)
//!
//! Each client below is made by its own `client(&cluster, ..)`, with its own connections
//! and client id, as in separate processes. The nodes' queues are seen as Redis shows them
//! to `EXISTS`: a sorted set is gone once empty, so a queue that exists holds somebody;
//! who took a place is read in the nodes' logs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::sim::{Op, Outcome, SimCluster};
use quorumlock::{LockConfig, LockError, LockGuard, LockToken, Redlock};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_test::task;

use crate::support::{client, cluster, config, holding, pending_for, settle, TTL};

/// The resource; without a key prefix it is also the lock key.
const RESOURCE: &str = "fair";

/// The retry delay of [`patient`] waiters, exact.
const DELAY: Duration = LockConfig::DEFAULT_RETRY_DELAY;

/// A blocking acquire that never runs out of retries, with the default delay and no
/// jitter: its queue place lasts 2 * 200 + 4 * 50 + 100 = 700 ms without a refresh. So
/// many retries need a deadline; no passing test comes near it.
fn patient() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .build()
        .unwrap()
}

/// [`patient`], with releases that reserve the lock for the next in line, who claims it
/// in a round of its own: the protocol before the direct grant.
fn reserving() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .retry_count(10_000)
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
        .direct_grant(false)
        .build()
        .unwrap()
}

/// How long a [`patient`] waiter's place lasts without a refresh.
const PATIENT_PLACE: Duration = Duration::from_millis(700);

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

/// The nodes' queue of `key`.
fn queue(key: &str) -> String {
    format!("quorumlock:waiters:{key}")
}

/// The deadlines of the places in the nodes' queue of `key`.
fn deadlines(key: &str) -> String {
    format!("quorumlock:waiter-deadlines:{key}")
}

/// Whether each node holds a queue of `key`, that is somebody in line for it.
fn queued_for(cluster: &SimCluster, key: &str) -> Vec<bool> {
    cluster
        .nodes()
        .iter()
        .map(|node| node.keys().contains(&queue(key)))
        .collect()
}

/// Whether no node holds a queue, or its deadlines, of any of `keys`.
fn no_queue_of(cluster: &SimCluster, keys: &[&str]) -> bool {
    cluster.nodes().iter().all(|node| {
        let live = node.keys();
        keys.iter()
            .all(|key| !live.contains(&queue(key)) && !live.contains(&deadlines(key)))
    })
}

/// Whether `client` is in line on every node: its last queued attempt each node ran was
/// refused, which put it in a queue (or refreshed its place).
fn in_line_everywhere(cluster: &SimCluster, client: &str) -> bool {
    cluster.nodes().iter().all(|node| {
        node.log()
            .iter()
            .rev()
            .filter(|record| {
                matches!(record.op, Op::LockQueued { .. })
                    && record.client.as_deref() == Some(client)
            })
            .find_map(|record| match &record.outcome {
                Outcome::Applied(applied) => Some(!applied.result),
                _ => None,
            })
            .unwrap_or(false)
    })
}

/// The waiter id `client`'s queued attempts carry, and when the last of them ran on each
/// node (so the place it refreshed lapses [`PATIENT_PLACE`] or so later).
fn queued_attempts(cluster: &SimCluster, client: &str) -> (LockToken, Vec<Instant>) {
    let mut waiter = None;
    let mut last = Vec::new();
    for node in cluster.nodes() {
        let mut at = None;
        for record in node.log() {
            if !matches!(record.op, Op::LockQueued { .. })
                || record.client.as_deref() != Some(client)
            {
                continue;
            }
            if let Outcome::Applied(applied) = &record.outcome {
                waiter = record.waiter.clone();
                at = Some(applied.at);
            }
        }
        last.push(at.expect("a queued attempt on every node"));
    }
    (waiter.expect("a queued attempt names its waiter"), last)
}

/// For each node, the waiters its releases reserved the key for, in order.
fn reservations(cluster: &SimCluster) -> Vec<Vec<String>> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.log()
                .iter()
                .filter(|record| record.op == Op::Unlock)
                .filter_map(|record| match &record.outcome {
                    Outcome::Applied(applied) => applied.after[0]
                        .as_ref()
                        .and_then(|after| after.reserved_for().map(str::to_owned)),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// For each node, the tokens its releases granted the key to (the direct grant), in order.
fn grants(cluster: &SimCluster) -> Vec<Vec<LockToken>> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            node.log()
                .iter()
                .filter(|record| record.op == Op::Unlock)
                .filter_map(|record| match &record.outcome {
                    Outcome::Applied(applied) => applied.after[0]
                        .as_ref()
                        .filter(|after| after.reserved_for().is_none())
                        .map(|after| after.token.clone()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The tokens of `client`'s queued attempts on node 0, one per attempt: a waiter of the
/// direct grant asks in one token for its whole acquisition.
fn queued_tokens(cluster: &SimCluster, client: &str) -> Vec<LockToken> {
    cluster.nodes()[0]
        .log()
        .iter()
        .filter(|record| {
            matches!(record.op, Op::LockQueued { .. }) && record.client.as_deref() == Some(client)
        })
        .filter_map(|record| record.token.clone())
        .collect()
}

/// Lets virtual time pass, a millisecond at a time, until `check` holds; panics with `what`
/// after `limit`.
async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until `client` is in line on every node: its first attempt found the lock held,
/// and its second, at once, queued it.
async fn wait_in_line(cluster: &SimCluster, client: &str) {
    until(
        &format!("{client} in line on every node"),
        Duration::from_secs(5),
        || in_line_everywhere(cluster, client),
    )
    .await;
}

/// Right after `holder` released [`RESOURCE`] to the line: the key went to the waiter in
/// line (granted or reserved), and `holder` cannot take it straight back.
async fn releaser_cannot_take_it_back(holder: &Redlock) {
    match holder.try_acquire(RESOURCE).await {
        Err(LockError::Held { .. }) => {}
        other => panic!("the releaser took the lock back from the line: {other:?}"),
    }
}

/// A cluster of `nodes` nodes and a client `holder` of it, with `config`, that holds
/// [`RESOURCE`].
async fn holding_resource(nodes: usize, config: LockConfig) -> (SimCluster, Redlock, LockGuard) {
    let cluster = cluster(nodes);
    let holder = client(&cluster, "holder", config);
    let guard = holder.try_acquire(RESOURCE).await.unwrap();
    (cluster, holder, guard)
}

/// After a waiter gave its place up: no node queues it any more, at once, long before its
/// place (2.3 s, see [`long_lived_places`]) would lapse; once `held` is released, the key
/// is free everywhere rather than reserved, and `waiter` takes it at once.
async fn gave_its_place_back(cluster: &SimCluster, held: LockGuard, waiter: &Redlock) {
    settle().await;
    assert!(
        no_queue_of(cluster, &[RESOURCE]),
        "{:?}",
        queued_for(cluster, RESOURCE)
    );
    held.release().await.unwrap();
    assert_eq!(
        cluster.holders(RESOURCE),
        [None, None, None],
        "the release reserved the key"
    );
    let guard = waiter
        .try_acquire(RESOURCE)
        .await
        .expect("the released lock is free");
    guard.release().await.unwrap();
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

/// Starts a blocking acquire of [`RESOURCE`] in the background.
fn spawn_waiter(lock: &Redlock) -> JoinHandle<(Instant, LockGuard)> {
    spawn_acquire_of(lock, RESOURCE)
}

/// Who got [`RESOURCE`] when, in the order they got it.
type Order = Arc<Mutex<Vec<(usize, Instant)>>>;

/// Starts waiter `id`, which holds [`RESOURCE`] for `hold` once it gets it, and writes
/// down in `order` when it got it.
fn spawn_holding_waiter(lock: Redlock, id: usize, hold: Duration, order: &Order) -> JoinHandle<()> {
    let order = Arc::clone(order);
    tokio::spawn(async move {
        let guard = lock.acquire(RESOURCE).await.expect("the waiter's acquire");
        order.lock().unwrap().push((id, Instant::now()));
        tokio::time::sleep(hold).await;
        guard.release().await.expect("the waiter's release");
    })
}

/// Three clients come one after another; the releases go to them in that order. The
/// announcements are lost here, so that each tries only on its retry delay, and the last
/// comer's retry is the first after the release: in a race, it would win.
#[tokio::test(start_paused = true)]
async fn releases_go_first_come_first_served_across_clients() {
    const HOLD: Duration = Duration::from_millis(20);
    const APART: Duration = Duration::from_millis(50);
    let (cluster, _holder, held) = holding_resource(5, patient()).await;
    for node in cluster.nodes() {
        node.lose_announcements(true);
    }
    let start = Instant::now();

    let order = Order::default();
    let mut waiters = Vec::new();
    for id in 1..=3 {
        tokio::time::sleep_until(start + APART * (id as u32 - 1)).await;
        let name = format!("waiter-{id}");
        let lock = client(&cluster, &name, patient());
        waiters.push(spawn_holding_waiter(lock, id, HOLD, &order));
        // In line at once: its first attempt found the lock held, its second queued it.
        wait_in_line(&cluster, &name).await;
    }
    // Waiter k tries at (k - 1) * APART + n * DELAY; the release comes after the retries
    // at 400 and 450 ms, before waiter 3's at 500 ms.
    let released = start + Duration::from_millis(460);
    tokio::time::sleep_until(released).await;
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let ids: Vec<usize> = order.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2, 3]);
    // Each on its first retry after the one before released (600, 650 and 700 ms), the
    // key reserved for it meanwhile.
    let served: Vec<Duration> = order.iter().map(|(_, at)| *at - start).collect();
    let ms = Duration::from_millis;
    assert_eq!(served, [ms(600), ms(650), ms(700)]);
    settle().await;
    assert!(no_queue_of(&cluster, &[RESOURCE]));
}

/// Three waiters of `config` in line behind a holder on five nodes, each holding for 20 ms
/// once served: with the announcements heard, each gets the lock the moment the one before
/// it released, in the order they came. Returns the cluster, once they are all done.
async fn three_in_line_served_at_once(config: LockConfig) -> SimCluster {
    const HOLD: Duration = Duration::from_millis(20);
    let (cluster, _holder, held) = holding_resource(5, config.clone()).await;

    let order = Order::default();
    let mut waiters = Vec::new();
    for id in 1..=3 {
        let name = format!("waiter-{id}");
        let lock = client(&cluster, &name, config.clone());
        waiters.push(spawn_holding_waiter(lock, id, HOLD, &order));
        // The next waiter comes only once this one is in line everywhere.
        wait_in_line(&cluster, &name).await;
    }

    let released = Instant::now();
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let ids: Vec<usize> = order.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2, 3]);
    let served: Vec<Duration> = order.iter().map(|(_, at)| *at - released).collect();
    assert_eq!(served, [Duration::ZERO, HOLD, HOLD * 2]);
    settle().await;
    assert!(no_queue_of(&cluster, &[RESOURCE]));
    cluster
}

/// Each release grants the key outright to the next in line (sets it to its token), who
/// holds on hearing a quorum of grants, with no round of its own.
#[tokio::test(start_paused = true)]
async fn each_release_is_granted_at_once_to_the_next_in_line() {
    let cluster = three_in_line_served_at_once(patient()).await;
    // One queued attempt each (the one that put it in line), in the token every node's
    // release then granted the key to, in the order of the line: no claim round.
    let tokens: Vec<LockToken> = (1..=3)
        .map(|id| {
            let attempts = queued_tokens(&cluster, &format!("waiter-{id}"));
            assert_eq!(attempts.len(), 1, "waiter-{id}: {attempts:?}");
            attempts[0].clone()
        })
        .collect();
    assert_eq!(grants(&cluster), vec![tokens; 5]);
    assert_eq!(reservations(&cluster), vec![Vec::<String>::new(); 5]);
    // Each held on the first three grants, and heard the other two after: every node took
    // it out of line when it granted, so none was asked to.
    let leaves = cluster
        .log()
        .iter()
        .filter(|(_, record)| record.op == Op::LeaveQueue)
        .count();
    assert_eq!(
        leaves, 0,
        "a winner left a line its grant had taken it out of"
    );
}

/// Two clients taking turns for three seconds, each served by the other's release: every
/// acquisition after a client's first contended one is one refresh, which queues it at once and is won by
/// the grants. A client remembers a key found held for a second, and queues with its first
/// attempt while it does; a refresh that the grants win found the key held too, and must
/// say so, or each client forgot the contention a second in and tried a plain attempt
/// first once a second (two rounds).
#[tokio::test(start_paused = true)]
async fn clients_taking_turns_queue_with_their_first_attempt_for_as_long_as_they_contend() {
    const HOLD: Duration = Duration::from_millis(20);
    let cluster = cluster(3);
    let until = Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = ["client-0", "client-1"]
        .into_iter()
        .map(|name| {
            let lock = client(&cluster, name, patient());
            tokio::spawn(async move {
                let mut rounds = Vec::new();
                while Instant::now() < until {
                    let before = lock.metrics().attempts;
                    let guard = lock.acquire(RESOURCE).await.expect("acquire");
                    rounds.push(lock.metrics().attempts - before);
                    tokio::time::sleep(HOLD).await;
                    guard.release().await.expect("release");
                }
                rounds
            })
        })
        .collect();
    for (name, task) in ["client-0", "client-1"].into_iter().zip(tasks) {
        let rounds = task.await.unwrap();
        assert!(rounds.len() > 50, "{name}: {} acquisitions", rounds.len());
        let later: Vec<(usize, u64)> = rounds
            .iter()
            .copied()
            .enumerate()
            // The first that found the key held tried a plain attempt first: the first,
            // or the second after an uncontended first.
            .skip(2)
            .filter(|&(_, rounds)| rounds != 1)
            .collect();
        assert_eq!(
            later,
            [],
            "{name}: acquisitions (index, rounds) of more than one round, of {}",
            rounds.len()
        );
    }
}

/// With releases that reserve (the protocol before the direct grant), each release is
/// reserved for the next in line, announced on its client's channel, and claimed at once.
#[tokio::test(start_paused = true)]
async fn with_reservations_each_release_is_claimed_at_once_by_the_next_in_line() {
    let cluster = three_in_line_served_at_once(reserving()).await;
    let in_line: Vec<String> = (1..=3)
        .map(|id| {
            let (waiter, _) = queued_attempts(&cluster, &format!("waiter-{id}"));
            waiter.as_str().to_owned()
        })
        .collect();
    assert_eq!(reservations(&cluster), vec![in_line; 5]);
    assert_eq!(grants(&cluster), vec![Vec::<LockToken>::new(); 5]);
}

/// A holder and a waiter of `config` in line behind it on three nodes: the holder
/// releases, and cannot take the lock straight back; the waiter gets it at that very moment,
/// on the nodes' announcements. Returns the cluster and the waiter's guard.
async fn the_releaser_cannot_barge_in(config: LockConfig) -> (SimCluster, LockGuard) {
    let (cluster, holder, held) = holding_resource(3, config.clone()).await;
    let waiter = spawn_waiter(&client(&cluster, "waiter", config));
    wait_in_line(&cluster, "waiter").await;

    let released = Instant::now();
    held.release().await.unwrap();
    releaser_cannot_take_it_back(&holder).await;
    let (got_it, guard) = waiter.await.unwrap();
    assert_eq!(
        got_it,
        released,
        "served {:?} after the release",
        got_it - released
    );
    assert_eq!(holding(&cluster, &guard), 3);
    (cluster, guard)
}

#[tokio::test(start_paused = true)]
async fn the_releaser_cannot_barge_in_ahead_of_the_line() {
    let (cluster, guard) = the_releaser_cannot_barge_in(patient()).await;
    // Granted on every node, in the token of its one queued attempt.
    assert_eq!(queued_tokens(&cluster, "waiter"), [guard.token().clone()]);
    assert_eq!(grants(&cluster), vec![vec![guard.token().clone()]; 3]);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_reservations_the_releaser_cannot_barge_in_ahead_of_the_line() {
    let (cluster, guard) = the_releaser_cannot_barge_in(reserving()).await;
    // The release reserved the key for the waiter on every node, and the waiter claimed
    // that reservation.
    let (in_line, _) = queued_attempts(&cluster, "waiter");
    assert_eq!(
        reservations(&cluster),
        vec![vec![in_line.as_str().to_owned()]; 3]
    );
    guard.release().await.unwrap();
}

/// A winner of the direct grant that released before a slow node's release of the holder
/// before it reached that node: the late release grants the key to the winner's place,
/// which the winner, still hearing its grants, gives back at once rather than leaving the
/// key to its TTL.
#[tokio::test(start_paused = true)]
async fn a_grant_that_reaches_a_node_after_the_winner_released_is_given_back() {
    let (cluster, _holder, held) = holding_resource(3, patient()).await;
    let waiter = spawn_waiter(&client(&cluster, "waiter", patient()));
    wait_in_line(&cluster, "waiter").await;

    // The holder's release reaches node 2 30 ms late; the waiter's requests do not wait.
    cluster.node(2).set_request_delay(Duration::from_millis(30));
    held.release().await.unwrap();
    cluster.node(2).set_request_delay(Duration::ZERO);
    let (_, guard) = waiter.await.unwrap();
    assert_eq!(holding(&cluster, &guard), 2, "held on the first two nodes");
    let token = guard.token().clone();
    guard.release().await.unwrap();

    // Node 2 then grants the key to the waiter's place, after the waiter's release.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let granted_late = grants(&cluster)[2].contains(&token);
    assert!(granted_late, "node 2's late release granted nothing");
    settle().await;
    assert_eq!(cluster.holders(RESOURCE), [None, None, None]);
}

#[tokio::test(start_paused = true)]
async fn the_releaser_cannot_take_a_key_granted_to_the_line() {
    let (cluster, holder, held) = holding_resource(3, patient()).await;
    let waiter = spawn_waiter(&client(&cluster, "waiter", patient()));
    wait_in_line(&cluster, "waiter").await;
    let (_, last_attempts) = queued_attempts(&cluster, "waiter");
    // The waiter hears of its grants only on its next refresh: meanwhile the key is in
    // its token, which no lock request but its own takes.
    for node in cluster.nodes() {
        node.lose_announcements(true);
    }

    held.release().await.unwrap();
    let granted = queued_tokens(&cluster, "waiter");
    assert_eq!(cluster.holders(RESOURCE), vec![Some(granted[0].clone()); 3]);
    releaser_cannot_take_it_back(&holder).await;

    let (got_it, guard) = waiter.await.unwrap();
    // Its next refresh, after the wait for grants it did not hear of, found the key granted
    // to its earlier place on every node and took it as its own: set to its token, with a
    // fresh TTL.
    assert_eq!(
        got_it,
        last_attempts[0] + DELAY,
        "taken on its next refresh"
    );
    let tokens = queued_tokens(&cluster, "waiter");
    assert_eq!(tokens, [granted[0].clone(), guard.token().clone()]);
    assert_ne!(tokens[0], tokens[1], "a token per refresh");
    assert_eq!(holding(&cluster, &guard), 3);
    guard.release().await.unwrap();
}

/// The direct grant on one node, request by request: a refresh queues the waiter in its
/// token, a release grants the key to it, the waiter's next refresh takes the grant in a
/// token of its own, and then the rollback of the first refresh arrives late (a timed-out
/// unlock resent after a reconnect, or reordered by a cluster): it deletes only a key in
/// the first refresh's token, so the key the second refresh counts stays. (With one token
/// for the whole acquisition, as first built, that rollback deleted it, and the node went
/// to the next waiter while the waiter still counted it.)
#[tokio::test(start_paused = true)]
async fn a_late_rollback_of_an_earlier_refresh_leaves_the_key_a_later_refresh_took() {
    let cluster = cluster(1);
    let node = cluster.lock_nodes_for("waiter").remove(0);
    let holder = cluster.lock_nodes_for("holder").remove(0);
    let keys: Vec<std::sync::Arc<str>> = vec![RESOURCE.into()];
    let ttl = Duration::from_secs(10);
    let (held, first, second) = (
        LockToken::generate(),
        LockToken::generate(),
        LockToken::generate(),
    );
    assert!(holder.try_lock(&keys, &held, ttl).await.unwrap());
    let place = quorumlock::node::QueuePlace {
        waiter: LockToken::from_string(format!(
            "{}:{}",
            LockToken::generate(),
            LockToken::generate()
        )),
        ticket: 1,
        lifetime: Duration::from_secs(1),
    };
    let queued = node.try_lock_queued(&keys, &first, ttl, &place, Some(1));
    assert!(!queued.await.unwrap(), "queued behind the holder");
    assert!(holder.unlock(&keys, &held).await.unwrap());
    assert_eq!(cluster.holders(RESOURCE), [Some(first.clone())], "granted");
    let taken = node.try_lock_queued(&keys, &second, ttl, &place, Some(2));
    assert!(taken.await.unwrap(), "the grant taken by the next refresh");
    assert_eq!(cluster.holders(RESOURCE), [Some(second.clone())]);

    // The first refresh's rollback, late.
    assert!(!node.unlock(&keys, &first).await.unwrap());
    assert_eq!(cluster.holders(RESOURCE), [Some(second.clone())]);
    assert!(node.unlock(&keys, &second).await.unwrap());
    settle().await;
    assert!(
        no_queue_of(&cluster, &[RESOURCE]),
        "the grant's record forgotten"
    );
}

#[tokio::test(start_paused = true)]
async fn with_reservations_the_releaser_cannot_take_a_key_reserved_for_the_line() {
    let (cluster, holder, held) = holding_resource(3, reserving()).await;
    let waiter = spawn_waiter(&client(&cluster, "waiter", reserving()));
    wait_in_line(&cluster, "waiter").await;
    let (in_line, last_attempts) = queued_attempts(&cluster, "waiter");
    // The waiter hears of the release only on its next retry: meanwhile the key stays
    // reserved for it.
    for node in cluster.nodes() {
        node.lose_announcements(true);
    }

    held.release().await.unwrap();
    let reserved = LockToken::from_string(format!("quorumlock:reserved:{}", in_line.as_str()));
    assert_eq!(cluster.holders(RESOURCE), vec![Some(reserved); 3]);
    releaser_cannot_take_it_back(&holder).await;

    let (got_it, guard) = waiter.await.unwrap();
    assert_eq!(
        got_it,
        last_attempts[0] + DELAY,
        "claimed on its next retry"
    );
    assert_eq!(holding(&cluster, &guard), 3);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let (cluster, _holder, held) = holding_resource(3, patient()).await;
    let waiter = client(&cluster, "waiter", long_lived_places());

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
    let gave_up = started.elapsed();
    assert!(
        gave_up <= Duration::from_millis(300),
        "gave up late: {gave_up:?}"
    );
    // The second attempt of a blocking acquire that found the lock held is the one that
    // queues it.
    let attempts = waiter.metrics().attempts;
    assert!(
        attempts >= 2,
        "the waiter never queued: {attempts} attempt(s)"
    );
    assert!(
        in_line_everywhere(&cluster, "waiter"),
        "the waiter never queued"
    );

    gave_its_place_back(&cluster, held, &waiter).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_leaves_the_queue() {
    let (cluster, _holder, held) = holding_resource(3, patient()).await;
    let waiter = client(&cluster, "waiter", long_lived_places());

    // The acquire is dropped after it was seen in line.
    let mut acquire = task::spawn(waiter.acquire(RESOURCE));
    pending_for(&mut acquire, Duration::from_millis(150)).await;
    assert!(
        in_line_everywhere(&cluster, "waiter"),
        "the waiter never queued"
    );
    assert_eq!(queued_for(&cluster, RESOURCE), [true; 3]);
    drop(acquire);

    gave_its_place_back(&cluster, held, &waiter).await;
}

#[tokio::test(start_paused = true)]
async fn with_reservations_a_dead_waiter_holds_the_line_up_only_until_its_place_lapses() {
    let (cluster, _holder, held) = holding_resource(3, reserving()).await;
    // A waiter first in line that dies there: it stops, never polled again and never
    // dropped (so it never leaves the queue), as a process that froze or was killed.
    let dead_lock = client(&cluster, "dead", reserving());
    let mut dead = task::spawn(dead_lock.acquire(RESOURCE));
    pending_for(&mut dead, DELAY + Duration::from_millis(1)).await;
    assert!(
        in_line_everywhere(&cluster, "dead"),
        "the dead waiter never queued"
    );
    std::mem::forget(dead);
    let (dead_waiter, dead_attempts) = queued_attempts(&cluster, "dead");
    // Its place lapses a place lifetime after its last queued attempt.
    let lifetimes: Vec<Duration> = cluster
        .log()
        .iter()
        .filter_map(|(_, record)| match record.op {
            Op::LockQueued { lifetime, .. } if record.client.as_deref() == Some("dead") => {
                Some(lifetime)
            }
            _ => None,
        })
        .collect();
    assert!(
        lifetimes.iter().all(|&lifetime| lifetime == PATIENT_PLACE),
        "{lifetimes:?}"
    );
    let lapses = dead_attempts[0] + PATIENT_PLACE;
    assert!(dead_attempts.iter().all(|&at| at == dead_attempts[0]));

    let waiter = spawn_waiter(&client(&cluster, "live", reserving()));
    wait_in_line(&cluster, "live").await;
    held.release().await.unwrap();

    // The release went to the dead waiter: the key is reserved for it, held by no token,
    // so neither `is_acquired` nor `refresh` of any guard can count it as theirs.
    let reserved = LockToken::from_string(format!("quorumlock:reserved:{}", dead_waiter.as_str()));
    assert_eq!(cluster.holders(RESOURCE), vec![Some(reserved); 3]);

    let (got_it, guard) = waiter.await.unwrap();
    // The reservation's PX ends when the dead waiter's place lapses, never earlier; the
    // live waiter takes the key on its first retry after that.
    assert!(
        got_it > lapses,
        "the waiter took the key {:?} before the dead waiter's place lapsed",
        lapses - got_it
    );
    assert!(
        got_it <= lapses + DELAY,
        "the waiter took the key only {:?} after the dead waiter's place lapsed",
        got_it - lapses
    );
    assert_eq!(holding(&cluster, &guard), 3);
    // The release that reserved the key for the dead waiter took it out of line: once the
    // live waiter is served, nobody is queued.
    settle().await;
    assert!(
        no_queue_of(&cluster, &[RESOURCE]),
        "{:?}",
        queued_for(&cluster, RESOURCE)
    );
    guard.release().await.unwrap();
}

/// The cost of the direct grant (docs/safety.md, "The direct grant"): a waiter that dies in
/// line and is then granted the lock holds it, as a holder that dies does, until its TTL
/// runs out; a reservation lasted only until its place lapsed (the test above).
#[tokio::test(start_paused = true)]
async fn a_dead_waiter_granted_the_lock_holds_it_until_its_ttl() {
    let (cluster, _holder, held) = holding_resource(3, patient()).await;
    let dead_lock = client(&cluster, "dead", patient());
    let mut dead = task::spawn(dead_lock.acquire(RESOURCE));
    pending_for(&mut dead, DELAY + Duration::from_millis(1)).await;
    assert!(
        in_line_everywhere(&cluster, "dead"),
        "the dead waiter never queued"
    );
    std::mem::forget(dead);
    // Granted in the token of its last refresh, the one its places record.
    let dead_token = queued_tokens(&cluster, "dead").pop().unwrap();

    let waiter = spawn_waiter(&client(&cluster, "live", patient()));
    wait_in_line(&cluster, "live").await;
    let released = Instant::now();
    held.release().await.unwrap();
    assert_eq!(cluster.holders(RESOURCE), vec![Some(dead_token); 3]);

    let (got_it, guard) = waiter.await.unwrap();
    // Taken on the live waiter's first refresh after the grant's TTL ran out.
    let expired = released + TTL;
    assert!(got_it > expired, "taken {:?} early", expired - got_it);
    assert!(
        got_it <= expired + DELAY,
        "taken {:?} late",
        got_it - expired
    );
    assert_eq!(holding(&cluster, &guard), 3);
    guard.release().await.unwrap();
}

/// A node records a grant (`granted:<token>` in the line's deadlines) for as long as the
/// granted key may be in the waiter's token: the waiter's next refresh and its leave look
/// it up there. The record neither goes before the key (a line of places that lapse sooner
/// than the TTL) nor outlives the line for good (a grant made as the line emptied, once
/// left in a hash without expiry).
#[tokio::test(start_paused = true)]
async fn a_grant_is_recorded_as_long_as_the_key_and_then_nothing_is_left() {
    for behind in [false, true] {
        let (cluster, _holder, held) = holding_resource(3, patient()).await;
        // A waiter that dies in line, alone or with another dead one behind it, and is
        // granted the lock: the release empties the line, or leaves a place in it that
        // lapses long before the TTL.
        let mut dead = Vec::new();
        for name in ["dead", "dead-behind"]
            .into_iter()
            .take(1 + usize::from(behind))
        {
            let lock = client(&cluster, name, patient());
            let mut acquire = task::spawn(async move { lock.acquire(RESOURCE).await });
            pending_for(&mut acquire, DELAY + Duration::from_millis(1)).await;
            assert!(in_line_everywhere(&cluster, name), "{name} never queued");
            dead.push(acquire);
        }
        std::mem::forget(dead);
        let dead_token = queued_tokens(&cluster, "dead").pop().unwrap();
        held.release().await.unwrap();
        assert_eq!(cluster.holders(RESOURCE), vec![Some(dead_token); 3]);
        for node in cluster.nodes() {
            let key = node.ttl(RESOURCE).expect("the granted key has a TTL");
            let record = node.ttl(&deadlines(RESOURCE));
            assert!(
                record.is_some_and(|record| record >= key),
                "one behind: {behind}; the grant's record lives {record:?}, the key {key:?}"
            );
        }
        // Once the grant's TTL and the line's own time have run out, nothing is left.
        tokio::time::sleep(2 * TTL + Duration::from_millis(1)).await;
        for node in cluster.nodes() {
            assert_eq!(node.keys(), Vec::<String>::new(), "one behind: {behind}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn unfair_waiters_never_queue() {
    let unfair = patient().to_builder().fair(false).build().unwrap();
    let (cluster, _holder, held) = holding_resource(3, unfair.clone()).await;
    let lock = client(&cluster, "waiter", unfair);
    let waiter = spawn_waiter(&lock);

    // Several attempts over two retry delays, none of them queued anywhere.
    tokio::time::sleep(DELAY * 2 + Duration::from_millis(1)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    // The first attempt, one more as soon as it watches the key's channel (a release in
    // between would go unheard), then one per retry delay.
    assert_eq!(lock.metrics().attempts, 4, "{:?}", lock.metrics());
    assert!(no_queue_of(&cluster, &[RESOURCE]));

    let released = Instant::now();
    held.release().await.unwrap();
    let (got_it, guard) = waiter.await.unwrap();
    // Woken by the announcement on the key's channel, free for anybody.
    assert_eq!(
        got_it,
        released,
        "served {:?} after the release",
        got_it - released
    );
    guard.release().await.unwrap();
    settle().await;
    assert!(no_queue_of(&cluster, &[RESOURCE]));
    let queue_requests = cluster
        .log()
        .iter()
        .filter(|(_, record)| matches!(record.op, Op::LockQueued { .. } | Op::LeaveQueue))
        .count();
    assert_eq!(
        queue_requests, 0,
        "an unfair waiter asked for a place in line"
    );
}

#[tokio::test(start_paused = true)]
async fn no_client_starves_under_contention() {
    const CLIENTS: usize = 4;
    const HOLD: Duration = Duration::from_millis(10);
    let cluster = cluster(5);
    // A millisecond of network to each node: racing for the releases instead of queueing,
    // some clients get the lock far more often than others.
    for node in cluster.nodes() {
        node.set_request_delay(Duration::from_millis(1));
    }
    let inside = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + Duration::from_secs(1);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let lock = client(&cluster, &format!("client-{i}"), patient());
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                let mut acquisitions = 0_u32;
                while Instant::now() < until {
                    let guard = lock.acquire(RESOURCE).await.expect("acquire");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    acquisitions += 1;
                    tokio::time::sleep(HOLD).await;
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
    // The line serves them in turn: nobody got the lock twice while another waited.
    assert!(most - least <= 1, "served out of turn: {counts:?}");
    assert!(least >= 20, "{counts:?}");
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

/// Drives `task` while virtual time passes, a millisecond at a time, until `check` holds;
/// asserts that the task is still waiting then, and that `check` held within `limit`.
async fn pending_until<T: std::future::Future>(
    task: &mut task::Spawn<T>,
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> bool,
) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        pending_for(task, Duration::from_millis(1)).await;
    }
}

/// A waiter for `[a, b]` while `b` is held cannot use `a`: releases of `a` must go to
/// those who can, at the rate `a` is used without it, and the waiter must still get both
/// soon after `b` is released, although `a` keeps being taken.
#[tokio::test(start_paused = true)]
async fn a_waiter_for_several_keys_does_not_throttle_a_key_it_cannot_use_yet() {
    const WINDOW: Duration = Duration::from_secs(2);
    // Each request takes this long to reach its node, so that a loop of acquisitions lets
    // virtual time pass: an acquisition and its release take two of it.
    const REQUEST: Duration = Duration::from_millis(10);
    let cluster = cluster(3);
    for node in cluster.nodes() {
        node.set_request_delay(REQUEST);
    }
    let user_of_a = client(&cluster, "user-of-a", patient());
    let holder_of_b = client(&cluster, "holder-of-b", patient());
    let waiter = client(&cluster, "waiter", patient());

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
    until(
        "the waiter for [a, b] in line on every node, in one queue",
        Duration::from_secs(5),
        || {
            let (a, b) = (queued_for(&cluster, "a"), queued_for(&cluster, "b"));
            in_line_everywhere(&cluster, "waiter") && a.iter().zip(&b).all(|(a, b)| a != b)
        },
    )
    .await;
    let beside_the_waiter = acquisitions_within(&user_of_a, "a", WINDOW).await;
    println!("acquisitions of a in {WINDOW:?}: {alone} alone, {beside_the_waiter} beside the waiter for [a, b]");
    assert!(
        beside_the_waiter * 2 >= alone,
        "the waiter for [a, b] throttled a: {beside_the_waiter} acquisitions in {WINDOW:?}, {alone} without it"
    );
    // Not throttled at all: a is used exactly as often as without the waiter.
    assert_eq!(beside_the_waiter, alone);
    assert_eq!(
        alone as u128,
        WINDOW.as_millis() / (REQUEST * 2).as_millis()
    );
    assert!(!both.is_finished(), "the waiter got a held key");

    // Released while a is still in heavy use: the waiter gets both nonetheless.
    let stop = Arc::new(AtomicBool::new(false));
    let looper = spawn_looper(&user_of_a, "a", Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (got_both, guard) = both.await.expect("the waiter's task");
    let took = got_both - released;
    println!("the waiter for [a, b] got both {took:?} after b was released");
    assert!(
        took < Duration::from_secs(1),
        "the waiter for [a, b] got both only {took:?} after b was released"
    );
    // A few requests' time (its attempt, the release of a by its user, its claim), not a
    // retry delay.
    assert!(
        took <= REQUEST * 3,
        "the waiter for [a, b] got both only {took:?} after b was released"
    );
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    assert!(looper.await.expect("the looper's task") > 0);
}

/// Nodes may disagree on which key a waiter for several keys is blocked on, so it may be
/// queued under another key on each node; when it gives up, it leaves every queue.
#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_for_several_keys_leaves_every_queue() {
    let cluster = cluster(3);
    // `a` is held on node 0 only (say, what is left of a failed attempt), `b` everywhere.
    cluster
        .node(0)
        .insert("a", &LockToken::from_string("foreign"), TTL);
    let holder = client(&cluster, "holder", config(TTL));
    let held = holder.try_acquire("b").await.unwrap();
    let waiter = client(&cluster, "waiter", long_lived_places());

    let mut acquire = task::spawn(waiter.acquire_many(&["a", "b"]));
    pending_until(
        &mut acquire,
        "in a's queue on node 0, in b's on the others",
        Duration::from_secs(5),
        || {
            queued_for(&cluster, "a") == [true, false, false]
                && queued_for(&cluster, "b") == [false, true, true]
        },
    )
    .await;
    drop(acquire);

    // Gone from both queues everywhere at once, long before its places (2.3 s) would lapse.
    settle().await;
    assert!(
        no_queue_of(&cluster, &["a", "b"]),
        "a: {:?}, b: {:?}",
        queued_for(&cluster, "a"),
        queued_for(&cluster, "b")
    );
    held.release().await.unwrap();
    assert_eq!(
        cluster.holders("b"),
        [None, None, None],
        "b reserved for a waiter that left"
    );
}

/// A release reserved for a waiter for several keys that cannot use it (another of its
/// keys is held) goes on to the next in line at once, not when the waiter's place lapses.
#[tokio::test(start_paused = true)]
async fn a_reservation_a_waiter_for_several_keys_cannot_use_goes_on_at_once() {
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", long_lived_places());
    let held_a = holder.try_acquire("a").await.unwrap();
    let waiter = client(&cluster, "waiter", long_lived_places());
    let both = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire_many(&["a", "b"]).await })
    };
    // `b` is free, so the waiter is in line for `a`, the key it is blocked on.
    until(
        "the waiter for [a, b] in a's queue",
        Duration::from_secs(5),
        || in_line_everywhere(&cluster, "waiter") && queued_for(&cluster, "a") == [true; 3],
    )
    .await;
    assert_eq!(queued_for(&cluster, "b"), [false; 3]);
    let held_b = holder.try_acquire("b").await.unwrap();
    let user_of_a = spawn_acquire_of(&client(&cluster, "user-of-a", long_lived_places()), "a");
    wait_in_line(&cluster, "user-of-a").await;

    let released = Instant::now();
    held_a.release().await.unwrap();
    let (got_a, guard) = user_of_a.await.unwrap();
    // A reservation left to lapse would last up to the waiter's place lifetime, 2.3 s.
    let took = got_a - released;
    assert!(
        took < Duration::from_secs(1),
        "a went on only after {took:?}"
    );
    // At once, in fact: the waiter for [a, b] hears of its reservation, passes it on in
    // its next attempt, and the next in line claims it on that announcement.
    assert_eq!(took, Duration::ZERO, "a went on only after {took:?}");
    // Meanwhile the waiter for [a, b] moved to the line of `b`, which blocks it now.
    settle().await;
    assert_eq!(queued_for(&cluster, "b"), [true; 3]);
    assert_eq!(queued_for(&cluster, "a"), [false; 3]);
    assert!(!both.is_finished(), "the waiter got a held key");

    guard.release().await.unwrap();
    held_b.release().await.unwrap();
    let both = both.await.unwrap().expect("the waiter's acquire");
    both.release().await.unwrap();
}

/// The release of a lock over several keys hands each key to the first waiter in its own
/// line, not only the first key.
#[tokio::test(start_paused = true)]
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
    let cluster = cluster(3);
    let holder = client(&cluster, "holder", slow.clone());
    let held = holder.try_acquire_many(&["a", "b"]).await.unwrap();
    let waiter_a = spawn_acquire_of(&client(&cluster, "waiter-a", slow.clone()), "a");
    let waiter_b = spawn_acquire_of(&client(&cluster, "waiter-b", slow), "b");
    until("a waiter in each queue", Duration::from_secs(5), || {
        in_line_everywhere(&cluster, "waiter-a")
            && in_line_everywhere(&cluster, "waiter-b")
            && queued_for(&cluster, "a") == [true; 3]
            && queued_for(&cluster, "b") == [true; 3]
    })
    .await;

    let released = Instant::now();
    held.release().await.unwrap();
    for waiter in [waiter_a, waiter_b] {
        let (got_it, guard) = waiter.await.unwrap();
        let took = got_it - released;
        assert!(
            took < Duration::from_millis(500),
            "served {took:?} after the release"
        );
        // At once, on the announcement of its key's reservation.
        assert_eq!(took, Duration::ZERO, "served {took:?} after the release");
        guard.release().await.unwrap();
    }
}
