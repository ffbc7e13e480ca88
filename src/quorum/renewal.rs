//! A session's keep-alive round: many leases extended with one request per node and chunk
//! of them, each lease's outcome counted on its own, as if it had been refreshed alone.
//!
//! Each lease's new deadline is counted from when the requests that extended it were sent
//! (the chunk it was in, on each node), not from the round's start, so that a lease in a
//! late chunk is not given less validity than it has, nor one in an early chunk more: at
//! `sent + ttl` the node that extended it still holds it, whatever came after.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::Coordinator;
use crate::error::{LeaseEnd, LockError, NodeError, NodeFailure};
use crate::lease::Lease;
use crate::metrics::Counters;
use crate::node::{Beside, LockNode, Renewal};

/// How many chunks of one round may be in flight to one node at once: enough to keep the
/// connection busy while the node runs a chunk's script, few enough that no chunk waits
/// behind the others for longer than its own node timeout.
const CHUNKS_IN_FLIGHT: usize = 4;

/// What one node answered for one chunk: when it was sent and answered, and one flag per
/// lease, or how it failed.
struct ChunkReply {
    sent: Instant,
    answered: Instant,
    flags: Result<Vec<bool>, NodeError>,
}

/// A lease the round could not decide: too few nodes answered, or too late. It may still
/// hold; the caller tries it again while its validity lasts.
pub(crate) struct Unconfirmed {
    /// The lease's position in the round's slice.
    pub(crate) index: usize,
    /// Why it was not confirmed.
    pub(crate) error: LockError,
}

