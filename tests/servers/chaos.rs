//! The chaos suite: every scenario of the "Fault scenarios" table in
//! `shared/reference/safety.md`, on real redis-server processes, with network faults from
//! the testkit's fault proxies and process faults (kill, SIGSTOP/SIGCONT, restart) from the
//! harness. Each scenario asserts the behaviour the table calls correct, that errors name
//! the failing nodes and why, and that no lock key outlives its TTL on any node afterwards.
//!
//! See `docs/chaos.md` for the list and what each test shows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    chaos_config, command_calls, eventually, held_on, held_on_every_node, no_lock_key_outlives_ttl,
    node_command, proxied, proxied_with, redlock_via, redlock_via_on, volatile, warm_up,
    LOAD_MARGIN, LOCK_KEYS,
};
use quorumlock::{DistributedLock, LockError, NodeError, Nodes, RedisLock, Redlock, Tally};
use quorumlock_testkit::{
    Direction, NodeOptions, Persistence, ProxiedCluster, RedisCluster, ResetWhen,
};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// The failures of an error's tally, by node name.
fn failures(err: &LockError) -> Vec<(String, NodeError)> {
    err.tally()
        .unwrap_or_else(|| panic!("expected an error with a tally, got {err:?}"))
        .failures
        .iter()
        .map(|f| (f.node.clone(), f.error.clone()))
        .collect()
}

/// The error's tally.
fn tally(err: &LockError) -> &Tally {
    err.tally()
        .unwrap_or_else(|| panic!("expected an error with a tally, got {err:?}"))
}

/// Asserts that `err` names node `url` as failed, with a failure matching `reason`.
fn assert_names(err: &LockError, url: &str, reason: impl Fn(&NodeError) -> bool, what: &str) {
    let failures = failures(err);
    let found = failures.iter().find(|(node, _)| node == url);
    match found {
        Some((_, error)) => assert!(
            reason(error),
            "{url}: expected {what}, got {error:?} in {err}"
        ),
        None => panic!("{url} not named as failed in: {err}"),
    }
    assert!(
        err.to_string().contains(url),
        "{url} missing from the message: {err}"
    );
}

fn is_timeout(e: &NodeError) -> bool {
    matches!(e, NodeError::Timeout(_))
}

fn is_connection(e: &NodeError) -> bool {
    matches!(e, NodeError::Connection(_))
}

fn is_refused(e: &NodeError) -> bool {
    matches!(e, NodeError::Connection(text) if text.to_lowercase().contains("refused"))
}

