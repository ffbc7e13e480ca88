//! The quorum coordinator: the Redlock algorithm over a set of [`LockNode`]s.
//!
//! Both public lock kinds run on it: [`Redlock`](crate::Redlock) with N nodes and
//! [`RedisLock`](crate::RedisLock) with one (a quorum of one). Each operation is a *round*:
//! the same command sent to every node at once, each reply bounded by the per-node timeout,
//! and the replies counted until the outcome is decided.
//!
//! Time comes from `tokio::time::Instant`, a monotonic clock that tokio lets tests pause
//! and advance, so the same code runs on a simulated timeline.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::{micros, millis, LockConfig};
use crate::error::{LockError, NodeError, NodeFailure, Tally};
use crate::fencing;
use crate::guard::LockGuard;
use crate::handoff::{LocalQueues, ReleaseWatches};
use crate::lease::Lease;
use crate::metrics::{Counters, NodeMetrics};
use crate::node::{LockNode, QueuePlace};
use crate::observe::{self, Observed};
use crate::resource::{Keys, Resources};
use crate::retry::retry_wait;
use crate::round::Round;
use crate::token::LockToken;

/// The nodes of a lock, shared by every lock instance derived from the same connections.
pub(crate) type NodeSet = Arc<[Arc<dyn LockNode>]>;

/// The Redlock algorithm over a fixed set of nodes with one configuration.
pub(crate) struct Coordinator {
    nodes: NodeSet,
    counters: Arc<Counters>,
    /// Per-node counters, the failing-node warnings and the metrics handles.
    observed: Arc<Observed>,
    queues: Arc<LocalQueues>,
    /// This client's id in the nodes' queues: the nodes announce the keys they reserve for
    /// its waiters on a channel of its own (see [`QueuePlace::waiter`]).
    client: Arc<str>,
    /// The announcements of those reservations, watched from the first queued wait on.
    reservations: Arc<tokio::sync::OnceCell<Option<ReleaseWatches>>>,
    config: LockConfig,
    quorum: usize,
}

/// The command a round sends to every node.
#[derive(Debug, Clone)]
enum Command {
    Lock(Duration),
    /// With the waiter's interest in announcements.
    LockWatching(Duration, Duration),
    LockQueued(Duration, Arc<QueuePlace>),
    Unlock,
    Extend(Duration),
    Holds,
}

/// How an attempt asks the nodes for the lock.
#[derive(Debug, Clone, Copy)]
enum Asking<'a> {
    /// Plainly: `try_acquire`, and a blocking acquisition's first attempt.
    Plain,
    /// As a waiter that races for the lock and watches its releases: a refusal also asks
    /// the node to announce the next release, for this long.
    Watching(Duration),
    /// As a queued waiter, in its place.
    Queued(&'a Arc<QueuePlace>),
}

/// How long a round waits for replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Until a quorum agreed or can no longer agree; stragglers are not awaited.
    UntilDecided,
    /// Until every node answered or timed out.
    ForEveryNode,
}

/// What one node answered to a lock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// It took our keys.
    Granted,
    /// It answered no, and took nothing.
    Refused,
    /// It failed or did not answer in time: it may or may not have taken them.
    Failed,
}

/// The requests of a lock, unlock, extend or holds round still waiting for an answer.
type InFlight = Round<bool>;

impl Coordinator {
    /// A coordinator over `nodes`, which must be non-empty and have distinct names.
    pub(crate) fn new(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        Self::with_counters(nodes, config, Arc::default())
    }

    /// [`new`](Self::new), counting into `counters`, which the nodes may share.
    pub(crate) fn with_counters(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
        counters: Arc<Counters>,
    ) -> Result<Self, LockError> {
        if nodes.is_empty() {
            return Err(LockError::InvalidNode {
                node: "(none)".to_owned(),
                reason: "a lock needs at least one node".to_owned(),
            });
        }
        for (i, node) in nodes.iter().enumerate() {
            if nodes[..i]
                .iter()
                .any(|earlier| earlier.name() == node.name())
            {
                return Err(LockError::InvalidNode {
                    node: node.name().to_owned(),
                    reason: "listed twice; the nodes of a quorum must be independent servers"
                        .to_owned(),
                });
            }
        }
        let quorum = nodes.len() / 2 + 1;
        Ok(Coordinator {
            observed: Arc::new(Observed::new(&nodes)),
            nodes: nodes.into(),
            counters,
            queues: Arc::default(),
            client: LockToken::generate().as_str().into(),
            reservations: Arc::default(),
            config,
            quorum,
        })
    }

    /// A coordinator over Redis nodes for `clients` (named without credentials), connected
    /// and checked at once (see [`connect_checked`](crate::node::connect_checked)), the
    /// nodes counting into the coordinator's counters.
    pub(crate) async fn connected(
        clients: Vec<(String, redis::Client)>,
        config: LockConfig,
    ) -> Result<Self, LockError> {
        let counters = Arc::default();
        let nodes = crate::node::connect_checked(clients, &config, &counters)
            .await?
            .into_iter()
            .map(|node| Arc::new(node) as Arc<dyn LockNode>)
            .collect();
        Self::with_counters(nodes, config, counters)
    }

    /// The same nodes with another configuration.
    pub(crate) fn with_config(&self, config: LockConfig) -> Self {
        Coordinator {
            nodes: Arc::clone(&self.nodes),
            counters: Arc::clone(&self.counters),
            observed: Arc::clone(&self.observed),
            queues: Arc::clone(&self.queues),
            client: Arc::clone(&self.client),
            reservations: Arc::clone(&self.reservations),
            config,
            quorum: self.quorum,
        }
    }