impl Coordinator {
    /// Extends every lease of `leases` on every node, `chunk` leases per request, each
    /// request given `timeout` from its sending, and records each one's outcome in it: its
    /// new deadline, or its end when the lock proved gone ([`LockError::NotHeld`]) or its
    /// deadline passed first. Returns the leases it could not decide either way.
    ///
    /// `round` numbers the caller's rounds: each node begins each round at a chunk of its
    /// own, drawn from it, so that no lease is always in a node's last chunks (the ones a
    /// node that stalls, or that is given up for the round, is not sent). A node that
    /// fails twice in a row is not sent the rest of the round (see `renew_on`): the round
    /// does not wait a node timeout per chunk for a node that is down.
    ///
    /// # Cancel safety
    ///
    /// An extension never creates a key, so a round dropped midway leaves nothing behind:
    /// the leases it did not record keep their deadlines.
    pub(crate) async fn renew(
        &self,
        leases: &[Arc<Lease>],
        chunk: usize,
        round: u64,
        timeout: Duration,
    ) -> Vec<Unconfirmed> {
        let chunk = chunk.max(1);
        let count = leases.len().div_ceil(chunk).max(1);
        let nodes = self.nodes.len();
        // Fibonacci hashing spreads consecutive rounds' starts over the chunks; the nodes'
        // starts are spread evenly from there, so that no two lose the same chunks to a
        // stall at the same moment of their rounds.
        let drawn = (round.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        let started = Instant::now();
        let live: Vec<bool> = leases
            .iter()
            .map(|lease| lease.deadline() > started && !lease.has_ended())
            .collect();
        let mut rounds = Vec::with_capacity(self.nodes.len());
        for (index, node) in self.nodes.iter().enumerate() {
            let start = (drawn % count + index * count / nodes) % count;
            rounds.push(self.renew_on(index, &**node, leases, &live, chunk, start, timeout));
        }
        let replies = futures::future::join_all(rounds).await;
        let mut unconfirmed = Vec::new();
        // One scratch for every lease's count: a round settles thousands of leases, and
        // would otherwise allocate for each.
        let mut scratch = Scratch::default();
        for (index, lease) in leases.iter().enumerate() {
            if lease.was_passed() || lease.has_ended() {
                continue;
            }
            if !live[index] {
                lease.end(LeaseEnd::Expired);
                continue;
            }
            let answers = replies.iter().map(|node| {
                let reply = node.get(index / chunk);
                reply.map(|reply| {
                    (
                        reply,
                        reply.flags.as_ref().map(|flags| flags[index % chunk]),
                    )
                })
            });
            if let Err(error) = self.settle(lease, answers, &mut scratch) {
                unconfirmed.push(Unconfirmed { index, error });
            }
        }
        unconfirmed
    }

    /// Sends `leases` to node `index` in chunks, a few at a time, each bounded by `timeout`
    /// from its own sending, beginning with chunk `start` and wrapping around. The
    /// replies, by chunk.
    ///
    /// A failure is not the node's end: a node that stalls for a moment fails the chunks
    /// in flight meanwhile, and the rest of the round must still reach it, or the locks of
    /// the round's later chunks would go unextended there. After a failure the node is
    /// sent one chunk at a time until one succeeds; it is given up for the round only when
    /// a chunk sent after a failure fails too (a node that is down or frozen costs the
    /// round the chunks in flight and one more, and two node timeouts).
    #[allow(clippy::too_many_arguments)] // one node's share of `renew`'s round
    async fn renew_on(
        &self,
        index: usize,
        node: &dyn LockNode,
        leases: &[Arc<Lease>],
        live: &[bool],
        chunk: usize,
        start: usize,
        timeout: Duration,
    ) -> Vec<ChunkReply> {
        let count = leases.len().div_ceil(chunk);
        let mut order = (0..count).map(|i| (start + i) % count);
        let mut in_flight = FuturesUnordered::new();
        let mut replies: Vec<Option<ChunkReply>> = (0..count).map(|_| None).collect();
        let mut window = CHUNKS_IN_FLIGHT;
        // How many chunks had been sent when the node's first failure since its last
        // success was seen: a chunk sent after that which fails too gives the node up.
        let mut sent = 0;
        let mut failed_after: Option<usize> = None;
        let mut given_up = false;
        loop {
            while in_flight.len() < window && !given_up {
                let Some(number) = order.next() else {
                    break;
                };
                let span = number * chunk..((number + 1) * chunk).min(leases.len());
                let reply =
                    self.timed_chunk(index, node, &leases[span.clone()], &live[span], timeout);
                let sequence = sent;
                sent += 1;
                in_flight.push(async move { (number, sequence, reply.await) });
            }
            let Some((number, sequence, reply)) = in_flight.next().await else {
                break;
            };
            if reply.flags.is_ok() {
                window = CHUNKS_IN_FLIGHT;
                failed_after = None;
            } else {
                given_up |= failed_after.is_some_and(|after| sequence >= after);
                failed_after = failed_after.or(Some(sent));
                window = 1;
            }
            replies[number] = Some(reply);
        }
        let now = Instant::now();
        replies
            .into_iter()
            .map(|reply| {
                reply.unwrap_or_else(|| ChunkReply {
                    sent: now,
                    answered: now,
                    flags: Err(NodeError::Connection(
                        "not asked: it failed twice in a row earlier in the round".to_owned(),
                    )),
                })
            })
            .collect()
    }

    /// One chunk's request to node `index`, timed, and counted in the node's metrics.
    async fn timed_chunk(
        &self,
        index: usize,
        node: &dyn LockNode,
        leases: &[Arc<Lease>],
        live: &[bool],
        timeout: Duration,
    ) -> ChunkReply {
        let ttl = self.config.key_ttl();
        let sent = Instant::now();
        let flags = self.renew_chunk(node, leases, live, ttl, timeout).await;
        let answered = Instant::now();
        match &flags {
            Ok(_) => self
                .observed
                .replied(index, answered.saturating_duration_since(sent)),
            Err(error) => {
                let counter = match error {
                    NodeError::Timeout(_) => &self.counters.node_timeouts,
                    _ => &self.counters.node_errors,
                };
                Counters::bump(counter);
                self.observed.failed(index, error);
            }
        }
        ChunkReply {
            sent,
            answered,
            flags,
        }
    }

    /// One chunk's request: the live leases of `leases` (a lease already expired is not
    /// sent, and reads as refused), within `timeout`.
    async fn renew_chunk(
        &self,
        node: &dyn LockNode,
        leases: &[Arc<Lease>],
        live: &[bool],
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Vec<bool>, NodeError> {
        let sent: Vec<usize> = (0..leases.len()).filter(|&i| live[i]).collect();
        if sent.is_empty() {
            return Ok(vec![false; leases.len()]);
        }
        let renewals: Vec<Renewal<'_>> = sent.iter().map(|&i| renewal(&leases[i])).collect();
        let flags = tokio::time::timeout(timeout, node.extend_many(&renewals, ttl))
            .await
            .map_err(|_| NodeError::Timeout(timeout))??;
        let mut all = vec![false; leases.len()];
        for (i, flag) in sent.into_iter().zip(flags) {
            all[i] = flag;
        }
        Ok(all)
    }

    /// Counts one lease's answers, one per node in the nodes' order (`None`: not asked),
    /// and records the outcome in it; the error when the round decided nothing for it.
    fn settle<'r>(
        &self,
        lease: &Lease,
        answers: impl Iterator<Item = Option<(&'r ChunkReply, Result<bool, &'r NodeError>)>>,
        scratch: &mut Scratch<'r>,
    ) -> Result<(), LockError> {
        let old_deadline = lease.deadline();
        scratch.answers.clear();
        scratch.answers.extend(answers);
        scratch.sent.clear();
        scratch.answered.clear();
        for (reply, _) in scratch
            .answers
            .iter()
            .flatten()
            .filter(|(_, flag)| matches!(flag, Ok(true)))
        {
            scratch.sent.push(reply.sent);
            scratch.answered.push(reply.answered);
        }
        if scratch.sent.len() >= self.quorum {
            // Held on each of these nodes until at least its `sent + ttl`: on a quorum of
            // them until the quorum-th latest send plus the TTL.
            scratch.sent.sort_unstable_by(|a, b| b.cmp(a));
            let from = scratch.sent[self.quorum - 1];
            scratch.answered.sort_unstable();
            let confirmed = scratch.answered[self.quorum - 1];
            if confirmed >= old_deadline {
                // Confirmed too late: another owner may have held it meanwhile.
                lease.end(LeaseEnd::Expired);
                return Ok(());
            }
            return match self.config.deadline_from(from) {
                Some(deadline) if deadline > confirmed => {
                    lease.extended(from, deadline);
                    Counters::bump(&self.counters.extended);
                    Ok(())
                }
                _ => Err(LockError::ValidityExhausted {
                    resource: lease.resource().to_owned(),
                    elapsed: confirmed.saturating_duration_since(from),
                    ttl: self.config.ttl(),
                }),
            };
        }
        // No quorum: the tally, with the nodes' names, only now.
        let mut tally = self.empty_tally();
        tally.granted = scratch.sent.len();
        for (index, answer) in scratch.answers.iter().enumerate() {
            let name = || self.nodes[index].name().to_owned();
            match answer {
                Some((_, Ok(true))) => {}
                Some((_, Ok(false))) => tally.refused.push(name()),
                Some((_, Err(error))) => tally.failures.push(NodeFailure {
                    node: name(),
                    error: (*error).clone(),
                }),
                None => tally.failures.push(NodeFailure {
                    node: name(),
                    error: NodeError::Connection("not asked".to_owned()),
                }),
            }
        }
        let error = self.loss(lease.resource(), tally);
        if matches!(error, LockError::NotHeld { .. }) {
            lease.end(LeaseEnd::Lost(Box::new(error)));
            return Ok(());
        }
        Err(error)
    }
}

/// What `settle` counts a lease's answers in, kept from one lease to the next.
#[derive(Default)]
struct Scratch<'r> {
    answers: Vec<Option<(&'r ChunkReply, Result<bool, &'r NodeError>)>>,
    sent: Vec<Instant>,
    answered: Vec<Instant>,
}

/// What the nodes are asked for `lease`: its keys under its token, with what lives beside
/// them.
fn renewal(lease: &Lease) -> Renewal<'_> {
    let beside = match (&lease.listed_beside, lease.was_proclaimed()) {
        (Some(name), _) => Beside::HolderList(name),
        (None, true) => Beside::LeaderRecord,
        (None, false) => Beside::Nothing,
    };
    Renewal {
        keys: &lease.keys,
        token: &lease.token,
        beside,
    }
}
