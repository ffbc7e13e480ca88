//! Sessions: one keep-alive for many held locks. One request per node per interval and
//! chunk, each lock's validity counted from its own chunk's sending, each lock lost on its
//! own, and the session's end when no quorum can be kept. (`tests/servers/session.rs`
//! kills, freezes and edits real servers under a session.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use quorumlock::node::{LockNode, NodeHints, NodeReply, NodeRequest};
use quorumlock::sim::{Op, SimCluster, SimNode};
use quorumlock::{
    Election, LeaseEnd, LockConfig, LockError, LockGuard, NodeError, Redlock, RwLock, Semaphore,
    Session, SessionEnd, SessionOptions,
};
use tokio::time::Instant;

use crate::support::{all_keys, client, cluster, config, holding};

const TTL: Duration = Duration::from_millis(300);

/// The extension requests each node of `cluster` was sent: (plain ones, batched ones, the
/// leases the batched ones carried).
fn extensions(cluster: &SimCluster) -> Vec<(usize, usize, usize)> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let log = node.log();
            let plain = log
                .iter()
                .filter(|r| matches!(r.op, Op::Extend { .. }))
                .count();
            let batched: Vec<usize> = log
                .iter()
                .filter_map(|r| match r.op {
                    Op::ExtendMany { leases, .. } => Some(leases),
                    _ => None,
                })
                .collect();
            (plain, batched.len(), batched.iter().sum())
        })
        .collect()
}

/// When each batched extension was sent to `node`.
fn batched_sends(node: &SimNode) -> Vec<Instant> {
    node.log()
        .iter()
        .filter(|r| matches!(r.op, Op::ExtendMany { .. }))
        .map(|r| r.sent_at)
        .collect()
}

async fn hold(lock: &Redlock, session: &Session, count: usize) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(count);
    for i in 0..count {
        let mut guard = lock.try_acquire(&format!("tenant:{i}")).await.unwrap();
        session.keep(&mut guard).unwrap();
        guards.push(guard);
    }
    guards
}

#[tokio::test(start_paused = true)]
async fn many_locks_cost_one_request_per_node_and_chunk_per_interval() {
    let cluster = cluster(5);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::with_options(&lock, SessionOptions::default().chunk(100)).unwrap();
    let guards = hold(&lock, &session, 250).await;
    for node in cluster.nodes() {
        node.clear_log();
    }

    // Four TTLs: twelve intervals of a third of the TTL, and a round every interval less
    // the round's lead (at most a quarter of the interval): 12 to 16 rounds.
    tokio::time::sleep(TTL * 4).await;
    for (index, (plain, batched, leases)) in extensions(&cluster).into_iter().enumerate() {
        assert_eq!(plain, 0, "node {index}");
        // 250 locks in chunks of 100: three requests per round, each lock in one.
        assert!((36..=48).contains(&batched), "node {index}: {batched}");
        assert_eq!(leases, batched / 3 * 250, "node {index}");
    }
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        assert_eq!(holding(&cluster, guard), 5);
        assert!(guard.validity() > TTL / 2, "{:?}", guard.validity());
    }
    assert_eq!(session.len(), 250);
    assert!(session.ended().is_none());
    drop(guards);
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(all_keys(&cluster), []);
}

/// A node that notes, of each batched extension it is sent, whether another node had
/// encoded the request already.
#[derive(Debug)]
struct NotesEncodings {
    node: Arc<dyn LockNode>,
    /// (requests, requests that found no encoding and made it).
    counts: Arc<Mutex<(usize, usize)>>,
}

impl LockNode for NotesEncodings {
    fn name(&self) -> &str {
        self.node.name()
    }

    fn hints(&self) -> NodeHints {
        self.node.hints()
    }

    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
        if let NodeRequest::ExtendMany { encoding, .. } = request {
            let mut counts = self.counts.lock().unwrap();
            counts.0 += 1;
            counts.1 += usize::from(!encoding.is_encoded());
        }
        self.node.call(request)
    }
}