    pub(crate) fn config(&self) -> &LockConfig {
        &self.config
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn nodes(&self) -> &[Arc<dyn LockNode>] {
        &self.nodes
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn node_metrics(&self) -> Vec<NodeMetrics> {
        self.observed.snapshot()
    }

    /// Whether `other` runs on the very same node connections.
    pub(crate) fn shares_nodes_with(&self, other: &Coordinator) -> bool {
        Arc::ptr_eq(&self.nodes, &other.nodes)
    }

    /// One acquisition round: the lock is ours only if a quorum granted it and validity is
    /// left after the time the round took and the drift allowance. On any failure the
    /// nodes are unlocked again, all of them, before this returns.
    pub(crate) async fn try_acquire(
        self: &Arc<Self>,
        resources: &[&str],
    ) -> Result<LockGuard, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            resource = tracing::field::Empty,
            attempts = 1,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = async {
            let resources = Resources::new(&self.config, resources)?;
            span.record("resource", resources.name.as_str());
            self.attempt(&resources, Asking::Plain).await
        }
        .instrument(span.clone())
        .await;
        self.acquisition_ended(&span, &result, started);
        result
    }

    /// Notes how an acquisition ended: on its span, and in the metrics.
    fn acquisition_ended(
        &self,
        span: &tracing::Span,
        result: &Result<LockGuard, LockError>,
        started: Instant,
    ) {
        let outcome = observe::acquire_outcome(result);
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        {
            self.observed.meters.acquisition(outcome);
            if result.is_ok() {
                self.observed
                    .meters
                    .acquire_wait
                    .record(started.elapsed().as_secs_f64());
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = started;
    }

    /// One round over already validated resources; see [`try_acquire`](Self::try_acquire).
    /// A waiter's attempt says how it waits (see [`Asking`]).
    async fn attempt(
        self: &Arc<Self>,
        resources: &Resources,
        asking: Asking<'_>,
    ) -> Result<LockGuard, LockError> {
        let resource = resources.name.as_str();
        let keys = Arc::clone(&resources.keys);
        let token = LockToken::generate();
        let waiter = match asking {
            Asking::Queued(place) => Some(place.waiter.clone()),
            Asking::Plain | Asking::Watching(_) => None,
        };
        // If this future is dropped mid-round, the nodes that said yes are unlocked in the
        // background instead of holding the key for a whole TTL (and the waiter leaves the
        // queues after that, so no request of this round can queue it again).
        let mut cleanup = UnlockOnDrop::new(
            Arc::clone(self),
            Arc::clone(&keys),
            token.clone(),
            waiter.clone(),
        );

        Counters::bump(&self.counters.attempts);
        let started = Instant::now();
        let ttl = self.config.ttl();
        let command = match asking {
            Asking::Plain => Command::Lock(ttl),
            Asking::Watching(interest) => Command::LockWatching(ttl, interest),
            Asking::Queued(place) => Command::LockQueued(ttl, Arc::clone(place)),
        };
        let mut in_flight = self.send(command, &keys, &token);
        let mut tally = self.empty_tally();
        let mut answers = vec![None; self.nodes.len()];
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut answers)
            .await;
        if !tally.has_quorum() {
            // Hear every node out before unlocking: the error then names every failed node
            // and tells contention from an outage, and each node's SET has been answered
            // (or has timed out) before its unlock is sent, so the unlock cannot overtake it.
            self.collect(&mut tally, &mut in_flight, Wait::ForEveryNode, &mut answers)
                .await;
        }
        let (granted, refused, failed) = (tally.granted, tally.refused.len(), tally.failures.len());
        // Kept for the guard, so that a holder can tell a quorum reached with nodes failing.
        let won = tally.has_quorum().then(|| tally.clone());
        let error = match self.confirm(resource, &keys, tally, started).await {
            Ok((deadline, fencing_token)) => {
                cleanup.disarm();
                Counters::bump(&self.counters.acquired);
                // The tally: with `failed` > 0 the lock was won with less fault tolerance
                // left (each failing node is also warned about, rate-limited).
                tracing::debug!(
                    resource,
                    nodes = self.nodes.len(),
                    quorum = self.quorum,
                    granted,
                    refused,
                    failed,
                    elapsed_us = micros(started.elapsed()),
                    validity_ms = millis(deadline.saturating_duration_since(Instant::now())),
                    fencing_token,
                    "lock acquired"
                );
                // The lock requests still in flight go out when polled: on nodes that
                // answer, each is then queued on its open connection, and lands before the
                // release's unlock on the same connection, awaited or not (the node keeps
                // a dropped request until its answer). Only when some node may not have
                // sent its request yet (still connecting) do they need a task to drive them,
                // and the release must tell that task what its unlocks found. A queued
                // winner always keeps one (see below).
                if waiter.is_none() {
                    drain_ready(&mut in_flight);
                }
                let settle_late_sets = !in_flight.is_empty()
                    && (waiter.is_some() || !self.all_send_when_polled(&in_flight));
                let lease = Lease::new(Arc::clone(self), resource, keys, token, started, deadline)
                    .with_fencing_token(fencing_token)
                    .with_tally(won.unwrap_or_default())
                    .tracking_unlocks(settle_late_sets);
                let guard = LockGuard::new(lease);
                // A queued waiter that won leaves the queues of the nodes that did not grant
                // it the lock; it could otherwise be picked there for a reservation later.
                let refused_by: Vec<usize> = match waiter {
                    Some(_) => (0..self.nodes.len())
                        .filter(|&index| {
                            matches!(answers[index], Some(Answer::Refused | Answer::Failed))
                        })
                        .collect(),
                    None => Vec::new(),
                };
                if settle_late_sets || !refused_by.is_empty() {
                    let stragglers = Stragglers {
                        in_flight,
                        lease: Arc::clone(guard.lease()),
                        waiter,
                        refused_by,
                    };
                    spawn_detached(Arc::clone(self).finish_stragglers(stragglers));
                }
                return Ok(guard);
            }
            Err(error) => error,
        };
        // Requests not yet sent are not sent at all; the rollback below covers the rest.
        drop(in_flight);
        match &error {
            LockError::Held { .. } => Counters::bump(&self.counters.contended),
            LockError::NoQuorum { .. } => Counters::bump(&self.counters.no_quorum),
            LockError::ValidityExhausted { .. } => {
                Counters::bump(&self.counters.validity_exhausted)
            }
            _ => {}
        }
        tracing::debug!(resource, %error, "lock not acquired; unlocking the nodes");
        // Unlock every node that may hold our keys: those that granted them, and those that
        // failed or timed out, whose SET may have landed even though the reply was lost. A
        // node that answered no took nothing (each lock command is atomic), so under plain
        // contention there is nothing to undo. A queued waiter stays in the queues.
        let may_hold: Vec<usize> = (0..self.nodes.len())
            .filter(|&index| answers[index] != Some(Answer::Refused))
            .collect();
        if !may_hold.is_empty() {
            let mut in_flight = self.send_to(Command::Unlock, &keys, &token, may_hold);
            let mut tally = self.empty_tally();
            self.collect(&mut tally, &mut in_flight, Wait::ForEveryNode, &mut [])
                .await;
        }
        cleanup.disarm();
        Err(error)
    }

    /// Lets the `SET`s still in flight when a quorum granted the lock finish, so the lock
    /// ends up on every node that answers, not on a bare quorum. A `SET` that lands after
    /// the lease was released (a node still connecting, its request queued behind the
    /// release) is undone on that node.
    ///
    /// It holds the lease itself, not a weak reference: a guard released with
    /// `release().await` is gone by the time such a late `SET` lands, and the `SET` must
    /// still be undone. A guard dropped with `auto_release` off never ends its lease, so its
    /// late `SET`s stay, like the rest of its keys, until the TTL.
    ///
    /// A queued waiter also leaves the queue of each node that did not grant it the lock,
    /// once that node answered.
    async fn finish_stragglers(self: Arc<Self>, stragglers: Stragglers) {
        let Stragglers {
            mut in_flight,
            lease,
            waiter,
            refused_by,
        } = stragglers;
        let timeout = self.config.node_timeout();
        let leave = |index: usize| {
            let node = Arc::clone(&self.nodes[index]);
            let keys = Arc::clone(&lease.keys);
            let waiter = waiter.clone();
            async move {
                if let Some(waiter) = waiter {
                    let _ = tokio::time::timeout(timeout, node.leave_queue(&keys, &waiter)).await;
                }
            }
        };
        futures::future::join_all(refused_by.into_iter().map(leave)).await;
        while let Some((index, reply, _)) = in_flight.next().await {
            if !matches!(reply, Ok(true)) {
                leave(index).await;
                continue;
            }
            if lease.state().end.is_none() {
                continue;
            }
            // The release's own unlock, sent after this SET on the same connection, deleted
            // the keys in the usual case; undo the SET only where it did not.
            if let Some(unlocks) = &lease.unlocks {
                if unlocks.deleted_on(index, timeout).await {
                    continue;
                }
            }
            let node = Arc::clone(&self.nodes[index]);
            let _ = tokio::time::timeout(timeout, node.unlock(&lease.keys, &lease.token)).await;
        }
    }

    /// Turns a lock round's tally into a lease: a quorum must have granted the lock, the
    /// fencing token (when enabled) must have been minted, and validity must be left after
    /// both. Returns the deadline and the fencing token.
    async fn confirm(
        &self,
        resource: &str,
        keys: &Keys,
        tally: Tally,
        started: Instant,
    ) -> Result<(Instant, Option<u64>), LockError> {
        if !tally.has_quorum() {
            return Err(self.refusal(resource, tally));
        }
        let fencing_token = if self.config.fencing() {
            Some(self.mint_fencing_token(resource, keys).await?)
        } else {
            None
        };
        let now = Instant::now();
        match self.config.deadline_from(started) {
            Some(deadline) if deadline > now => Ok((deadline, fencing_token)),
            _ => Err(LockError::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed: now.saturating_duration_since(started),
                ttl: self.config.ttl(),
            }),
        }
    }

    /// Mints the next fencing token of `keys` as a quorum max-register: reads the counters
    /// from a majority, then raises it to `max + 1` on a majority. Any two majorities
    /// overlap, so the next holder reads at least this token and mints a larger one. (One
    /// INCR per node with the maximum taken is not monotonic across different majorities.)
    async fn mint_fencing_token(&self, resource: &str, keys: &Keys) -> Result<u64, LockError> {
        let counters: Keys = keys
            .iter()
            .map(|key| Arc::from(fencing::counter_key(key)))
            .collect();
        let reads = self
            .counter_round(&counters, |node, counters| async move {
                node.read_counter(&counters).await
            })
            .await;
        let highest = reads.map_err(|tally| self.counter_failure(resource, tally))?;
        // Lua scripts count in doubles: past 2^53 a counter could no longer grow exactly.
        let next = highest.saturating_add(1);
        if next > fencing::MAX_TOKEN {
            return Err(LockError::FencingExhausted {
                resource: resource.to_owned(),
                highest,
            });
        }
        // A node already above `next` holds a minority write of a failed mint; it still
        // stores at least `next`, which is all the argument needs.
        self.counter_round(&counters, move |node, counters| async move {
            node.raise_counter(&counters, next).await
        })
        .await
        .map_err(|tally| self.counter_failure(resource, tally))?;
        Ok(next)
    }

    /// Sends a counter request to every node and waits for a quorum of answers; returns the
    /// highest value answered, or the tally when a quorum did not answer.
    async fn counter_round<F, R>(&self, counters: &Keys, request: F) -> Result<u64, Tally>
    where
        F: Fn(Arc<dyn LockNode>, Keys) -> R,
        R: std::future::Future<Output = Result<u64, NodeError>> + Send + 'static,
    {
        let mut in_flight = self.fan_out(|node| request(node, Arc::clone(counters)));
        let mut tally = self.empty_tally();
        let mut highest = 0;
        while let Some((index, reply, _)) = in_flight.next().await {
            match reply {
                Ok(value) => {
                    tally.granted += 1;
                    highest = highest.max(value);
                }
                Err(error) => self.record_failure(&mut tally, index, error),
            }
            if tally.granted >= self.quorum {
                return Ok(highest);
            }
            if tally.granted + in_flight.len() < self.quorum {
                break;
            }
        }
        Err(tally)
    }

    fn counter_failure(&self, resource: &str, tally: Tally) -> LockError {
        tracing::warn!(resource, %tally, "fencing token not minted");
        LockError::NoQuorum {
            resource: resource.to_owned(),
            tally,
        }
    }

    /// Attempts until one succeeds, a non-retryable error occurs, the retries run out, or
    /// the optional `deadline` passes; waits a jittered delay between attempts.
    ///
    /// An attempt still running at the deadline is abandoned (its keys are unlocked in the
    /// background) and [`LockError::TimedOut`] returned. A wait that would end past the
    /// deadline is not started: the last attempt's error is returned at once instead.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        resources: &[&str],
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            resource = tracing::field::Empty,
            attempts = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self
            .acquire_in(resources, deadline, &span)
            .instrument(span.clone())
            .await;
        self.acquisition_ended(&span, &result, started);
        result
    }

