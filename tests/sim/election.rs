//! Leader election's logic: one leader at a time with strictly increasing tokens,
//! observers that follow the terms, a leader dropped, and a leader cut off past its TTL by
//! a frozen majority. (`tests/servers/election.rs` checks an election on a real Redis, and
//! a frozen node that, once thawed, runs what reached it while it was stopped: the
//! simulated node's `lose_replies` loses those requests instead.)

use std::time::Duration;

use futures::StreamExt;
use quorumlock::sim::SimCluster;
use quorumlock::{ConfigError, Election, LeaseEnd, LockConfig, LockError};
use tokio::time::Instant;

use crate::support::{client, cluster, config, spawn_timed, TTL};

/// How often observers ask who leads.
const OBSERVE_EVERY: Duration = Duration::from_millis(20);

/// The retry delay of a campaign, exact (no jitter), so that every run is the same.
const RETRY_DELAY: Duration = Duration::from_millis(20);

/// How long a waiting candidate's lock's own attempts last: 1 + 5 (a plain one and a
/// queued one at once, then four more a [`RETRY_DELAY`] apart) run out after 80 ms. A
/// campaign stays in line past them
/// (`a_candidate_waits_in_line_for_as_long_as_it_campaigns`).
const IN_LINE: Duration = Duration::from_millis(80);

/// When the tests hand over to a waiting candidate, after its start.
const HAND_OVER: Duration = Duration::from_millis(50);

/// The test config with fencing (the simulated nodes keep their counters: the tests do
/// not restart them) and retries a waiting candidate can follow closely.
fn fenced(ttl: Duration) -> LockConfig {
    config(ttl)
        .to_builder()
        .fencing(true)
        .retry_count(5)
        .retry_delay(RETRY_DELAY)
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
}

/// A candidate of its own (its own lock client, as in a process of its own).
fn election(cluster: &SimCluster, name: &str, ttl: Duration) -> Election {
    let lock = client(cluster, name, fenced(ttl));
    Election::new(lock, "billing")
        .unwrap()
        .observe_every(OBSERVE_EVERY)
}

/// On how many nodes a line of waiters is at `queue`.
fn in_line(cluster: &SimCluster, queue: &str) -> usize {
    cluster
        .nodes()
        .iter()
        .filter(|node| node.keys().iter().any(|key| key == queue))
        .count()
}

#[tokio::test(start_paused = true)]
async fn one_leader_at_a_time_with_increasing_tokens_and_observers_follow() {
    let cluster = cluster(5);
    let first = election(&cluster, "host-a", TTL);
    let second = election(&cluster, "host-b", TTL);
    let mut changes = Box::pin(second.observe());
    assert_eq!(
        changes.next().await.unwrap().unwrap(),
        None,
        "nobody leads yet"
    );

    let leading = first.campaign("host-a").await.unwrap();
    let started = Instant::now();
    let seen = changes.next().await.unwrap().unwrap().expect("a leader");
    assert_eq!(seen, *leading.leader());
    assert!(
        started.elapsed() <= OBSERVE_EVERY,
        "seen {:?} after the election",
        started.elapsed()
    );
    assert_eq!(
        second.leader().await.unwrap().as_ref(),
        Some(leading.leader())
    );

    // The second candidate waits while the first leads, until its timeout: it gives up
    // as soon as its next attempt would come at or past the deadline, one retry delay
    // before it.
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let waiting = second.campaign_timeout("host-b", timeout).await;
    assert!(
        matches!(waiting, Err(LockError::TimedOut { .. })),
        "{waiting:?}"
    );
    assert_eq!(started.elapsed(), timeout - RETRY_DELAY, "gave up then");

    // It left the line as it gave up; the next candidate waits in it.
    let queue = format!("quorumlock:waiters:{}", leading.guard().key());
    assert_eq!(
        in_line(&cluster, &queue),
        0,
        "the candidate that gave up is in line"
    );
    let candidate = {
        let second = second.clone();
        spawn_timed(async move { second.campaign("host-b").await })
    };
    tokio::time::sleep(HAND_OVER).await;
    assert!(!candidate.is_finished(), "elected beside a leader");
    assert_eq!(in_line(&cluster, &queue), 5, "the candidate waits in line");
    let old_token = leading.fencing_token();
    let resigned_at = Instant::now();
    leading.resign().await.unwrap();
    let (elected_at, next) = candidate.await.unwrap();
    let next = next.unwrap();
    assert!(next.fencing_token() > old_token);
    // The waiter in line is woken by the release, not by its retry delay.
    assert_eq!(
        elected_at,
        resigned_at,
        "elected {:?} after the resignation",
        elected_at - resigned_at
    );
    // The observer reports the end of the first term or goes straight to the next one.
    let mut report = changes.next().await.unwrap().unwrap();
    if report.is_none() {
        report = changes.next().await.unwrap().unwrap();
    }
    assert_eq!(report.as_ref(), Some(next.leader()));
    next.resign().await.unwrap();
    assert_eq!(first.leader().await.unwrap(), None);
}