#[tokio::test(start_paused = true)]
async fn each_chunk_is_encoded_once_for_every_node() {
    let cluster = cluster(5);
    let counts = Arc::new(Mutex::new((0, 0)));
    let nodes = cluster.lock_nodes_for("holder").into_iter().map(|node| {
        Arc::new(NotesEncodings {
            node,
            counts: Arc::clone(&counts),
        }) as Arc<dyn LockNode>
    });
    let lock = Redlock::from_nodes(nodes, config(TTL)).unwrap();
    // 25 chunks a round: more than a round keeps prepared at once, so that the nodes must
    // go through them together for each to be encoded once.
    let session = Session::with_options(&lock, SessionOptions::default().chunk(10)).unwrap();
    let guards = hold(&lock, &session, 250).await;
    tokio::time::sleep(TTL * 2).await;

    let (requests, encoded) = *counts.lock().unwrap();
    assert!(requests >= 5 * 25 * 5, "{requests} requests");
    assert_eq!(
        encoded * 5,
        requests,
        "{encoded} encodings for {requests} requests"
    );
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        assert_eq!(holding(&cluster, guard), 5);
    }
}

#[tokio::test(start_paused = true)]
async fn each_lock_counts_its_validity_from_when_its_own_chunk_was_sent() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    // One lock per request, four in flight per node, each request taking 5 ms at the
    // node: the round's last four locks on a node go out a request later than its first
    // four (which locks those are differs between rounds).
    let session = Session::with_options(&lock, SessionOptions::default().chunk(1)).unwrap();
    let guards = hold(&lock, &session, 8).await;
    for node in cluster.nodes() {
        node.set_request_delay(Duration::from_millis(5));
        node.clear_log();
    }
    let started = Instant::now();
    tokio::time::sleep(TTL / 3 + Duration::from_millis(50)).await;

    let sends: Vec<Vec<Instant>> = cluster.nodes().iter().map(batched_sends).collect();
    let mut froms: Vec<Instant> = guards.iter().map(LockGuard::acquired_at).collect();
    assert!(
        froms.iter().all(|&from| from > started),
        "extended after the test's start"
    );
    froms.sort_unstable();
    froms.dedup();
    assert!(
        froms.len() > 1,
        "every lock counted from one moment: {froms:?}"
    );
    for guard in &guards {
        let from = guard.acquired_at();
        // Counted from a moment one of its requests was sent, on a quorum of the nodes.
        let sent_then = sends.iter().filter(|node| node.contains(&from)).count();
        assert!(sent_then >= 1, "{}: {from:?} is no send", guard.resource());
        assert_eq!(guard.deadline(), from + lock.config().max_validity());
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_deleted_behind_the_sessions_back_ends_that_lock_alone() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let guards = hold(&lock, &session, 3).await;
    let (victim, others) = guards.split_first().unwrap();
    // Gone from two of three nodes: no quorum can hold it.
    cluster.node(0).evict(victim.key());
    cluster.node(1).evict(victim.key());

    let end = tokio::time::timeout(TTL / 2, victim.lost().wait())
        .await
        .expect("lost at the next round");
    assert!(
        matches!(&end, LeaseEnd::Lost(error) if matches!(**error, LockError::NotHeld { .. })),
        "{end:?}"
    );
    // Before its deadline, at the round that found it gone.
    assert!(Instant::now() < victim.deadline() || victim.is_expired());
    tokio::time::sleep(TTL * 2).await;
    for guard in others {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
        assert_eq!(holding(&cluster, guard), 3);
    }
    assert!(session.ended().is_none());
    // One node without the key is a minority: the lock holds on the others.
    cluster.node(2).evict(others[0].key());
    tokio::time::sleep(TTL).await;
    assert!(!others[0].lost().is_lost());
}

#[tokio::test(start_paused = true)]
async fn a_lock_taken_over_by_another_owner_ends_that_lock_alone() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let guards = hold(&lock, &session, 2).await;
    // Another owner holds the key on two nodes (it expired there and was taken).
    let thief = quorumlock::LockToken::generate();
    for node in [0, 1] {
        cluster.node(node).evict(guards[0].key());
        cluster.node(node).insert(guards[0].key(), &thief, TTL);
    }
    let end = tokio::time::timeout(TTL / 2, guards[0].lost().wait())
        .await
        .expect("lost at the next round");
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end:?}");
    // The thief's keys were left alone.
    for node in [0, 1] {
        assert_eq!(cluster.node(node).get(guards[0].key()), Some(thief.clone()));
    }
    assert!(!guards[1].lost().is_lost());
    assert!(session.ended().is_none());
}