/// A chaos config whose node timeout is a tenth of the TTL, for scenarios that are not
/// about timing: on a loaded machine, healthy nodes can take more than the default 50 ms.
fn patient(ttl: Duration) -> quorumlock::LockConfig {
    chaos_config(ttl)
        .to_builder()
        .node_timeout(ttl / 10)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// Fault scenarios (safety.md), on the quorum lock over 5 nodes.
// ---------------------------------------------------------------------------

/// safety.md: "2 of 5 nodes down → acquire, extend, release work normally".
#[tokio::test]
async fn two_of_five_nodes_down_lock_refresh_and_release_work() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(&cluster, patient(ttl)).await;
    let rival = redlock_via(&cluster, patient(ttl)).await;
    let urls = cluster.urls();
    // One node crashed (process killed), one unreachable (the network refuses it).
    cluster.node_mut(1).kill().await.unwrap();
    cluster.proxy(3).partition().await.unwrap();

    let started = Instant::now();
    let mut guard = lock.try_acquire("ha").await.unwrap();
    assert!(
        started.elapsed() < lock.config().node_timeout() + LOAD_MARGIN,
        "{:?}",
        started.elapsed()
    );
    assert!(guard.validity() > ttl - 200 * MS, "{:?}", guard.validity());

    // Another client is refused while the lock is held.
    let err = rival.try_acquire("ha").await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    eprintln!("rival while held with 2 of 5 down: {err}");

    tokio::time::sleep(300 * MS).await;
    let before = guard.deadline();
    let validity = guard.refresh().await.unwrap();
    assert!(validity > ttl - 200 * MS, "{validity:?}");
    assert!(guard.deadline() > before + 250 * MS);
    assert!(guard.is_acquired().await.unwrap());
    guard.release().await.unwrap();
    // Released: the rival gets it at once.
    rival
        .try_acquire("ha")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // The two down nodes are named when a round has to report them.
    let three_down = {
        cluster.proxy(4).partition().await.unwrap();
        lock.try_acquire("ha").await.unwrap_err()
    };
    for i in [1, 3, 4] {
        assert_names(&three_down, &urls[i], is_connection, "a connection failure");
    }

    cluster.heal_all().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// safety.md: "3 of 5 nodes down → a clear no-quorum error naming the nodes; no key left
/// behind after the TTL". The three are down in three different ways.
#[tokio::test]
async fn three_of_five_nodes_down_is_a_clear_no_quorum_naming_each_node() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let urls = cluster.urls();
    cluster.node_mut(0).kill().await.unwrap(); // crashed
    cluster.proxy(2).partition().await.unwrap(); // unreachable: refused
    cluster.proxy(4).blackhole(true); // silent: times out

    let started = Instant::now();
    let err = lock.try_acquire("order:66").await.unwrap_err();
    let took = started.elapsed();
    eprintln!("3 of 5 down: {err}");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert_eq!(err.resource(), Some("order:66"));
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(
        text.contains("no quorum") && text.contains("3 needed"),
        "{text}"
    );
    // The first command on a connection whose peer vanished fails as "broken pipe"; the
    // reconnections that follow say "refused".
    assert_names(&err, &urls[0], is_connection, "a connection failure");
    assert_names(&err, &urls[2], is_connection, "a connection failure");
    assert_names(&err, &urls[4], is_timeout, "a timeout");
    let again = lock.try_acquire("order:66").await.unwrap_err();
    eprintln!("3 of 5 down, again: {again}");
    assert_names(&again, &urls[0], is_connection, "a connection failure");
    assert_names(&again, &urls[2], is_refused, "connection refused");
    assert_names(&again, &urls[4], is_timeout, "a timeout");
    let timeout = lock.config().node_timeout();
    assert!(
        text.contains(&format!("timed out after {timeout:?}")),
        "{text}"
    );
    assert!(tally(&err).granted <= 2);
    // Decided after one per-node timeout, then one more for the rollback round.
    assert!(took < 2 * timeout + LOAD_MARGIN, "{took:?}");
    // The live nodes were rolled back before the error returned.
    for i in [1, 3] {
        assert!(
            cluster.node(i).keys(LOCK_KEYS).await.unwrap().is_empty(),
            "node {i}"
        );
    }

    // Retrying does not help, and stays bounded: 1 + 2 attempts, 20 ms ± 10 ms apart.
    let retrying = lock.with_config(
        chaos_config(ttl)
            .to_builder()
            .retry_count(2)
            .retry_delay(20 * MS)
            .retry_jitter(10 * MS)
            .build()
            .unwrap(),
    );
    let started = Instant::now();
    let err = retrying.acquire("order:66").await.unwrap_err();
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // Back to full strength: the blackholed node receives the held SETs and the unlocks
    // queued behind them; nothing outlives the TTL anywhere.
    cluster.heal_all().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
    eventually("a lock once healed", Duration::from_secs(5), || async {
        match lock.try_acquire("order:66").await {
            Ok(guard) => guard.release().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
}

/// safety.md: "1 node frozen (SIGSTOP) or blackholed → acquire still succeeds, within about
/// one per-node timeout".
#[tokio::test]
async fn a_frozen_or_blackholed_node_costs_at_most_one_node_timeout() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    for fault in ["frozen", "blackholed"] {
        match fault {
            "frozen" => cluster.node_mut(2).freeze().await.unwrap(),
            _ => cluster.proxy(2).blackhole(true),
        }
        let mut slowest = Duration::ZERO;
        for i in 0..5 {
            let started = Instant::now();
            let mut guard = lock.try_acquire(&format!("{fault}-{i}")).await.unwrap();
            slowest = slowest.max(started.elapsed());
            guard.refresh().await.unwrap();
            guard.release().await.unwrap();
        }
        eprintln!("one node {fault}: slowest acquisition {slowest:?}");
        assert!(
            slowest < lock.config().node_timeout() + LOAD_MARGIN,
            "one node {fault}: slowest acquisition took {slowest:?}"
        );
        cluster.heal_all().await.unwrap();
    }
    // The frozen / blackholed node ran the queued SETs and unlocks when it came back.
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// safety.md: "latency above the TTL on a majority → rejected, every node unlocked".
///
/// A valid configuration bounds every node request by `node_timeout ≤ ttl / 10`, so a
/// majority slower than the TTL shows up as per-node timeouts: the round is rejected with a
/// no-quorum error naming the slow nodes, long before their replies (or the TTL) could
/// arrive. Their SETs still land late; the unlocks queued behind them delete the keys.
#[tokio::test]
async fn latency_above_the_ttl_on_a_majority_is_rejected_and_every_node_unlocked() {
    let ttl = Duration::from_secs(1);
    let latency = 1200 * MS;
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let urls = cluster.urls();

    // Below the node timeout, a slow majority still grants, and the validity pays for it.
    for i in 0..3 {
        cluster
            .proxy(i)
            .set_latency(Direction::Both, 10 * MS, 5 * MS);
    }
    let guard = lock.try_acquire("slow").await.unwrap();
    assert!(
        guard.validity() <= lock.config().max_validity() - 20 * MS,
        "the round's time is deducted: {:?}",
        guard.validity()
    );
    guard.release().await.unwrap();

    for i in 0..3 {
        cluster
            .proxy(i)
            .set_latency(Direction::Both, latency, 50 * MS);
    }
    let started = Instant::now();
    let err = lock.try_acquire("slow").await.unwrap_err();
    let took = started.elapsed();
    eprintln!("latency above the TTL on 3 of 5: {err} (after {took:?})");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    for url in &urls[0..3] {
        assert_names(&err, url, is_timeout, "a timeout");
    }
    // Decided by the per-node timeouts, before any slow reply could arrive (with the
    // load margin to spare: two timeouts of 100 ms are expected).
    assert!(took < latency, "rejected after {took:?}");
    for i in 3..5 {
        assert!(
            cluster.node(i).keys(LOCK_KEYS).await.unwrap().is_empty(),
            "node {i}"
        );
    }

    // The late SETs land on the slow nodes about `latency` after they were sent, and the
    // unlocks sent right after them delete the keys: a key may show for an instant, but
    // none lives on.
    for i in 0..3 {
        cluster.proxy(i).heal().await.unwrap();
    }
    tokio::time::sleep(latency + 300 * MS).await;
    for i in 0..5 {
        assert!(
            cluster.node(i).keys(LOCK_KEYS).await.unwrap().is_empty(),
            "node {i} kept a key after the late unlock"
        );
    }
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
    lock.try_acquire("slow")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// safety.md: "connection reset during SET → counted as a failure; the release is still sent
/// to that node". Both ways a reset can cut a SET: before the node ran it, and after (the
/// lock key was written, the reply lost).
#[tokio::test]
async fn a_reset_during_set_is_a_failure_and_the_release_still_reaches_the_node() {
    let ttl = Duration::from_secs(4);
    let config = chaos_config(ttl)
        .to_builder()
        .node_timeout(200 * MS) // room for the reconnection of the rollback round
        .build()
        .unwrap();
    for when in [ResetWhen::BeforeForwarding, ResetWhen::AfterForwarding] {
        let cluster = proxied(5).await;
        let lock = redlock_via(&cluster, config.clone()).await;
        let urls = cluster.urls();
        for i in 0..5 {
            node_command(cluster.node(i), &["CONFIG", "RESETSTAT"]).await;
        }
        // A majority resets: the acquisition fails and names them.
        // The lock request is the first command that names the key (the lock script, which
        // sets it: a one-key lock is a script too, since it also checks for readers and
        // permits of the name).
        for i in 0..3 {
            cluster.proxy(i).reset_on("lock:cut\r\n", when);
        }
        let err = lock.try_acquire("cut").await.unwrap_err();
        eprintln!("reset {when:?} on 3 of 5: {err}");
        assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
        for (i, url) in urls.iter().enumerate().take(3) {
            assert_names(&err, url, is_connection, "a connection failure");
            assert_eq!(cluster.proxy(i).resets(), 1);
            let set_ran = command_calls(cluster.node(i), "set").await;
            assert_eq!(
                set_ran,
                u64::from(when == ResetWhen::AfterForwarding),
                "node {i}"
            );
            // The rollback reached the node anyway, on a new connection.
            let unlocks = command_calls(cluster.node(i), "evalsha").await
                + command_calls(cluster.node(i), "eval").await;
            assert!(
                unlocks >= 1,
                "node {i}: no unlock after the reset ({when:?})"
            );
        }
        // ... so no key is left anywhere, not even where the SET ran.
        for i in 0..5 {
            assert!(
                cluster.node(i).keys(LOCK_KEYS).await.unwrap().is_empty(),
                "node {i}"
            );
        }

        // A minority resets: the lock is taken, and its release also reaches the node whose
        // SET ran without the client knowing.
        cluster.proxy(4).reset_on("lock:cut\r\n", when);
        let sent = cluster.proxy(4).tap("lock:cut");
        let guard = lock.try_acquire("cut").await.unwrap();
        crate::common::eventually("the reset on node 4", Duration::from_secs(2), || async {
            cluster.proxy(4).resets() == 1
        })
        .await;
        let before = sent.count();
        guard.release().await.unwrap();
        crate::common::eventually(
            "the release sent to node 4 too",
            Duration::from_secs(2),
            || async { sent.count() > before },
        )
        .await;
        let start = Instant::now();
        loop {
            let left = cluster.cluster().keys(LOCK_KEYS).await.unwrap();
            if left.iter().all(Vec::is_empty) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "{when:?}: keys left after the release: {left:?}; node 4 saw the key {} times; {:?}",
                sent.count(),
                lock.metrics()
            );
            tokio::time::sleep(20 * MS).await;
        }
        no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
    }
}

/// safety.md: "holder paused longer than the TTL, another client acquires, first resumes →
/// the first reports the lock lost, deletes nothing; its fenced write is rejected".
#[tokio::test]
async fn a_paused_holder_finds_its_lock_lost_deletes_nothing_and_its_fenced_write_fails() {
    let ttl = Duration::from_secs(1);
    let cluster = proxied(5).await;
    // The nodes keep no append-only file, and none restarts here.
    let fenced = patient(ttl).to_builder().fencing(true).build().unwrap();
    let first = redlock_via_on(&cluster, volatile(cluster.urls()), fenced.clone()).await;
    let second = redlock_via_on(&cluster, volatile(cluster.urls()), fenced).await;
    // The protected resource: a record in another Redis, written only through fenced_set.
    let store = RedisCluster::start(1).await.unwrap();
    let mut data = store
        .node(0)
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set = quorumlock::fencing::fenced_set;

    let mut paused = first.try_acquire("invoice:9").await.unwrap();
    let old_token = paused.fencing_token().expect("fencing is on");
    let lost = paused.lost();
    // The holder stalls (a GC pause, swap, SIGSTOP) past its validity.
    tokio::time::sleep(paused.validity() + 50 * MS).await;
    assert!(lost.is_lost(), "the lost signal fires at the deadline");
    let next = second.try_acquire("invoice:9").await.unwrap();
    let new_token = next.fencing_token().unwrap();
    assert!(
        new_token > old_token,
        "fencing tokens increase: {old_token} then {new_token}"
    );
    assert!(set(
        &mut data,
        "invoice:9",
        "paid by the second holder",
        new_token
    )
    .await
    .unwrap());

    // The first holder resumes: every operation reports the loss, none touches the new lock,
    // and the resource rejects its late write.
    assert!(
        !set(
            &mut data,
            "invoice:9",
            "paid by the paused holder",
            old_token
        )
        .await
        .unwrap(),
        "the stale holder's fenced write was accepted"
    );
    assert_eq!(
        store.node(0).get("invoice:9").await.unwrap().as_deref(),
        Some("paid by the second holder")
    );
    let err = paused.refresh().await.unwrap_err();
    assert!(matches!(err, LockError::Expired { .. }), "{err:?}");
    assert!(!paused.is_acquired().await.unwrap());
    let err = paused.release().await.unwrap_err();
    eprintln!("release after a pause: {err}");
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    assert!(tally(&err).refused.len() >= 3, "{err}");
    for i in 0..5 {
        assert_eq!(
            cluster.node(i).get(next.key()).await.unwrap().as_deref(),
            Some(next.token().as_str()),
            "node {i}: the new holder's key is untouched"
        );
    }
    assert!(next.is_acquired().await.unwrap());
    next.release().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// Takes a lock on exactly nodes 0, 1 and 2 (3 and 4 unreachable), and checks it is there.
async fn lock_on_first_three(cluster: &ProxiedCluster, lock: &Redlock) -> quorumlock::LockGuard {
    for i in 3..5 {
        cluster.proxy(i).partition().await.unwrap();
    }
    let guard = lock.try_acquire("stock:42").await.unwrap();
    held_on(cluster.cluster(), 0..3, &guard).await;
    guard
}

/// `guard.is_acquired()`, asked again while too few nodes answer to tell (a connection to
/// a node that just came back fails once before it reconnects).
async fn settled_is_acquired(guard: &quorumlock::LockGuard) -> bool {
    let start = Instant::now();
    loop {
        match guard.is_acquired().await {
            Ok(held) => return held,
            Err(err) if start.elapsed() < Duration::from_secs(2) => {
                eprintln!("is_acquired cannot tell yet: {err}");
                tokio::time::sleep(50 * MS).await;
            }
            Err(err) => panic!("is_acquired: {err}"),
        }
    }
}

/// Asks `lock` for "stock:42" for up to `limit` (its connection to a restarted node
/// reconnects on first use); returns the last outcome.
async fn try_for(lock: &Redlock, limit: Duration) -> Result<quorumlock::LockGuard, LockError> {
    let start = Instant::now();
    loop {
        let outcome = lock.try_acquire("stock:42").await;
        if outcome.is_ok() || start.elapsed() >= limit {
            return outcome;
        }
        tokio::time::sleep(50 * MS).await;
    }
}

/// Five nodes without persistence, old enough to vote (a node younger than the longest
/// lease abstains), each behind a proxy; and two locks on them, with `nodes` changed by
/// `nodes_of`.
async fn volatile_nodes_and_two_locks(
    ttl: Duration,
    nodes_of: impl Fn(Nodes) -> Nodes,
) -> (ProxiedCluster, Redlock, Redlock) {
    let options = NodeOptions::default().with_persistence(Persistence::None);
    let cluster = proxied_with(5, options).await;
    let nodes = || nodes_of(Nodes::new(cluster.urls()).unwrap());
    // Until the fresh servers are older than the lease, they abstain: wait it out.
    let probe = Redlock::connect(nodes(), patient(ttl)).await.unwrap();
    eventually("the fresh nodes vote", ttl * 3 + LOAD_MARGIN, || async {
        match probe.try_acquire("warm-up").await {
            Ok(guard) => guard.release().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    let first = redlock_via_on(&cluster, nodes(), patient(ttl)).await;
    let second = redlock_via_on(&cluster, nodes(), patient(ttl)).await;
    (cluster, first, second)
}

/// The restart the Redlock paper's "delayed restarts" guard against: a lock held on
/// exactly a quorum loses one of its keys to a restart without persistence. The restarted
/// node abstains for the longest lease, so no second client forms a quorum with it while
/// the first lock is valid; after the abstention it votes again. (Before restart
/// abstention, the second client got the lock at once: see the test below, which turns
/// the check off.)
#[tokio::test]
async fn a_node_restarted_without_persistence_abstains_and_exclusion_holds() {
    let ttl = Duration::from_secs(2);
    let (mut cluster, first, second) = volatile_nodes_and_two_locks(ttl, |nodes| nodes).await;
    let held = lock_on_first_three(&cluster, &first).await;

    cluster.node_mut(2).restart().await.unwrap(); // comes back empty
    for i in 3..5 {
        cluster.proxy(i).heal().await.unwrap();
    }
    let started = Instant::now();
    while !held.is_expired() {
        match second.try_acquire("stock:42").await {
            Ok(_second) => panic!(
                "a second holder while the first is valid for {:?} more",
                held.validity()
            ),
            Err(err) => assert!(err.is_retryable(), "{err:?}"),
        }
        tokio::time::sleep(50 * MS).await;
    }
    let abstains = second.node_metrics()[2].excluded.clone();
    assert!(
        abstains
            .as_deref()
            .is_some_and(|why| why.contains("abstains")),
        "node 2 after its restart: {abstains:?}"
    );
    eprintln!(
        "node 2 abstained; the first lock expired {:?} after the restart",
        started.elapsed()
    );
    drop(held);
    // Once it is older than the lease, it votes again.
    let next = try_for(&second, ttl * 2 + LOAD_MARGIN).await.unwrap();
    next.release().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// safety.md: with restart abstention turned off, a restart without persistence can break
/// exclusion: the same scenario as above, and another client takes a quorum of its own
/// while the first lock is still valid. Demonstrated, not hidden.
#[tokio::test]
async fn known_limit_without_restart_abstention_a_restart_can_break_exclusion() {
    let ttl = Duration::from_secs(2);
    let (mut cluster, first, second) =
        volatile_nodes_and_two_locks(ttl, |nodes| nodes.restart_abstention(false)).await;
    let held = lock_on_first_three(&cluster, &first).await;

    cluster.node_mut(2).restart().await.unwrap(); // comes back empty
    for i in 3..5 {
        cluster.proxy(i).heal().await.unwrap();
    }
    let overlapping = try_for(&second, Duration::from_secs(1))
        .await
        .expect("with node 2's key gone, nodes 2, 3 and 4 form a second quorum");
    // Both guards are within their validity at the same instant: exclusion is broken.
    assert!(!held.is_expired() && !overlapping.is_expired());
    assert!(held.deadline() > overlapping.acquired_at());
    eprintln!(
        "known limit reproduced: two holders, validity {:?} and {:?}",
        held.validity(),
        overlapping.validity()
    );

    let _ = held.release().await;
    overlapping.release().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// The counterpart: with `appendfsync always`, the restarted node reloads the key and the
/// second client is refused.
#[tokio::test]
async fn a_restart_with_appendfsync_always_keeps_exclusion() {
    let ttl = Duration::from_secs(5);
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let mut cluster = proxied_with(5, options).await;
    let first = redlock_via(&cluster, patient(ttl)).await;
    let second = redlock_via(&cluster, patient(ttl)).await;
    let held = lock_on_first_three(&cluster, &first).await;

    cluster.node_mut(2).restart().await.unwrap(); // reloads its AOF
                                                  // (`restart` returns once INFO answers, which Redis does while still loading.)
    eventually(
        "the key reloaded on node 2",
        Duration::from_secs(2),
        || async {
            match cluster.node(2).get(held.key()).await {
                Ok(value) => {
                    assert_eq!(value.as_deref(), Some(held.token().as_str()));
                    true
                }
                Err(err) => {
                    assert!(err.to_string().contains("loading"), "{err}");
                    false
                }
            }
        },
    )
    .await;
    for i in 3..5 {
        cluster.proxy(i).heal().await.unwrap();
    }
    // Several attempts over a while (the first may meet the broken connection to node 2).
    for _ in 0..5 {
        let err = second.try_acquire("stock:42").await.unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        tokio::time::sleep(50 * MS).await;
    }
    let err = second.try_acquire("stock:42").await.unwrap_err();
    assert!(matches!(err, LockError::Held { .. }), "{err:?}");
    assert!(settled_is_acquired(&held).await);
    held.release().await.unwrap();
    second
        .try_acquire("stock:42")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// The other counterpart: without persistence, a node kept down longer than the TTL before
/// it restarts cannot cause an overlap: the lock it held has expired by then.
#[tokio::test]
async fn a_restart_delayed_past_the_ttl_keeps_exclusion() {
    let ttl = Duration::from_secs(1);
    // The operator's delay alone, without the library's abstention.
    let (mut cluster, first, second) =
        volatile_nodes_and_two_locks(ttl, |nodes| nodes.restart_abstention(false)).await;
    let held = lock_on_first_three(&cluster, &first).await;

    cluster.node_mut(2).kill().await.unwrap();
    tokio::time::sleep(ttl + 100 * MS).await; // the restart waits out the longest TTL
    cluster.node_mut(2).restart().await.unwrap();
    for i in 3..5 {
        cluster.proxy(i).heal().await.unwrap();
    }
    let next = try_for(&second, Duration::from_secs(2)).await.unwrap();
    assert!(held.is_expired());
    assert!(held.deadline() <= next.acquired_at(), "no overlap in time");
    next.release().await.unwrap();
    drop(held);
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// safety.md: "key evicted or flushed on one node, then extend → no resurrection: extend
/// never recreates a key".
#[tokio::test]
async fn a_flushed_key_is_never_resurrected_by_a_refresh() {
    let ttl = Duration::from_secs(2);
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, patient(ttl)).await;
    let mut guard = lock.try_acquire("session:7").await.unwrap();
    let key = guard.key().to_owned();
    held_on_every_node(cluster.cluster(), &guard).await;

    // One node loses the key: the refresh still has a quorum, and does not recreate it.
    cluster.node(1).flush().await.unwrap();
    tokio::time::sleep(700 * MS).await; // the keys' PTTL is now about 1300 ms
    guard.refresh().await.unwrap();
    assert_eq!(
        cluster.node(1).get(&key).await.unwrap(),
        None,
        "resurrected on node 1"
    );
    for i in [0, 2, 3, 4] {
        let pttl = cluster.node(i).pttl(&key).await.unwrap();
        assert!(
            pttl > 1_500,
            "node {i}: extended back to the full TTL, got {pttl} ms"
        );
    }

    // Two more lose it: the refresh fails (a quorum answered "not ours"), recreates nothing,
    // and leaves the deadline alone.
    cluster.node(2).flush().await.unwrap();
    cluster.node(3).flush().await.unwrap();
    let deadline = guard.deadline();
    let err = guard.refresh().await.unwrap_err();
    assert!(matches!(err, LockError::NotHeld { .. }), "{err:?}");
    assert_eq!(tally(&err).refused.len(), 3, "{err}");
    assert_eq!(guard.deadline(), deadline);
    for i in 1..4 {
        assert_eq!(
            cluster.node(i).get(&key).await.unwrap(),
            None,
            "resurrected on node {i}"
        );
    }
    assert!(guard.lost().is_lost());
    assert!(!guard.is_acquired().await.unwrap());
    let _ = guard.release().await;
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// Cuts nodes 0, 1 and 2 off three different ways: crash, freeze, blackhole.
async fn lose_a_majority(cluster: &mut ProxiedCluster) {
    cluster.node_mut(0).kill().await.unwrap();
    cluster.node_mut(1).freeze().await.unwrap();
    cluster.proxy(2).blackhole(true);
}

/// The brief's "majority lost while a lock is held": a manual refresh fails, before the old
/// deadline, with a no-quorum error naming the three nodes and why; the deadline is left
/// alone and, once it passes, refreshing is refused.
#[tokio::test]
async fn losing_a_majority_fails_the_refresh_before_the_deadline() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let urls = cluster.urls();
    let mut guard = lock.try_acquire("leader").await.unwrap();

    lose_a_majority(&mut cluster).await;
    let deadline = guard.deadline();
    let err = guard.refresh().await.unwrap_err();
    let failed_at = Instant::now();
    eprintln!("refresh with 3 of 5 cut off: {err}");
    assert!(
        failed_at < deadline,
        "the refresh failed only after the deadline"
    );
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert_names(&err, &urls[0], is_connection, "a connection failure");
    assert_names(&err, &urls[1], is_timeout, "a timeout");
    assert_names(&err, &urls[2], is_timeout, "a timeout");
    assert_eq!(
        guard.deadline(),
        deadline,
        "a failed refresh leaves the deadline alone"
    );
    let err = guard.is_acquired().await.unwrap_err();
    assert!(
        matches!(err, LockError::NoQuorum { .. }),
        "cannot tell: {err:?}"
    );

    tokio::time::sleep_until(deadline + 10 * MS).await;
    let err = guard.refresh().await.unwrap_err();
    assert!(matches!(err, LockError::Expired { .. }), "{err:?}");
    drop(guard);

    cluster.heal_all().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// safety.md: "majority unreachable during auto-extension → lost-lock signal fires before the
/// old deadline", through the watchdog and through `with()`, which cancels the work.
#[tokio::test]
async fn losing_a_majority_under_auto_extension_signals_the_loss_before_the_deadline() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(
        &cluster,
        chaos_config(ttl)
            .to_builder()
            .retry_count(3)
            .build()
            .unwrap(),
    )
    .await;
    let urls = cluster.urls();

    let mut guard = lock.try_acquire("leader").await.unwrap();
    guard
        .auto_extend(quorumlock::AutoExtend::default())
        .unwrap();
    let lost = guard.lost();
    // `with()`: work that would run forever, cancelled when the lock is lost.
    let scoped = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.with("leader-2", |_lost| async {
                loop {
                    tokio::time::sleep(10 * MS).await;
                }
            })
            .await
        })
    };
    // At least one extension goes through while the nodes are healthy.
    tokio::time::sleep(ttl / 3 + 300 * MS).await;
    assert!(!lost.is_lost());
    assert!(lock.metrics().extended >= 2, "{:?}", lock.metrics());

    let cut_at = Instant::now();
    lose_a_majority(&mut cluster).await;
    let end = tokio::time::timeout(ttl * 2, lost.wait())
        .await
        .expect("the lost signal fired");
    let fired_at = Instant::now();
    // No extension succeeded after the cut, so the guard's deadline is the old deadline.
    let deadline = guard.deadline();
    eprintln!(
        "lost {:?} after the cut, {:?} before the deadline: {end}",
        fired_at - cut_at,
        deadline.saturating_duration_since(fired_at)
    );
    assert!(fired_at < deadline, "the signal fired after the deadline");
    let quorumlock::LeaseEnd::Lost(error) = &end else {
        panic!("expected a lost lease with the refresh error, got {end:?}");
    };
    assert!(matches!(**error, LockError::NoQuorum { .. }), "{error:?}");
    assert_names(error, &urls[0], is_connection, "a connection failure");
    assert_names(error, &urls[1], is_timeout, "a timeout");
    assert_names(error, &urls[2], is_timeout, "a timeout");

    let outcome = tokio::time::timeout(ttl * 2, scoped)
        .await
        .expect("with() returned")
        .unwrap();
    match outcome {
        Err(LockError::Lost { resource, end }) => {
            assert_eq!(resource, "leader-2");
            assert!(matches!(end, quorumlock::LeaseEnd::Lost(_)), "{end:?}");
        }
        other => panic!("expected the work to be cancelled with Lost, got {other:?}"),
    }
    drop(guard);
    cluster.heal_all().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

/// Releases; an unconfirmed release is accepted only when a node failed to answer (a
/// loaded machine can make one miss its timeout), never when every node answered.
async fn release_checked(guard: quorumlock::LockGuard) {
    if let Err(err) = guard.release().await {
        assert!(
            err.tally().is_some_and(|tally| !tally.failures.is_empty()),
            "release failed with every node answering: {err}"
        );
        eprintln!("release not confirmed (a node failed): {err}");
    }
}

/// safety.md: "many clients competing for one resource → one wins each round; random backoff
/// or wake-ups prevent livelock". Twelve clients with their own connections take the lock 4
/// times each, one node jittery; all finish within a bound, never two inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_competing_all_finish_without_livelock() {
    const CLIENTS: usize = 12;
    const ROUNDS: usize = 4;
    let ttl = Duration::from_secs(2);
    let cluster = proxied(5).await;
    cluster
        .proxy(4)
        .set_latency(Direction::Both, 2 * MS, 8 * MS);
    let config = patient(ttl)
        .to_builder()
        .fencing(true)
        .retry_count(400)
        .retry_delay(25 * MS)
        .retry_jitter(20 * MS)
        .build()
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            // The nodes keep no append-only file, and none restarts here.
            Redlock::connect(volatile(cluster.urls()), config.clone())
                .await
                .unwrap(),
        );
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|lock| {
            let inside = Arc::clone(&inside);
            let done = Arc::clone(&done);
            let tokens = Arc::clone(&tokens);
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock
                        .acquire("hot")
                        .await
                        .expect("acquired within the retries");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    tokens.lock().unwrap().push(guard.fencing_token().unwrap());
                    tokio::time::sleep(3 * MS).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    release_checked(guard).await;
                }
            })
        })
        .collect();
    let bound = Duration::from_secs(40);
    for task in tasks {
        tokio::time::timeout_at(started + bound, task)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "livelock: {} of {} done after {bound:?}",
                    done.load(Ordering::SeqCst),
                    CLIENTS * ROUNDS
                )
            })
            .unwrap();
    }
    let took = started.elapsed();
    eprintln!(
        "{} contended acquisitions by {CLIENTS} clients in {took:?}",
        CLIENTS * ROUNDS
    );
    assert_eq!(done.load(Ordering::SeqCst), CLIENTS * ROUNDS);
    // Successive holders got strictly increasing fencing tokens.
    let tokens = tokens.lock().unwrap().clone();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");

    // Simultaneous single attempts: never two winners; split votes are possible (every
    // client then rolls back), which is what the random backoff above resolves.
    let mut rounds_won = 0;
    for round in 0..15 {
        let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS));
        let attempts: Vec<_> = clients
            .iter()
            .cloned()
            .map(|lock| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    lock.try_acquire(&format!("round-{round}")).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for attempt in attempts {
            if let Ok(guard) = attempt.await.unwrap() {
                winners.push(guard);
            }
        }
        assert!(
            winners.len() <= 1,
            "round {round}: {} winners",
            winners.len()
        );
        rounds_won += winners.len();
        for guard in winners {
            release_checked(guard).await;
        }
    }
    eprintln!("simultaneous rounds with a winner: {rounds_won} of 15");
    cluster.proxy(4).heal().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

