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

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use crate::config::LockConfig;
use crate::error::{LockError, NodeError, NodeFailure, Tally};
use crate::guard::LockGuard;
use crate::handoff::ReleaseWatches;
use crate::lease::Lease;
use crate::metrics::Counters;
use crate::node::LockNode;
use crate::resource::redis_key;
use crate::retry::retry_wait;
use crate::token::LockToken;

/// The nodes of a lock, shared by every lock instance derived from the same connections.
pub(crate) type NodeSet = Arc<[Arc<dyn LockNode>]>;

/// The Redlock algorithm over a fixed set of nodes with one configuration.
pub(crate) struct Coordinator {
    nodes: NodeSet,
    counters: Arc<Counters>,
    config: LockConfig,
    quorum: usize,
}

/// The command a round sends to every node.
#[derive(Debug, Clone, Copy)]
enum Command {
    Lock(Duration),
    Unlock,
    Extend(Duration),
    Holds,
}

/// How long a round waits for replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Until a quorum agreed or can no longer agree; stragglers are not awaited.
    UntilDecided,
    /// Until every node answered or timed out.
    ForEveryNode,
}

/// A node's index, its answer, and how long it took.
type Reply = (usize, Result<bool, NodeError>, Duration);
type InFlight = FuturesUnordered<BoxFuture<'static, Reply>>;