    /// [`acquire`](Self::acquire), noting the resource and the attempts on `span`.
    async fn acquire_in(
        self: &Arc<Self>,
        resources: &[&str],
        deadline: Option<Instant>,
        span: &tracing::Span,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let validated = Resources::new(&self.config, resources)?;
        span.record("resource", validated.name.as_str());
        let mut attempts: u64 = 0;
        let keys = &validated.keys;
        let timed_out = |last: Option<LockError>| LockError::TimedOut {
            resource: validated.name.clone(),
            waited: started.elapsed(),
            last: last.map(Box::new),
        };
        // Blocking acquisitions of the same resources in this process take turns, so they
        // never split each other's votes; the turn ends when this function returns. One
        // that finds nobody waiting here tries first and takes a turn only once it has to
        // wait: an uncontended lock never touches the turns.
        let take_turn = || async {
            match deadline {
                None => Ok(self.queues.turn(keys).await),
                Some(deadline) => tokio::time::timeout_at(deadline, self.queues.turn(keys))
                    .await
                    .map_err(|_| ()),
            }
        };
        let mut turn = None;
        if self.queues.has_waiters(keys) {
            turn = Some(take_turn().await.map_err(|()| timed_out(None))?);
        }
        let mut retries_left = self.config.retry_count();
        // This acquisition's place in the nodes' queues, made when it first queues (most
        // acquisitions never do). Its ticket is when the acquisition began, so it queues
        // behind every waiter that began before it.
        let fair = self.config.fair();
        let began = std::time::SystemTime::now();
        let mut place: Option<Arc<QueuePlace>> = None;
        let mut queued: Option<LeaveQueueOnDrop> = None;
        // Announcements of the keys reserved for this waiter (fair) or of the key's releases.
        let mut turns: Option<ReleaseWatches> = None;
        let mut releases: Option<ReleaseWatches> = None;
        if fair && self.queues.recently_contended(keys) {
            // Found held moments ago: expect to wait, and queue on the first attempt.
            let made = place.insert(Arc::new(self.queue_place(began)));
            turns = self.reservation_watches().await;
            queued = Some(self.leave_queue_on_drop(keys, made));
        }
        let mut last_error: Option<LockError> = None;
        // Wake-ups this acquisition lost to another waiter; widens its spread.
        let mut collisions = 0;
        let outcome = loop {
            if let Some(releases) = &mut releases {
                releases.mark_seen();
            }
            let attempt_started = Instant::now();
            attempts += 1;
            span.record("attempts", attempts);
            // The first attempt is a plain one, the same as an uncontended lock takes; every
            // later one queues (or refreshes the place) when refused.
            let queued_place = queued.as_ref().and(place.clone());
            let asking = match (&queued_place, &releases) {
                (Some(place), _) => Asking::Queued(place),
                (None, Some(_)) => Asking::Watching(self.waiter_interest()),
                (None, None) => Asking::Plain,
            };
            let attempt = match deadline {
                None => self.attempt(&validated, asking).await,
                Some(deadline) => {
                    let attempt = self.attempt(&validated, asking);
                    tokio::time::timeout_at(deadline, attempt)
                        .await
                        .unwrap_or_else(|_| Err(timed_out(last_error.take())))
                }
            };
            match attempt {
                Err(error) if error.is_retryable() && retries_left > 0 => {
                    let wait = retry_wait(&self.config, &mut rand::rng());
                    let wakes = Instant::now().checked_add(wait);
                    if deadline.is_some_and(|deadline| wakes.is_none_or(|wakes| wakes >= deadline))
                    {
                        break Err(error);
                    }
                    retries_left -= 1;
                    let held = matches!(error, LockError::Held { .. });
                    if held {
                        self.queues.note_contended(keys);
                        if turn.is_none() {
                            match take_turn().await {
                                Ok(taken) => turn = Some(taken),
                                Err(()) => break Err(timed_out(Some(error))),
                            }
                        }
                    }
                    if held && fair && queued.is_none() {
                        let place = place.get_or_insert_with(|| Arc::new(self.queue_place(began)));
                        // Join the line: watch for the reservation first, so that none is
                        // missed, then queue with an attempt at once (without announcements
                        // to wake it, with the next attempt, after the usual wait). From now
                        // on this acquisition has a place to give back when it ends without
                        // the lock, however it ends (an error, a timeout, this future
                        // dropped).
                        turns = self.reservation_watches().await;
                        queued = Some(self.leave_queue_on_drop(keys, place));
                        if turns.is_some() {
                            last_error = Some(error);
                            continue;
                        }
                    }
                    if held && !fair && releases.is_none() && self.config.notify_releases() {
                        // Only now, once contended: an uncontended lock never subscribes.
                        // A lock over several resources watches the first: its release
                        // announces every key, the first among them. A release announced
                        // before the subscription was confirmed would be missed, so the
                        // next attempt follows at once instead of after a wait.
                        releases = ReleaseWatches::start(&self.nodes, &keys[0], self.quorum).await;
                        if releases.is_some() {
                            last_error = Some(error);
                            continue;
                        }
                    }
                    let round = attempt_started.elapsed();
                    match (&mut turns, &queued_place, &mut releases) {
                        (Some(turns), Some(place), _) if held => {
                            let grace = round.max(MIN_RESERVATION_GRACE);
                            turns
                                .wait_for_turn(wait, grace, place.waiter.as_str())
                                .await;
                        }
                        (_, _, Some(releases)) if held => {
                            releases.wait(wait, round, collisions).await;
                            collisions += 1;
                        }
                        _ => tokio::time::sleep(wait).await,
                    }
                    last_error = Some(error);
                }
                result => break result,
            }
        };
        if let Some(mut queued) = queued {
            match outcome {
                // Won: the winning attempt took care of the queues.
                Ok(_) => queued.disarm(),
                // Give the place back before returning, not in the background: a process
                // that exits on this error would otherwise leave the line waiting for it
                // until the place lapses. It costs at most one node timeout.
                Err(_) => queued.leave_now().await,
            }
        }
        outcome
    }