// ---------------------------------------------------------------------------
// Errors, passwords, and the single-node lock.
// ---------------------------------------------------------------------------

/// Collects every `tracing` event and span field as text.
#[derive(Clone, Default)]
struct Capture(Arc<std::sync::Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        span.record(&mut Fields(&mut self.0.lock().unwrap()));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = self.0.lock().unwrap();
        text.push_str(event.metadata().level().as_str());
        text.push(' ');
        event.record(&mut Fields(&mut text));
        text.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The issue's "errors name the failing nodes and why (refused, timed out, Redis error
/// text); node names in errors, logs and traces never show a password".
#[tokio::test]
async fn errors_name_each_failing_node_and_why_and_never_a_password() {
    const PASSWORD: &str = "chaos-s3cret";
    let capture = Capture::default();
    let dispatch = tracing::Dispatch::new(capture.clone());
    // A second live dispatcher: with only one registered, tracing computes the interest of a
    // callsite first hit on another thread (another test) from that thread's no-op default,
    // and never asks ours.
    let _second = tracing::Dispatch::new(Capture::default());
    let _tracing = tracing::dispatcher::set_default(&dispatch);
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied_with(5, NodeOptions::default().with_password(PASSWORD)).await;
    let urls = cluster.urls();
    assert!(urls.iter().all(|url| url.contains(PASSWORD)));
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let names: Vec<String> = lock.node_names().map(str::to_owned).collect();
    for (name, url) in names.iter().zip(&urls) {
        assert_eq!(name, &quorumlock::backend::redact_url(url));
        assert!(!name.contains(PASSWORD));
    }
    let mut texts = vec![format!("{lock:?}")];

    // Three nodes fail three ways: crashed, unreachable, full (Redis refuses the write).
    cluster.node_mut(0).kill().await.unwrap();
    cluster.proxy(1).partition().await.unwrap();
    node_command(cluster.node(2), &["CONFIG", "SET", "maxmemory", "1"]).await;
    let _ = lock.try_acquire("payment:1").await; // the broken connections notice
    let err = lock.try_acquire("payment:1").await.unwrap_err();
    eprintln!("crashed, unreachable, full: {err}");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert_names(&err, &names[0], is_connection, "a connection failure");
    assert_names(&err, &names[1], is_refused, "connection refused");
    assert_names(
        &err,
        &names[2],
        |e| matches!(e, NodeError::Redis(text) if text.contains("OOM")),
        "the Redis OOM error text",
    );
    texts.push(format!("{err} {err:?}"));

    // Silent nodes time out, and say after how long.
    node_command(cluster.node(2), &["CONFIG", "SET", "maxmemory", "0"]).await;
    cluster.heal_all().await.unwrap();
    warm_up(&lock, cluster.cluster()).await; // every connection fresh again
    node_command(cluster.node(2), &["CONFIG", "SET", "maxmemory", "1"]).await;
    cluster.proxy(3).blackhole(true);
    cluster.node_mut(4).freeze().await.unwrap();
    let err = lock.try_acquire("payment:3").await.unwrap_err();
    eprintln!("full, blackholed, frozen: {err}");
    assert_names(&err, &names[3], is_timeout, "a timeout");
    assert_names(&err, &names[4], is_timeout, "a timeout");
    let timeout = lock.config().node_timeout();
    assert!(
        err.to_string()
            .contains(&format!("timed out after {timeout:?}")),
        "{err}"
    );
    texts.push(format!("{err} {err:?}"));
    node_command(cluster.node(2), &["CONFIG", "SET", "maxmemory", "0"]).await;

    // A wrong password is reported as the node's authentication error, without the password.
    let wrong: Vec<String> = urls
        .iter()
        .map(|url| url.replace(PASSWORD, "wrong-pw"))
        .collect();
    let misconfigured = Redlock::connect(&wrong[..3], chaos_config(ttl))
        .await
        .unwrap();
    let err = misconfigured.try_acquire("payment:4").await.unwrap_err();
    eprintln!("wrong password: {err}");
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    // The error names the failed nodes, each with the authentication error: at least the
    // two that rule out a quorum of three.
    let failed = failures(&err);
    assert!(failed.len() >= 2, "{err}");
    for (_, error) in failed {
        assert!(
            matches!(&error, NodeError::Redis(text) if text.contains("authentication")),
            "{error:?}"
        );
    }
    texts.push(format!("{err} {err:?} {misconfigured:?}"));

    cluster.heal_all().await.unwrap();
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
    let traces = capture.0.lock().unwrap().clone();
    assert!(
        traces.contains("node failed"),
        "traces were captured:\n{traces}"
    );
    texts.push(traces);
    for text in texts {
        assert!(
            !text.contains(PASSWORD) && !text.contains("wrong-pw"),
            "a password leaked:\n{text}"
        );
    }
}

/// The single-node lock under each fault of its one node: a clear error naming the node
/// and why, service back once healed, nothing left behind.
#[tokio::test]
async fn the_single_node_lock_names_its_node_and_the_fault() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(1).await;
    let url = cluster.urls().remove(0);
    let lock = RedisLock::connect(&url, chaos_config(ttl)).await.unwrap();
    warm_up(&lock, cluster.cluster()).await;
    assert_eq!(lock.node_name(), url);

    for fault in [
        "partitioned",
        "blackholed",
        "frozen",
        "killed",
        "full",
        "reset",
    ] {
        match fault {
            "partitioned" => cluster.proxy(0).partition().await.unwrap(),
            "blackholed" => cluster.proxy(0).blackhole(true),
            "frozen" => cluster.node_mut(0).freeze().await.unwrap(),
            "killed" => cluster.node_mut(0).kill().await.unwrap(),
            "full" => node_command(cluster.node(0), &["CONFIG", "SET", "maxmemory", "1"]).await,
            // The lock request: the first command that names the key.
            _ => cluster
                .proxy(0)
                .reset_on("lock:single\r\n", ResetWhen::AfterForwarding),
        }
        let err = lock.try_acquire("single").await.unwrap_err();
        eprintln!("single node {fault}: {err}");
        assert!(
            matches!(err, LockError::NoQuorum { .. }),
            "{fault}: {err:?}"
        );
        let expected: fn(&NodeError) -> bool = match fault {
            "blackholed" | "frozen" => is_timeout,
            "full" => |e| matches!(e, NodeError::Redis(text) if text.contains("OOM")),
            _ => is_connection,
        };
        assert_names(&err, &url, expected, fault);
        if fault == "full" {
            node_command(cluster.node(0), &["CONFIG", "SET", "maxmemory", "0"]).await;
        }
        cluster.heal_all().await.unwrap();
        eventually(
            "the lock back once healed",
            Duration::from_secs(5),
            || async {
                match lock.try_acquire("single").await {
                    Ok(guard) => guard.release().await.is_ok(),
                    Err(_) => false,
                }
            },
        )
        .await;
        // Reset after the SET ran: the rollback deleted the key. Blackholed and frozen: the
        // queued SET and unlock ran in order once healed.
        crate::common::eventually("no key after the fault", Duration::from_secs(2), || async {
            cluster.node(0).keys(LOCK_KEYS).await.unwrap().is_empty()
        })
        .await;
    }

    // A held lock whose node freezes: refresh and release cannot confirm, and say why; the
    // release queued on the frozen node still runs when it wakes.
    let mut guard = lock.try_acquire("single").await.unwrap();
    cluster.node_mut(0).freeze().await.unwrap();
    let err = guard.refresh().await.unwrap_err();
    assert_names(&err, &url, is_timeout, "a timeout");
    let err = guard.release().await.unwrap_err();
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    cluster.node_mut(0).thaw().await.unwrap();
    crate::common::eventually("the queued release ran", Duration::from_secs(2), || async {
        cluster.node(0).keys(LOCK_KEYS).await.unwrap().is_empty()
    })
    .await;
    no_lock_key_outlives_ttl(cluster.cluster(), LOCK_KEYS, ttl).await;
}