#[tokio::test(start_paused = true)]
async fn losing_a_majority_ends_the_session_and_its_locks_before_their_deadlines() {
    let cluster = cluster(5);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let guards = hold(&lock, &session, 10).await;
    let signal = session.end();
    for i in 0..3 {
        cluster.node(i).crash();
    }
    let deadline = guards.iter().map(LockGuard::deadline).max().unwrap();
    let end = tokio::time::timeout(TTL * 2, signal.wait())
        .await
        .expect("the session ended");
    assert!(matches!(end, SessionEnd::Lost(_)), "{end:?}");
    assert!(Instant::now() < deadline, "before the last deadline");
    for guard in &guards {
        assert!(
            matches!(guard.lost().ended(), Some(LeaseEnd::Lost(_))),
            "{}",
            guard.resource()
        );
    }
    // An ended session takes no new lock.
    for i in 0..3 {
        cluster.node(i).restart(false);
    }
    let mut late = lock.try_acquire("late").await.unwrap();
    assert!(matches!(
        session.keep(&mut late),
        Err(LockError::Session { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_node_down_costs_the_round_one_request_not_one_per_chunk() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::with_options(&lock, SessionOptions::default().chunk(10)).unwrap();
    let guards = hold(&lock, &session, 100).await;
    cluster.node(2).crash();
    for node in cluster.nodes() {
        node.clear_log();
    }
    tokio::time::sleep(TTL * 2).await;
    for guard in &guards {
        assert!(!guard.lost().is_lost());
        assert_eq!(holding(&cluster, guard), 2);
    }
    let sent = extensions(&cluster);
    // Six to eight rounds (a round every interval less its lead) of ten chunks to each
    // live node; the crashed one fails the chunks in flight at once, then the one sent
    // after those failures, and is sent no more of the round.
    let rounds = sent[0].1 / 10;
    assert!((6..=8).contains(&rounds), "{sent:?}");
    assert_eq!(sent[0].1, rounds * 10, "{sent:?}");
    assert!(sent[2].1 <= rounds * 5, "{sent:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lock_that_leaves_or_is_released_is_no_longer_extended() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let mut guards = hold(&lock, &session, 3).await;
    guards[0].leave_session();
    let released = guards.remove(1);
    released.release().await.unwrap();
    let left_deadline = guards[0].deadline();
    tokio::time::sleep(TTL / 3 + Duration::from_millis(20)).await;
    assert_eq!(session.len(), 1, "pruned at the round");
    assert_eq!(guards[0].deadline(), left_deadline, "not extended");
    assert!(guards[1].deadline() > left_deadline, "extended");
    // The one that left expires at its deadline; its lost signal says so.
    assert_eq!(guards[0].lost().wait().await, LeaseEnd::Expired);
    assert!(!guards[1].lost().is_lost());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_session_lets_its_locks_expire_and_close_releases_them() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let kept = hold(&lock, &session, 2).await;
    drop(session);
    assert_eq!(kept[0].lost().wait().await, LeaseEnd::Expired);

    let session = Session::new(&lock);
    let mut guards = Vec::new();
    for i in 0..3 {
        guards.push(session.acquire(&format!("closed:{i}")).await.unwrap());
    }
    let signal = session.end();
    session.close().await.unwrap();
    assert_eq!(signal.ended(), Some(SessionEnd::Closed));
    assert!(all_keys(&cluster)
        .iter()
        .all(|(_, key)| !key.contains("closed")));
    for guard in guards {
        assert!(guard.is_released());
        assert_eq!(guard.lost().ended(), Some(LeaseEnd::Released));
        guard.release().await.unwrap(); // already released: no request, no error
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_joining_late_brings_the_round_forward() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let _early = hold(&lock, &session, 1).await;
    // Acquired now, kept by the session only 90 ms later: due 10 ms after it joins,
    // before the round the session planned (100 ms from its start).
    let mut late = lock.try_acquire("late").await.unwrap();
    tokio::time::sleep(Duration::from_millis(90)).await;
    let acquired = late.acquired_at();
    session.keep(&mut late).unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    assert!(
        late.acquired_at() > acquired,
        "extended within its third of the TTL"
    );
    tokio::time::sleep(TTL * 3).await;
    assert!(!late.lost().is_lost());
}

/// The gap test's pass over `guards`: their last extensions in `last`, the longest gap so
/// far in `longest`.
fn note_extensions(guards: &[LockGuard], last: &mut [Instant], longest: &mut Duration) {
    for (guard, last) in guards.iter().zip(last) {
        let at = guard.acquired_at();
        if at != *last {
            *longest = (*longest).max(at - *last);
            *last = at;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_lock_is_extended_within_the_interval_even_when_a_round_must_retry() {
    // A TTL whose node timeout (50 ms) and retry (100 ms) are a real share of the
    // interval (1 s), as on servers.
    let ttl = Duration::from_secs(3);
    let interval = ttl / 3;
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(ttl));
    let session = Session::with_options(&lock, SessionOptions::default().chunk(2)).unwrap();
    let guards = hold(&lock, &session, 8).await;
    // One node down: every lock needs both others in every round.
    cluster.node(2).crash();
    let mut last: Vec<Instant> = guards.iter().map(LockGuard::acquired_at).collect();
    let mut longest = Duration::ZERO;
    let rounds = |cluster: &SimCluster| extensions(cluster)[0].1;
    let step = Duration::from_millis(1);
    // Two rounds as usual, then one in which node 1 answers nothing for 20 ms: the locks
    // of its chunks sent meanwhile are confirmed only by the retry.
    while rounds(&cluster) < 2 * 4 {
        tokio::time::sleep(step).await;
        note_extensions(&guards, &mut last, &mut longest);
    }
    tokio::time::sleep(interval / 2).await;
    note_extensions(&guards, &mut last, &mut longest);
    let before = rounds(&cluster);
    cluster.node(1).lose_replies(true);
    while rounds(&cluster) == before {
        tokio::time::sleep(step).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    cluster.node(1).lose_replies(false);
    let until = Instant::now() + ttl;
    while Instant::now() < until {
        tokio::time::sleep(step).await;
        note_extensions(&guards, &mut last, &mut longest);
    }
    // The slow round was retried: node 0 was sent two rounds well within an interval.
    let sends = batched_sends(cluster.node(0));
    let retried = sends
        .windows(2)
        .any(|pair| pair[1] - pair[0] > step * 10 && pair[1] - pair[0] < interval / 2);
    assert!(retried, "no retry: {sends:?}");
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
    }
    assert!(longest <= interval, "a lock went {longest:?} unextended");
}

#[tokio::test(start_paused = true)]
async fn the_first_round_and_one_over_a_grown_list_start_early_enough_for_their_length() {
    // Nodes that take 20 ms a request, five locks a chunk, four chunks in flight: a round
    // takes 20 ms per 20 locks. A round starts early by twice its expected length and
    // three node timeouts (90 ms), at most a quarter of the interval (500 ms).
    let ttl = Duration::from_secs(6);
    let interval = ttl / 3;
    let config = LockConfig::builder()
        .ttl(ttl)
        .node_timeout(Duration::from_millis(30))
        .retry_count(0)
        .build()
        .unwrap();
    let cluster = cluster(3);
    for node in cluster.nodes() {
        node.set_request_delay(Duration::from_millis(20));
    }
    let lock = client(&cluster, "holder", config);
    let session = Session::with_options(&lock, SessionOptions::default().chunk(5)).unwrap();
    let join = |range: std::ops::Range<usize>| {
        let (lock, session) = (&lock, &session);
        futures::future::join_all(range.map(move |i| async move {
            let mut guard = lock.try_acquire(&format!("tenant:{i}")).await.unwrap();
            session.keep(&mut guard).unwrap();
            guard
        }))
    };
    // 120 locks: a round of 120 ms, longer than a lead reckoned from no round at all.
    let mut guards = join(0..120).await;
    let mut last: Vec<Instant> = guards.iter().map(LockGuard::acquired_at).collect();
    let mut longest = Duration::ZERO;
    let until = Instant::now() + interval * 2 + interval / 2;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        note_extensions(&guards, &mut last, &mut longest);
    }
    assert!(
        longest <= interval,
        "the first rounds: a lock went {longest:?} unextended"
    );
    // Over three times as many: the next round takes 400 ms, longer than the lead of the
    // 120 ms rounds before (330 ms).
    let grown = join(120..400).await;
    last.extend(grown.iter().map(LockGuard::acquired_at));
    guards.extend(grown);
    let until = Instant::now() + interval * 3;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        note_extensions(&guards, &mut last, &mut longest);
    }
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{}", guard.resource());
    }
    assert!(
        longest <= interval,
        "after growing: a lock went {longest:?} unextended"
    );
    // Whichever chunk a lock is in, in one round and the next: the next round's last
    // request goes out within an interval of the round's first.
    let mut sends = batched_sends(cluster.node(0));
    sends.sort_unstable();
    let rounds: Vec<&[Instant]> = sends
        .chunk_by(|a, b| *b - *a < Duration::from_millis(300))
        .collect();
    assert!(rounds.len() >= 5, "{} rounds", rounds.len());
    for pair in rounds.windows(2) {
        let (first, last) = (pair[0][0], pair[1][pair[1].len() - 1]);
        assert!(
            last - first <= interval,
            "a round of {} requests ended {:?} after the one before began",
            pair[1].len(),
            last - first
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_guard_of_other_nodes_or_another_ttl_is_refused_and_kept_as_it_was() {
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(TTL));
    let session = Session::new(&lock);
    let other_nodes = SimCluster::new(3).redlock(config(TTL)).unwrap();
    let mut foreign = other_nodes.try_acquire("x").await.unwrap();
    assert!(matches!(
        session.keep(&mut foreign),
        Err(LockError::ForeignGuard { .. })
    ));
    let factory = quorumlock::LockFactory::new(lock.clone());
    let longer = factory.create_with_ttl("y", TTL * 2).unwrap();
    let mut guard = longer.try_acquire().await.unwrap();
    let refused = session.keep(&mut guard).unwrap_err();
    assert!(matches!(refused, LockError::Session { .. }), "{refused}");
}

#[tokio::test(start_paused = true)]
async fn readers_permits_and_a_leadership_are_kept_with_what_lives_beside_them() {
    let cluster = cluster(3);
    let fenced = LockConfig::builder()
        .ttl(TTL)
        .node_timeout(TTL / 10)
        .retry_count(0)
        .fencing(true)
        .build()
        .unwrap();
    let lock = client(&cluster, "family", fenced);
    let session = Session::new(&lock);
    let catalog = RwLock::new(lock.clone(), "catalog").unwrap();
    let mut reader = catalog.try_read().await.unwrap();
    session.keep(&mut reader).unwrap();
    let pool = Semaphore::new(lock.clone(), "pool", 2).unwrap();
    let mut permit = pool.try_acquire().await.unwrap();
    session.keep(&mut permit).unwrap();
    let election = Election::new(lock.clone(), "primary").unwrap();
    let mut leadership = election.campaign("node-a").await.unwrap();
    session.keep(&mut leadership).unwrap();

    tokio::time::sleep(TTL * 4).await;
    assert!(!reader.lost().is_lost());
    assert!(!permit.lost().is_lost());
    assert!(!leadership.lost().is_lost());
    // A writer is still refused: the reader list lives as long as the reader.
    assert!(catalog.try_write().await.is_err());
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value, "node-a");
    for node in cluster.nodes() {
        let list = node
            .ttl(&catalog.readers_key())
            .expect("the reader list lives");
        assert!(list >= node.ttl(reader.key()).unwrap());
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_that_stalls_in_every_round_still_extends_every_lock() {
    // Two nodes that take 20 ms a request and stop answering for 20 ms in each round, at
    // the same moment of it: a node given up at its first timeout would not be sent the
    // round's later chunks, and a round that always began with the same chunk would lose
    // the same chunks to the stall every time; either way some locks would go unextended
    // on that node for a whole TTL, until their keys expired there.
    let ttl = Duration::from_secs(3);
    let cluster = cluster(3);
    let lock = client(&cluster, "holder", config(ttl));
    let session = Session::with_options(&lock, SessionOptions::default().chunk(5)).unwrap();
    let guards = hold(&lock, &session, 200).await;
    let chunks = 40;
    for node in [1, 2] {
        cluster
            .node(node)
            .set_request_delay(Duration::from_millis(20));
    }
    let batched = |cluster: &SimCluster| extensions(cluster)[0].1;
    let mut seen = batched(&cluster);
    let mut stalled_rounds = 0;
    let until = Instant::now() + ttl * 4;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now_seen = batched(&cluster);
        if now_seen >= seen + chunks {
            // A full round just began (node 0 answers at once, so it was sent every chunk
            // of the round in this millisecond).
            stalled_rounds += 1;
            for (node, at) in [(1, 60), (2, 120)] {
                let node = cluster.node(node).clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(at)).await;
                    node.lose_replies(true);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    node.lose_replies(false);
                });
            }
        }
        seen = now_seen;
    }
    assert!(stalled_rounds >= 10, "{stalled_rounds} rounds");
    for guard in &guards {
        assert!(!guard.lost().is_lost(), "{} lost", guard.resource());
    }
    let starved: Vec<&str> = guards
        .iter()
        .filter(|guard| holding(&cluster, guard) < 3)
        .map(LockGuard::resource)
        .collect();
    assert!(
        starved.is_empty(),
        "{} locks expired on a stalling node: {starved:?}",
        starved.len()
    );
}