/// A candidate stays in the lock's line for as long as it campaigns, not only while its
/// lock's own attempts last ([`IN_LINE`]): a resignation long after they ran out still
/// finds it in line, and elects it at that instant. (Before, the campaign left the line
/// each time its attempts ran out and joined again a retry delay later; a resignation in
/// that gap was announced to nobody, and served a retry delay late.)
#[tokio::test(start_paused = true)]
async fn a_candidate_waits_in_line_for_as_long_as_it_campaigns() {
    let cluster = cluster(5);
    let first = election(&cluster, "host-a", TTL);
    let second = election(&cluster, "host-b", TTL);
    let leading = first.campaign("host-a").await.unwrap();
    let queue = format!("quorumlock:waiters:{}", leading.guard().key());
    let candidate = spawn_timed(async move { second.campaign("host-b").await });
    // Every millisecond over six times the attempts' span: always in line on every node.
    for _ in 0..6 * IN_LINE.as_millis() {
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(in_line(&cluster, &queue), 5, "the candidate left the line");
    }
    assert!(!candidate.is_finished(), "elected beside a leader");
    let resigned_at = Instant::now();
    leading.resign().await.unwrap();
    let (elected_at, next) = candidate.await.unwrap();
    assert_eq!(
        elected_at,
        resigned_at,
        "elected {:?} after the resignation",
        elected_at - resigned_at
    );
    assert_eq!(next.unwrap().value(), "host-b");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leader_hands_over_at_once() {
    let cluster = cluster(5);
    let first = election(&cluster, "host-a", TTL);
    let second = election(&cluster, "host-b", TTL);
    let leading = first.campaign("host-a").await.unwrap();
    let candidate = spawn_timed(async move { second.campaign("host-b").await });
    tokio::time::sleep(HAND_OVER).await;
    assert!(!candidate.is_finished(), "elected beside a leader");
    let queue = format!("quorumlock:waiters:{}", leading.guard().key());
    assert_eq!(in_line(&cluster, &queue), 5, "the candidate waits in line");
    let dropped_at = Instant::now();
    drop(leading); // a crash in the leader's task: resigned in the background
    let (elected_at, next) = candidate.await.unwrap();
    // Long before the 10 s TTL: at the release.
    assert_eq!(
        elected_at,
        dropped_at,
        "elected {:?} after the drop",
        elected_at - dropped_at
    );
    assert_eq!(next.unwrap().value(), "host-b");
}

#[tokio::test(start_paused = true)]
async fn a_leader_cut_off_past_its_ttl_is_told_before_the_next_is_elected() {
    let cluster = cluster(5);
    let ttl = Duration::from_millis(1000);
    let first = election(&cluster, "host-a", ttl);
    let second = election(&cluster, "host-b", ttl);
    let leading = first.campaign("host-a").await.unwrap();
    let lost = leading.lost();
    let deadline_then = leading.deadline();

    // A majority freezes for longer than the TTL: no extension can be confirmed.
    for i in 0..3 {
        cluster.node(i).lose_replies(true);
    }
    let candidate = tokio::spawn(async move {
        let leadership = second.campaign("host-b").await.unwrap();
        (Instant::now(), leadership)
    });
    let end = tokio::time::timeout(Duration::from_secs(3), lost.wait())
        .await
        .expect("the lost signal fires");
    let lost_at = Instant::now();
    assert!(matches!(end, LeaseEnd::Lost(_)), "{end}");
    // The last deadline an extension confirmed: the term was guaranteed until then.
    let last_deadline = leading.deadline();
    assert!(last_deadline >= deadline_then);
    assert!(
        lost_at <= last_deadline,
        "fired {:?} after the last extended deadline",
        lost_at - last_deadline
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !candidate.is_finished(),
        "elected while the majority is frozen"
    );
    for i in 0..3 {
        cluster.node(i).lose_replies(false);
    }
    let (elected_at, next) = candidate.await.unwrap();
    assert!(
        lost_at < elected_at,
        "the old leader knew before the new one was elected"
    );
    assert!(
        elected_at > last_deadline,
        "elected within the old term's guarantee"
    );
    assert!(next.fencing_token() > leading.fencing_token());
}

#[tokio::test(start_paused = true)]
async fn bad_settings_and_values_are_refused() {
    let cluster = cluster(1);
    let unfenced = client(&cluster, "unfenced", config(TTL));
    let error = Election::new(unfenced, "billing").unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Config(ConfigError::FencingRequired { .. })
        ),
        "{error}"
    );
    let candidate = election(&cluster, "candidate", TTL);
    let long = "x".repeat(Election::MAX_VALUE_LEN + 1);
    let error = candidate.campaign(&long).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Config(ConfigError::LeaderValueTooLong { .. })
        ),
        "{error}"
    );
    let fenced_lock = client(&cluster, "fenced", fenced(TTL));
    assert!(matches!(
        Election::new(fenced_lock, "").unwrap_err(),
        LockError::InvalidResource { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_record_counts_only_while_its_term_holds_the_lock() {
    let cluster = cluster(3);
    let candidate = election(&cluster, "candidate", TTL);
    candidate
        .campaign("host-a")
        .await
        .unwrap()
        .resign()
        .await
        .unwrap();
    // The next holder of the lock has not recorded anything yet (it is between winning
    // and proclaiming): the old record, still on the nodes, is not its.
    let plain = client(&cluster, "plain", fenced(TTL));
    let holder = plain.try_acquire("billing").await.unwrap();
    let record = format!("quorumlock:leader:{}", holder.key());
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert!(
            node.keys().contains(&record),
            "node {i}: the old record is gone"
        );
    }
    assert_eq!(candidate.leader().await.unwrap(), None);
    holder.release().await.unwrap();
}