// ---------------------------------------------------------------------------
// What a round reports when some nodes fail and others are slow: classification by the
// nodes that answered, each failed node named. Deterministic reproductions of the
// classification bugs docs/chaos.md lists as fixed.
// ---------------------------------------------------------------------------

/// A lock held by a majority, with the other two of five nodes down (a tolerated fault), is
/// reported to a second client as `Held`, not `NoQuorum` ("an infrastructure problem:
/// alert on it"), even when the down nodes fail before the healthy ones answer: two failed
/// nodes alone do not rule out a quorum, so the round hears the holders' refusals.
#[tokio::test]
async fn contention_with_two_nodes_down_is_reported_as_held() {
    let ttl = Duration::from_secs(5);
    let cluster = proxied(5).await;
    let holder = redlock_via(&cluster, chaos_config(ttl)).await;
    let rival = redlock_via(&cluster, chaos_config(ttl)).await;
    let _held = holder.try_acquire("contended").await.unwrap();
    for i in 3..5 {
        cluster.proxy(i).partition().await.unwrap();
    }
    // The healthy nodes answer within the node timeout, just not instantly.
    for i in 0..3 {
        cluster
            .proxy(i)
            .set_latency(Direction::ToClient, 5 * MS, Duration::ZERO);
    }
    for _ in 0..3 {
        let err = rival.try_acquire("contended").await.unwrap_err();
        assert!(
            matches!(err, LockError::Held { .. }),
            "3 of 5 nodes hold the lock and would say so: {err}"
        );
    }
}

