//! Rounds and tallies: the command a round sends to every node, and how the replies are
//! counted until a quorum agreed or can no longer agree.

use std::sync::Arc;
use std::time::Duration;

use super::Coordinator;
use crate::config::micros;
use crate::error::{LockError, NodeError, NodeFailure, Tally};
use crate::fan_out::Round;
use crate::fencing::{CounterQuorum, CounterRequest};
use crate::metrics::Counters;
use crate::node::{GrantStamp, QueuePlace};
use crate::resource::Keys;
use crate::token::LockToken;

/// The command a round sends to every node.
#[derive(Debug, Clone)]
pub(super) enum Command {
    Lock(Duration),
    /// With the waiter's interest in announcements.
    LockWatching(Duration, Duration),
    /// With the refresh's stamp, for a waiter of the direct grant.
    LockQueued(Duration, Arc<QueuePlace>, Option<u64>),
    Unlock,
    Extend(Duration),
    /// An extension of shared holders' entries, raising the expiry of the holder list
    /// of this lock key with them.
    ExtendListed(Duration, Arc<str>),
    /// An extension of an election's lock key, with the leader record under its token.
    ExtendLeader(Duration),
    Holds,
    /// The read side of a read-write lock, of the write side's key.
    LockShared(Duration, Arc<str>),
    /// The write side, marking a writer as waiting for this long when refused.
    LockExclusive(Duration, Option<Duration>),
    /// A permit of a semaphore: the name's lock key, and the semaphore's permits.
    LockPermit(Duration, Arc<str>, u32),
    /// An election leader's record.
    Proclaim(Arc<str>),
}

/// How long a round waits for replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Until a quorum agreed or can no longer agree; stragglers are not awaited.
    UntilDecided,
    /// Until every node answered or timed out.
    ForEveryNode,
}

/// What one node answered to a lock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// It took our keys.
    Granted,
    /// It answered no, and took nothing.
    Refused,
    /// It failed or did not answer in time: it may or may not have taken them.
    Failed,
}

/// The requests of a lock, unlock, extend or holds round still waiting for an answer.
pub(super) type InFlight = Round<bool>;

impl Coordinator {
    pub(super) async fn round(
        &self,
        command: Command,
        keys: &Keys,
        token: &LockToken,
        wait: Wait,
    ) -> Tally {
        let mut in_flight = self.send(command, keys, token);
        let mut tally = self.empty_tally();
        self.collect(&mut tally, &mut in_flight, wait, &mut [])
            .await;
        tally
    }

    /// Sends `command` to every node at once; see [`Round::fan_out`].
    pub(super) fn send(&self, command: Command, keys: &Keys, token: &LockToken) -> InFlight {
        self.send_to(command, keys, token, 0..self.nodes.len())
    }

    /// Sends `command` to the nodes at `indices` at once.
    pub(super) fn send_to(
        &self,
        command: Command,
        keys: &Keys,
        token: &LockToken,
        indices: impl IntoIterator<Item = usize>,
    ) -> InFlight {
        let timeout = self.config.node_timeout();
        Round::fan_out(&self.nodes, indices, timeout, |index, node| {
            let keys = keys.clone();
            let token = token.clone();
            let command = command.clone();
            async move {
                match command {
                    Command::Lock(ttl) => node.try_lock(&keys, &token, ttl).await,
                    Command::LockWatching(ttl, interest) => {
                        node.try_lock_watching(&keys, &token, ttl, interest).await
                    }
                    Command::LockQueued(ttl, place, refresh) => {
                        // Stamped for this node: its grant counts for it, whichever
                        // connection brings the announcement (see `GrantStamp`).
                        let stamp = refresh.and_then(|refresh| {
                            GrantStamp {
                                refresh,
                                node: index,
                            }
                            .encode()
                        });
                        node.try_lock_queued(&keys, &token, ttl, &place, stamp)
                            .await
                    }
                    Command::Unlock => node.unlock(&keys, &token).await,
                    Command::Extend(ttl) => node.extend(&keys, &token, ttl).await,
                    Command::ExtendListed(ttl, name) => {
                        node.extend_listed(&keys, &token, ttl, &name).await
                    }
                    Command::ExtendLeader(ttl) => node.extend_leader(&keys, &token, ttl).await,
                    Command::Holds => node.holds(&keys, &token).await,
                    Command::LockShared(ttl, writer) => {
                        node.try_lock_shared(&keys, &token, ttl, &writer).await
                    }
                    Command::LockExclusive(ttl, waiting) => {
                        node.try_lock_exclusive(&keys, &token, ttl, waiting).await
                    }
                    Command::LockPermit(ttl, name, permits) => {
                        node.try_lock_permit(&keys, &token, ttl, &name, permits)
                            .await
                    }
                    Command::Proclaim(record) => node.proclaim(&keys, &token, &record).await,
                }
            }
        })
    }