    /// Deletes the lease's keys on every node. Returns once a quorum deleted them (the
    /// other deletes finish unawaited) or once a quorum can no longer confirm it. When the
    /// acquisition's late `SET`s are settled in the background, what each node answered is
    /// recorded in the lease for [`finish_stragglers`](Self::finish_stragglers).
    pub(crate) async fn release(&self, lease: &Arc<Lease>) -> Result<(), LockError> {
        let span = tracing::debug_span!(
            "quorumlock.release",
            resource = lease.resource.as_str(),
            outcome = tracing::field::Empty,
        );
        #[cfg(feature = "metrics")]
        self.observed
            .meters
            .hold
            .record(lease.acquired_at().elapsed().as_secs_f64());
        let result = self.release_in(lease).instrument(span.clone()).await;
        let outcome = observe::settle_outcome(&result, "released");
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        self.observed.meters.release(outcome);
        result
    }

    /// [`release`](Self::release), within its span.
    async fn release_in(&self, lease: &Arc<Lease>) -> Result<(), LockError> {
        let resource = lease.resource.as_str();
        let mut in_flight = self.send(Command::Unlock, &lease.keys, &lease.token);
        let mut tally = self.empty_tally();
        let mut answers = vec![None; self.nodes.len()];
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut answers)
            .await;
        if let Some(unlocks) = &lease.unlocks {
            for (index, answer) in answers.into_iter().enumerate() {
                if let Some(answer) = answer {
                    unlocks.record(index, answer == Answer::Granted);
                }
            }
            if !in_flight.is_empty() {
                spawn_detached(record_unlocks(in_flight, Arc::clone(lease)));
            }
        } else {
            self.let_finish(in_flight);
        }
        if tally.has_quorum() {
            Counters::bump(&self.counters.released);
            tracing::debug!(resource, "lock released");
            Ok(())
        } else {
            let error = self.loss(resource, tally);
            tracing::warn!(resource, %error, "release not confirmed by a quorum");
            Err(error)
        }
    }

    /// Sets our key's TTL back to the full TTL on every node, never creating a key. Returns
    /// the new deadline, counted from before the first request. Refused once the current
    /// deadline has passed, and failed if a quorum did not confirm before it.
    pub(crate) async fn refresh(
        &self,
        resource: &str,
        keys: &Keys,
        token: &LockToken,
        current_deadline: Instant,
    ) -> Result<Instant, LockError> {
        let span = tracing::debug_span!(
            "quorumlock.refresh",
            resource,
            outcome = tracing::field::Empty,
        );
        let result = self
            .refresh_in(resource, keys, token, current_deadline)
            .instrument(span.clone())
            .await;
        let outcome = observe::settle_outcome(&result, "extended");
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        self.observed.meters.refresh(outcome);
        result
    }

    /// [`refresh`](Self::refresh), within its span.
    async fn refresh_in(
        &self,
        resource: &str,
        keys: &Keys,
        token: &LockToken,
        current_deadline: Instant,
    ) -> Result<Instant, LockError> {
        let started = Instant::now();
        self.check_not_expired(resource, current_deadline, started)?;
        let ttl = self.config.ttl();
        let mut in_flight = self.send(Command::Extend(ttl), keys, token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, Wait::UntilDecided, &mut [])
            .await;
        // Extend on every node, not only the quorum that decided; our own keys only.
        finish_in_background(in_flight);
        let finished = Instant::now();
        if !tally.has_quorum() {
            let error = self.loss(resource, tally);
            tracing::warn!(resource, %error, "lock not extended");
            return Err(error);
        }
        // The extension counts only if it was confirmed while the old lease still held.
        self.check_not_expired(resource, current_deadline, finished)?;
        match self.config.deadline_from(started) {
            Some(deadline) if deadline > finished => {
                Counters::bump(&self.counters.extended);
                tracing::debug!(
                    resource,
                    validity_ms = millis(deadline - finished),
                    "lock extended"
                );
                Ok(deadline)
            }
            _ => Err(LockError::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed: finished.saturating_duration_since(started),
                ttl,
            }),
        }
    }

    /// Whether a quorum still holds our token and the deadline has not passed.
    pub(crate) async fn is_acquired(
        &self,
        resource: &str,
        keys: &Keys,
        token: &LockToken,
        deadline: Instant,
    ) -> Result<bool, LockError> {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let tally = self
            .round(Command::Holds, keys, token, Wait::UntilDecided)
            .await;
        if tally.has_quorum() {
            Ok(Instant::now() < deadline)
        } else {
            match self.loss(resource, tally) {
                LockError::NotHeld { .. } => Ok(false),
                unknown => Err(unknown),
            }
        }
    }

    /// Releases `lease` in the background, recording what each node answered: for guards
    /// dropped without a release. Never blocks; without a tokio runtime the keys simply
    /// expire after their TTL.
    pub(crate) fn release_in_background(&self, lease: Arc<Lease>) {
        #[cfg(feature = "metrics")]
        self.observed
            .meters
            .hold
            .record(lease.acquired_at().elapsed().as_secs_f64());
        let in_flight = self.send(Command::Unlock, &lease.keys, &lease.token);
        spawn_detached(record_unlocks(in_flight, lease));
    }

    /// Lets the requests of a decided round still in flight reach their nodes. Each is
    /// polled once more (a request never polled has not gone out); then those to nodes that
    /// send when polled need nobody to await them, and the others are driven to the end in
    /// the background.
    fn let_finish(&self, mut in_flight: InFlight) {
        drain_ready(&mut in_flight);
        if !self.all_send_when_polled(&in_flight) {
            finish_in_background(in_flight);
        }
    }

    /// Whether every request still in flight in `round` has gone out to its node for sure
    /// (see [`LockNode::sends_when_polled`]), once polled.
    fn all_send_when_polled(&self, round: &InFlight) -> bool {
        round
            .pending()
            .iter()
            .all(|&index| self.nodes[index].sends_when_polled())
    }

    /// In the background: unlocks `token`'s keys on every node (for acquisitions abandoned
    /// mid-round), then takes `waiter` out of every node's queue (in that order, so that no
    /// request of an abandoned attempt can queue the waiter again after it left).
    fn abandon_in_background(
        self: Arc<Self>,
        keys: Keys,
        token: Option<LockToken>,
        waiter: Option<LockToken>,
    ) {
        spawn_detached(async move {
            if let Some(token) = token {
                self.round(Command::Unlock, &keys, &token, Wait::ForEveryNode)
                    .await;
            }
            if let Some(waiter) = waiter {
                self.leave_queues(&keys, &waiter).await;
            }
        });
    }

    /// This client's watches of reservations, made on the first call and shared by every
    /// waiter after; each call returns a copy that sees the announcements made from now on.
    async fn reservation_watches(&self) -> Option<ReleaseWatches> {
        if !self.config.notify_releases() {
            return None;
        }
        self.reservations
            .get_or_init(|| {
                ReleaseWatches::start_reservations(&self.nodes, &self.client, self.quorum)
            })
            .await
            .clone()
    }

    /// A guard that gives `place` back on every node unless the acquisition wins.
    fn leave_queue_on_drop(self: &Arc<Self>, keys: &Keys, place: &QueuePlace) -> LeaveQueueOnDrop {
        LeaveQueueOnDrop {
            armed: Some((Arc::clone(self), Arc::clone(keys), place.waiter.clone())),
        }
    }

    /// Takes `waiter` out of the queue of `keys` on every node; a reservation it had goes
    /// to the next in line.
    async fn leave_queues(&self, keys: &Keys, waiter: &LockToken) {
        let in_flight = self.fan_out(|node| {
            let keys = Arc::clone(keys);
            let waiter = waiter.clone();
            async move { node.leave_queue(&keys, &waiter).await }
        });
        in_flight.finish().await;
    }

    /// How long what a waiter leaves on a node with one attempt must last: longer than a
    /// waiter ever goes between two attempts (two of the longest retry waits and four node
    /// timeouts, plus a margin for scheduling), so that a live waiter keeps it and a dead
    /// one leaves it behind no longer. Its queue place, or its interest in announcements.
    fn waiter_interest(&self) -> Duration {
        let longest_wait = self
            .config
            .retry_delay()
            .saturating_add(self.config.retry_jitter());
        longest_wait
            .saturating_mul(2)
            .saturating_add(self.config.node_timeout().saturating_mul(4))
            .saturating_add(WAITER_MARGIN)
    }

    /// A new place in the queues, for one blocking acquisition that began at `began`; it
    /// lapses after [`waiter_interest`](Self::waiter_interest) unless refreshed.
    fn queue_place(&self, began: std::time::SystemTime) -> QueuePlace {
        let lifetime = self.waiter_interest();
        let ticket = began
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, micros);
        QueuePlace {
            waiter: LockToken::from_string(format!("{}:{}", self.client, LockToken::generate())),
            ticket,
            lifetime,
        }
    }

    fn check_not_expired(
        &self,
        resource: &str,
        deadline: Instant,
        now: Instant,
    ) -> Result<(), LockError> {
        if now >= deadline {
            tracing::warn!(resource, "lease expired before the operation");
            return Err(LockError::Expired {
                resource: resource.to_owned(),
                ago: now.saturating_duration_since(deadline),
            });
        }
        Ok(())
    }

    /// How many nodes saying the same thing make a quorum impossible for the opposite:
    /// `N - quorum + 1`.
    fn blocking(&self) -> usize {
        self.nodes.len() - self.quorum + 1
    }

    /// Why an acquisition round failed, from every node's answer: no quorum when the failed
    /// nodes alone rule one out (no release could help), else another holder's keys stand
    /// in the way, and waiting for their release may succeed.
    fn refusal(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if tally.failures.len() >= self.blocking() {
            LockError::NoQuorum { resource, tally }
        } else {
            LockError::Held { resource, tally }
        }
    }

    /// Why a round on a held lock failed: the lock is gone only when enough nodes said so
    /// that no quorum can still hold it; otherwise too few answered to tell, which is not
    /// proof of loss (slow nodes may still hold it).
    fn loss(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if tally.refused.len() >= self.blocking() {
            LockError::NotHeld { resource, tally }
        } else {
            LockError::NoQuorum { resource, tally }
        }
    }

    async fn round(&self, command: Command, keys: &Keys, token: &LockToken, wait: Wait) -> Tally {
        let mut in_flight = self.send(command, keys, token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, wait, &mut [])
            .await;
        tally
    }

    /// Sends `command` to every node at once; see [`fan_out`](Self::fan_out).
    fn send(&self, command: Command, keys: &Keys, token: &LockToken) -> InFlight {
        self.send_to(command, keys, token, 0..self.nodes.len())
    }

    /// Sends `command` to the nodes at `indices` at once.
    fn send_to(
        &self,
        command: Command,
        keys: &Keys,
        token: &LockToken,
        indices: impl IntoIterator<Item = usize>,
    ) -> InFlight {
        self.fan_out_to(indices, |node| {
            let keys = Arc::clone(keys);
            let token = token.clone();
            let command = command.clone();
            async move {
                match command {
                    Command::Lock(ttl) => node.try_lock(&keys, &token, ttl).await,
                    Command::LockWatching(ttl, interest) => {
                        node.try_lock_watching(&keys, &token, ttl, interest).await
                    }
                    Command::LockQueued(ttl, place) => {
                        node.try_lock_queued(&keys, &token, ttl, &place).await
                    }
                    Command::Unlock => node.unlock(&keys, &token).await,
                    Command::Extend(ttl) => node.extend(&keys, &token, ttl).await,
                    Command::Holds => node.holds(&keys, &token).await,
                }
            }
        })
    }

    /// Sends one request to every node at once, each bounded by the per-node timeout and
    /// timed. The requests own their data, so the stragglers of a round can outlive it.
    fn fan_out<T, F, R>(&self, request: F) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(Arc<dyn LockNode>) -> R,
        R: std::future::Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        self.fan_out_to(0..self.nodes.len(), request)
    }

    /// [`fan_out`](Self::fan_out) to the nodes at `indices` only.
    fn fan_out_to<T, F, R>(&self, indices: impl IntoIterator<Item = usize>, request: F) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(Arc<dyn LockNode>) -> R,
        R: std::future::Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let mut round = Round::with_capacity(self.config.node_timeout(), self.nodes.len());
        for index in indices {
            round.push(index, request(Arc::clone(&self.nodes[index])));
        }
        round
    }

    fn empty_tally(&self) -> Tally {
        Tally {
            nodes: self.nodes.len(),
            quorum: self.quorum,
            ..Tally::default()
        }
    }

    /// Counts a failed node request in `tally`, the metrics and the trace.
    fn record_failure(&self, tally: &mut Tally, index: usize, error: NodeError) {
        let node = &self.nodes[index];
        let counter = match error {
            NodeError::Timeout(_) => &self.counters.node_timeouts,
            _ => &self.counters.node_errors,
        };
        Counters::bump(counter);
        self.observed.failed(index, &error);
        tracing::debug!(node = node.name(), %error, "node failed");
        tally.failures.push(NodeFailure {
            node: node.name().to_owned(),
            error,
        });
    }

    /// Counts replies as they arrive, noting each node's answer in `answers` (when it has a
    /// slot per node).
    async fn collect(
        &self,
        tally: &mut Tally,
        in_flight: &mut InFlight,
        wait: Wait,
        answers: &mut [Option<Answer>],
    ) {
        while let Some((index, reply, latency)) = in_flight.next().await {
            let node = &self.nodes[index];
            tracing::trace!(
                node = node.name(),
                ?reply,
                latency_us = micros(latency),
                "node replied"
            );
            if reply.is_ok() {
                self.observed.replied(index, latency);
            }
            if let Some(slot) = answers.get_mut(index) {
                *slot = Some(match reply {
                    Ok(true) => Answer::Granted,
                    Ok(false) => Answer::Refused,
                    Err(_) => Answer::Failed,
                });
            }
            match reply {
                Ok(true) => tally.granted += 1,
                Ok(false) => tally.refused.push(node.name().to_owned()),
                Err(error) => self.record_failure(tally, index, error),
            }
            let decided =
                tally.granted >= self.quorum || tally.granted + in_flight.len() < self.quorum;
            if wait == Wait::UntilDecided && decided {
                break;
            }
        }
    }
}