/// A failed round's error names every failing node, the one still in flight when the
/// round was decided (here a blackholed one) included, so that an operator reading it
/// learns of each broken node.
#[tokio::test]
async fn a_no_quorum_error_names_every_failing_node() {
    let ttl = Duration::from_secs(2);
    let mut cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let urls = cluster.urls();
    cluster.node_mut(0).kill().await.unwrap();
    cluster.proxy(1).partition().await.unwrap();
    cluster.proxy(2).partition().await.unwrap();
    cluster.proxy(3).blackhole(true);
    let _ = lock.try_acquire("everything").await;
    let err = lock.try_acquire("everything").await.unwrap_err();
    for url in &urls[0..4] {
        assert_names(&err, url, |_| true, "a failure");
    }
}

/// A refresh that one node answered "not ours" (its key was flushed) while two others were
/// merely slow is `NoQuorum` (not confirmed), not `NotHeld`, and leaves the lease alive:
/// four of five nodes still hold the token, and a lock is gone only when a quorum
/// *refused*, not when a quorum *answered* (here 2 grants and 1 refusal).
#[tokio::test]
async fn slow_nodes_do_not_make_a_held_lock_look_lost() {
    let ttl = Duration::from_secs(2);
    let cluster = proxied(5).await;
    let lock = redlock_via(&cluster, chaos_config(ttl)).await;
    let mut guard = lock.try_acquire("lease").await.unwrap();
    held_on_every_node(cluster.cluster(), &guard).await;
    cluster.node(0).flush().await.unwrap();
    for i in 1..3 {
        cluster
            .proxy(i)
            .set_latency(Direction::ToClient, 200 * MS, Duration::ZERO);
    }
    let err = guard.refresh().await.unwrap_err();
    assert!(
        matches!(err, LockError::NoQuorum { .. }),
        "one refusal, two timeouts, two grants: the lock cannot be confirmed, not gone: {err}"
    );
    assert!(!guard.lost().is_lost(), "the lease was ended as lost");
}