impl Coordinator {
    /// A coordinator over `nodes`, which must be non-empty and have distinct names.
    pub(crate) fn new(
        nodes: Vec<Arc<dyn LockNode>>,
        config: LockConfig,
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
            nodes: nodes.into(),
            counters: Arc::default(),
            config,
            quorum,
        })
    }

    /// The same nodes with another configuration.
    pub(crate) fn with_config(&self, config: LockConfig) -> Self {
        Coordinator {
            nodes: Arc::clone(&self.nodes),
            counters: Arc::clone(&self.counters),
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

    /// Whether `other` runs on the very same node connections.
    pub(crate) fn shares_nodes_with(&self, other: &Coordinator) -> bool {
        Arc::ptr_eq(&self.nodes, &other.nodes)
    }

    /// One acquisition round: the lock is ours only if a quorum granted it and validity is
    /// left after the time the round took and the drift allowance. On any failure the
    /// nodes are unlocked again, all of them, before this returns.
    pub(crate) async fn try_acquire(
        self: &Arc<Self>,
        resource: &str,
    ) -> Result<LockGuard, LockError> {
        let key = redis_key(&self.config, resource)?;
        let token = LockToken::generate();
        // If this future is dropped mid-round, the nodes that said yes are unlocked in the
        // background instead of holding the key for a whole TTL.
        let mut cleanup = UnlockOnDrop::new(Arc::clone(self), Arc::clone(&key), token.clone());

        Counters::bump(&self.counters.attempts);
        let started = Instant::now();
        let ttl = self.config.ttl();
        let tally = self
            .round(Command::Lock(ttl), &key, &token, Wait::UntilDecided)
            .await;
        let finished = Instant::now();

        let error = if tally.has_quorum() {
            match self.deadline_from(started) {
                Some(deadline) if deadline > finished => {
                    cleanup.disarm();
                    Counters::bump(&self.counters.acquired);
                    tracing::debug!(
                        resource,
                        granted = tally.granted,
                        nodes = tally.nodes,
                        elapsed_us = micros(finished - started),
                        validity_ms = (deadline - finished).as_millis() as u64,
                        "lock acquired"
                    );
                    let lease =
                        Lease::new(Arc::clone(self), resource, key, token, started, deadline);
                    return Ok(LockGuard::new(lease));
                }
                _ => LockError::ValidityExhausted {
                    resource: resource.to_owned(),
                    elapsed: finished.saturating_duration_since(started),
                    ttl,
                },
            }
        } else {
            self.refusal(resource, tally)
        };
        match &error {
            LockError::Held { .. } => Counters::bump(&self.counters.contended),
            LockError::NoQuorum { .. } => Counters::bump(&self.counters.no_quorum),
            _ => Counters::bump(&self.counters.validity_exhausted),
        }
        tracing::debug!(resource, %error, "lock not acquired; unlocking every node");
        // Unlock every node, including those that failed or timed out: their SET may have
        // landed even though the reply was lost.
        self.round(Command::Unlock, &key, &token, Wait::ForEveryNode)
            .await;
        cleanup.disarm();
        Err(error)
    }

    /// Attempts until one succeeds, a non-retryable error occurs, the retries run out, or
    /// the optional `deadline` passes; waits a jittered delay between attempts.
    ///
    /// An attempt still running at the deadline is abandoned (its keys are unlocked in the
    /// background) and [`LockError::TimedOut`] returned. A wait that would end past the
    /// deadline is not started: the last attempt's error is returned at once instead.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        resource: &str,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let mut retries_left = self.config.retry_count();
        let mut releases: Option<ReleaseWatches> = None;
        loop {
            if let Some(releases) = &mut releases {
                releases.mark_seen();
            }
            let attempt = match deadline {
                None => self.try_acquire(resource).await,
                Some(deadline) => tokio::time::timeout_at(deadline, self.try_acquire(resource))
                    .await
                    .unwrap_or_else(|_| {
                        Err(LockError::TimedOut {
                            resource: resource.to_owned(),
                            waited: started.elapsed(),
                        })
                    }),
            };
            match attempt {
                Err(error) if error.is_retryable() && retries_left > 0 => {
                    let wait = retry_wait(&self.config, &mut rand::rng());
                    if deadline.is_some_and(|deadline| Instant::now() + wait >= deadline) {
                        return Err(error);
                    }
                    retries_left -= 1;
                    let held = matches!(error, LockError::Held { .. });
                    if held && releases.is_none() && self.config.notify_releases() {
                        // Only now, once contended: an uncontended lock never subscribes. A
                        // release announced before the subscription is confirmed is missed,
                        // and the jittered delay stands in for it.
                        let key = redis_key(&self.config, resource)?;
                        releases = ReleaseWatches::start(&self.nodes, &key, self.quorum).await;
                    }
                    match &releases {
                        Some(releases) if held => releases.wait(wait).await,
                        _ => tokio::time::sleep(wait).await,
                    }
                }
                result => return result,
            }
        }
    }

    /// Deletes our key on every node. Returns once a quorum deleted it (the other deletes
    /// finish in the background) or once a quorum can no longer confirm it.
    pub(crate) async fn release(
        &self,
        resource: &str,
        key: &Arc<str>,
        token: &LockToken,
    ) -> Result<(), LockError> {
        let mut in_flight = self.send(Command::Unlock, key, token);
        let tally = self.collect(&mut in_flight, Wait::UntilDecided).await;
        if !in_flight.is_empty() {
            spawn_detached(in_flight.for_each(|_| async {}));
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
        key: &Arc<str>,
        token: &LockToken,
        current_deadline: Instant,
    ) -> Result<Instant, LockError> {
        let started = Instant::now();
        self.check_not_expired(resource, current_deadline, started)?;
        let ttl = self.config.ttl();
        let tally = self
            .round(Command::Extend(ttl), key, token, Wait::UntilDecided)
            .await;
        let finished = Instant::now();
        if !tally.has_quorum() {
            let error = self.loss(resource, tally);
            tracing::warn!(resource, %error, "lock not extended");
            return Err(error);
        }
        // The extension counts only if it was confirmed while the old lease still held.
        self.check_not_expired(resource, current_deadline, finished)?;
        match self.deadline_from(started) {
            Some(deadline) if deadline > finished => {
                Counters::bump(&self.counters.extended);
                tracing::debug!(
                    resource,
                    validity_ms = (deadline - finished).as_millis() as u64,
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
        key: &Arc<str>,
        token: &LockToken,
        deadline: Instant,
    ) -> Result<bool, LockError> {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let tally = self
            .round(Command::Holds, key, token, Wait::UntilDecided)
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

    /// Unlocks every node in the background: for guards dropped without a release and
    /// acquisitions abandoned mid-round. Never blocks; without a tokio runtime the keys
    /// simply expire after their TTL.
    pub(crate) fn unlock_in_background(self: Arc<Self>, key: Arc<str>, token: LockToken) {
        spawn_detached(async move {
            self.round(Command::Unlock, &key, &token, Wait::ForEveryNode)
                .await;
        });
    }

    /// The end of the validity of a lock whose round started at `started`:
    /// `started + ttl - (ttl * drift_factor + 2 ms)`, or `None` on overflow.
    fn deadline_from(&self, started: Instant) -> Option<Instant> {
        let drift = self.config.drift_allowance();
        let validity = self.config.ttl().checked_sub(drift)?;
        started.checked_add(validity)
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

    /// Why an acquisition round failed: contention when a quorum answered, else no quorum.
    fn refusal(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if tally.answered() >= self.quorum {
            LockError::Held { resource, tally }
        } else {
            LockError::NoQuorum { resource, tally }
        }
    }

    /// Why a round on a held lock failed: the lock is gone when a quorum answered, else
    /// too few nodes answered to tell.
    fn loss(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if tally.answered() >= self.quorum {
            LockError::NotHeld { resource, tally }
        } else {
            LockError::NoQuorum { resource, tally }
        }
    }

    async fn round(
        &self,
        command: Command,
        key: &Arc<str>,
        token: &LockToken,
        wait: Wait,
    ) -> Tally {
        let mut in_flight = self.send(command, key, token);
        self.collect(&mut in_flight, wait).await
    }

    /// Sends `command` to every node at once, each bounded by the per-node timeout. The
    /// requests own their data, so the stragglers of a round can outlive it.
    fn send(&self, command: Command, key: &Arc<str>, token: &LockToken) -> InFlight {
        let timeout = self.config.node_timeout();
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let node = Arc::clone(node);
                let key = Arc::clone(key);
                let token = token.clone();
                async move {
                    let sent = Instant::now();
                    let request = match command {
                        Command::Lock(ttl) => node.try_lock(&key, &token, ttl),
                        Command::Unlock => node.unlock(&key, &token),
                        Command::Extend(ttl) => node.extend(&key, &token, ttl),
                        Command::Holds => node.holds(&key, &token),
                    };
                    let reply = tokio::time::timeout(timeout, request)
                        .await
                        .unwrap_or(Err(NodeError::Timeout(timeout)));
                    (index, reply, sent.elapsed())
                }
                .boxed()
            })
            .collect()
    }

    /// Counts replies as they arrive.
    async fn collect(&self, in_flight: &mut InFlight, wait: Wait) -> Tally {
        let mut tally = Tally {
            nodes: self.nodes.len(),
            quorum: self.quorum,
            ..Tally::default()
        };
        while let Some((index, reply, latency)) = in_flight.next().await {
            let node = &self.nodes[index];
            tracing::trace!(
                node = node.name(),
                ?reply,
                latency_us = micros(latency),
                "node replied"
            );
            match reply {
                Ok(true) => tally.granted += 1,
                Ok(false) => tally.refused.push(node.name().to_owned()),
                Err(error) => {
                    let counter = match error {
                        NodeError::Timeout(_) => &self.counters.node_timeouts,
                        _ => &self.counters.node_errors,
                    };
                    Counters::bump(counter);
                    tracing::debug!(node = node.name(), %error, "node failed");
                    tally.failures.push(NodeFailure {
                        node: node.name().to_owned(),
                        error,
                    });
                }
            }
            let decided =
                tally.granted >= self.quorum || tally.granted + in_flight.len() < self.quorum;
            if wait == Wait::UntilDecided && decided {
                break;
            }
        }
        tally
    }
}

/// Whole microseconds, for trace fields.
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Unlocks every node in the background unless disarmed: makes an acquisition round safe
/// to cancel at any await point.
struct UnlockOnDrop {
    armed: Option<(Arc<Coordinator>, Arc<str>, LockToken)>,
}

impl UnlockOnDrop {
    fn new(coordinator: Arc<Coordinator>, key: Arc<str>, token: LockToken) -> Self {
        UnlockOnDrop {
            armed: Some((coordinator, key, token)),
        }
    }

    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for UnlockOnDrop {
    fn drop(&mut self) {
        if let Some((coordinator, key, token)) = self.armed.take() {
            coordinator.unlock_in_background(key, token);
        }
    }
}

/// Runs `future` on the current tokio runtime without waiting for it; does nothing outside
/// a runtime (the lock keys then expire by their TTL).
pub(crate) fn spawn_detached(future: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn(future));
    }
}