/// The least a waiter that one node reserved the lock for waits for the other nodes'
/// reservations before it claims them; see [`ReleaseWatches::wait_for_turn`].
const MIN_RESERVATION_GRACE: Duration = Duration::from_millis(1);

/// Slack added to a waiter's queue place or interest for its scheduling delays.
const WAITER_MARGIN: Duration = Duration::from_millis(100);

/// Unlocks every node in the background unless disarmed: makes an acquisition round safe
/// to cancel at any await point.
struct UnlockOnDrop {
    armed: Option<(Arc<Coordinator>, Keys, LockToken, Option<LockToken>)>,
}

impl UnlockOnDrop {
    /// Armed for the keys of `token`, and for the queue places of `waiter`, if any.
    fn new(
        coordinator: Arc<Coordinator>,
        keys: Keys,
        token: LockToken,
        waiter: Option<LockToken>,
    ) -> Self {
        UnlockOnDrop {
            armed: Some((coordinator, keys, token, waiter)),
        }
    }

    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for UnlockOnDrop {
    fn drop(&mut self) {
        if let Some((coordinator, keys, token, waiter)) = self.armed.take() {
            coordinator.abandon_in_background(keys, Some(token), waiter);
        }
    }
}

/// Takes a waiter out of the nodes' queues in the background unless disarmed: a blocking
/// acquisition that ends without the lock (an error, a timeout, its future dropped) gives
/// its place back at once, instead of leaving it to lapse while the line waits for it.
struct LeaveQueueOnDrop {
    armed: Option<(Arc<Coordinator>, Keys, LockToken)>,
}

impl LeaveQueueOnDrop {
    /// Called once the acquisition won: its winning attempt took care of the queues.
    fn disarm(&mut self) {
        self.armed = None;
    }