    /// The tally a lease won with `tally` keeps: a shared one when no node refused or
    /// failed, else a copy of its own.
    pub(super) fn won_tally(&self, tally: &Tally) -> Arc<Tally> {
        let clean = tally.refused.is_empty() && tally.failures.is_empty();
        match self.clean_tallies.get(tally.granted) {
            Some(shared) if clean && **shared == *tally => Arc::clone(shared),
            _ => Arc::new(tally.clone()),
        }
    }

    pub(super) fn empty_tally(&self) -> Tally {
        Tally {
            nodes: self.nodes.len(),
            quorum: self.quorum,
            ..Tally::default()
        }
    }

    /// Counts a failed node request in `tally`, the metrics and the trace.
    pub(super) fn record_failure(&self, tally: &mut Tally, index: usize, error: NodeError) {
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
    pub(super) async fn collect(
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
            // A node that refused for another mode answered, and took nothing: a refusal.
            let reply = match reply {
                Err(NodeError::HeldAs(mode)) => {
                    tally.held_as = Some(mode);
                    Ok(false)
                }
                other => other,
            };
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

    /// How many nodes saying the same thing make a quorum impossible for the opposite:
    /// `N - quorum + 1`.
    pub(super) fn blocking(&self) -> usize {
        self.nodes.len() - self.quorum + 1
    }

    /// Why an acquisition round failed, from every node's answer: no quorum when the failed
    /// nodes alone rule one out (no release could help), else another holder's keys stand
    /// in the way, and waiting for their release may succeed. A node that named another
    /// mode the name is held in makes it a mismatch instead: waiting would not help while
    /// callers disagree on what lock the name is.
    pub(super) fn refusal(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if let Some(held_as) = tally.held_as {
            LockError::ModeMismatch {
                resource,
                held_as,
                tally,
            }
        } else if tally.failures.len() >= self.blocking() {
            LockError::NoQuorum { resource, tally }
        } else {
            LockError::Held { resource, tally }
        }
    }

    /// Why a round on a held lock failed: the lock is gone only when enough nodes said so
    /// that no quorum can still hold it; otherwise too few answered to tell, which is not
    /// proof of loss (slow nodes may still hold it).
    pub(super) fn loss(&self, resource: &str, tally: Tally) -> LockError {
        let resource = resource.to_owned();
        if tally.refused.len() >= self.blocking() {
            LockError::NotHeld { resource, tally }
        } else {
            LockError::NoQuorum { resource, tally }
        }
    }
}

impl CounterQuorum for Coordinator {
    /// Sends a counter request to every node and waits for a quorum of answers; returns the
    /// highest value answered, or the tally when a quorum did not answer.
    async fn ask(&self, counters: &Keys, request: CounterRequest) -> Result<u64, Tally> {
        let timeout = self.config.node_timeout();
        let mut in_flight = Round::fan_out(&self.nodes, 0..self.nodes.len(), timeout, |_, node| {
            let counters = counters.clone();
            async move {
                match request {
                    CounterRequest::Read => node.read_counter(&counters).await,
                    CounterRequest::Raise(to) => node.raise_counter(&counters, to).await,
                }
            }
        });
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
}