    /// Leaves the queues now (in the background only if this future is dropped meanwhile).
    async fn leave_now(&mut self) {
        if let Some((coordinator, keys, waiter)) = &self.armed {
            coordinator.leave_queues(keys, waiter).await;
        }
        self.disarm();
    }
}

impl Drop for LeaveQueueOnDrop {
    fn drop(&mut self) {
        if let Some((coordinator, keys, waiter)) = self.armed.take() {
            coordinator.abandon_in_background(keys, None, Some(waiter));
        }
    }
}

/// What a won round leaves to finish in the background; see
/// [`Coordinator::finish_stragglers`].
struct Stragglers {
    in_flight: InFlight,
    lease: Arc<Lease>,
    /// The winner's queue id, when it won as a queued waiter.
    waiter: Option<LockToken>,
    /// The nodes that answered the round without granting the lock.
    refused_by: Vec<usize>,
}

/// Records in `lease` what each unlock of a release still in flight answers, for
/// [`Coordinator::finish_stragglers`].
async fn record_unlocks(mut in_flight: InFlight, lease: Arc<Lease>) {
    while let Some((index, reply, _)) = in_flight.next().await {
        if let Some(unlocks) = &lease.unlocks {
            unlocks.record(index, matches!(reply, Ok(true)));
        }
    }
}

/// Takes the answers `in_flight` already has, without waiting: polls each request once
/// more, so that every one not polled yet (a decided round need not have polled them all)
/// goes out.
fn drain_ready(in_flight: &mut InFlight) {
    while let Some(Some(_)) = in_flight.next().now_or_never() {}
}

/// Lets the requests of a decided round still in flight reach their nodes, driven by a
/// task: a request whose future was never polled has not been sent yet.
fn finish_in_background(in_flight: InFlight) {
    if !in_flight.is_empty() {
        spawn_detached(in_flight.finish());
    }
}

/// Runs `future` on the current tokio runtime without waiting for it; does nothing outside
/// a runtime (the lock keys then expire by their TTL).
pub(crate) fn spawn_detached(future: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn(future));
    }
}
