//! A session's keep-alive round: many leases extended with one request per node and chunk
//! of them, each lease's outcome counted on its own, as if it had been refreshed alone.
//!
//! Each lease's new deadline is counted from when the requests that extended it were sent
//! (the chunk it was in, on each node), not from the round's start, so that a lease in a
//! late chunk is not given less validity than it has, nor one in an early chunk more: at
//! `sent + ttl` the node that extended it still holds it, whatever came after.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::Coordinator;
use crate::error::{LeaseEnd, LockError, NodeError, NodeFailure};
use crate::lease::Lease;
use crate::metrics::Counters;
use crate::node::{Beside, LockNode, Renewal, SharedEncoding};

/// How many chunks of one round may be in flight to one node at once: enough to keep the
/// connection busy while the node runs a chunk's script, few enough that no chunk waits
/// behind the others for longer than its own node timeout.
const CHUNKS_IN_FLIGHT: usize = 4;

/// How many prepared chunks a round keeps for the nodes still to send them: the nodes go
/// through the chunks in the same order, a few in flight each, so a chunk is sent to all
/// of them within a few chunks of the first; a node further behind prepares its own.
const CHUNKS_KEPT: usize = 2 * CHUNKS_IN_FLIGHT;

/// One chunk of a round as every node is sent it: the renewals of its live leases, where
/// each sits in the chunk, and the encoding that the first node to send it keeps for the
/// others (a chunk is the same request on every node: see [`SharedEncoding`]).
struct Prepared<'r> {
    /// The positions in the chunk of the leases sent (those still live when the round
    /// began); the others read as refused.
    sent: Vec<usize>,
    renewals: Vec<Renewal<'r>>,
    encoding: SharedEncoding,
}

/// The chunks of a round prepared last, with their places in the round's order: the first
/// node to reach a chunk prepares it, and the others take it from here while it is kept.
struct Chunks<'r> {
    leases: &'r [Arc<Lease>],
    live: &'r [bool],
    size: usize,
    /// (place in the order, chunk number, the chunk), oldest first.
    kept: Mutex<VecDeque<(usize, usize, Arc<Prepared<'r>>)>>,
}

impl<'r> Chunks<'r> {
    /// Chunk `number`, the `place`-th of the round's order, prepared once for every node
    /// that reaches it while it is kept.
    fn get(&self, place: usize, number: usize) -> Arc<Prepared<'r>> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, _, prepared)) = kept.iter().find(|(_, kept, _)| *kept == number) {
            return Arc::clone(prepared);
        }
        let prepared = Arc::new(self.prepare(number));
        // Kept only when it is the newest: a node that reaches an older chunk no longer
        // kept lags behind the others, which need it no more.
        if kept.back().is_none_or(|(newest, _, _)| place > *newest) {
            kept.push_back((place, number, Arc::clone(&prepared)));
            if kept.len() > CHUNKS_KEPT {
                kept.pop_front();
            }
        }
        prepared
    }

    fn prepare(&self, number: usize) -> Prepared<'r> {
        let span = number * self.size..((number + 1) * self.size).min(self.leases.len());
        let (leases, live) = (&self.leases[span.clone()], &self.live[span]);
        let sent: Vec<usize> = (0..leases.len()).filter(|&i| live[i]).collect();
        let renewals = sent.iter().map(|&i| renewal(&leases[i])).collect();
        Prepared {
            sent,
            renewals,
            encoding: SharedEncoding::new(),
        }
    }
}

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
    /// `round` numbers the caller's rounds: each round begins at a chunk drawn from it, so
    /// that no lease is always in the round's last chunks (the ones a node that stalls, or
    /// that is given up for the round, is not sent). Every node goes through the chunks in
    /// the same order, so that each chunk is prepared and encoded once for all of them. A
    /// node that fails twice in a row is not sent the rest of the round (see `renew_on`):
    /// the round does not wait a node timeout per chunk for a node that is down.
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
        // Fibonacci hashing spreads consecutive rounds' starts over the chunks.
        let start = (round.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % count;
        let started = Instant::now();
        let live: Vec<bool> = leases
            .iter()
            .map(|lease| lease.deadline() > started && !lease.has_ended())
            .collect();
        let chunks = Chunks {
            leases,
            live: &live,
            size: chunk,
            kept: Mutex::new(VecDeque::with_capacity(CHUNKS_KEPT + 1)),
        };
        let mut rounds = Vec::with_capacity(self.nodes.len());
        for (index, node) in self.nodes.iter().enumerate() {
            rounds.push(self.renew_on(index, &**node, &chunks, start, timeout));
        }
        let replies = futures::future::join_all(rounds).await;
        drop(chunks);
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

    /// Sends the round's `chunks` to node `index`, a few at a time, each bounded by
    /// `timeout` from its own sending, beginning with chunk `start` and wrapping around.
    /// The replies, by chunk.
    ///
    /// A failure is not the node's end: a node that stalls for a moment fails the chunks
    /// in flight meanwhile, and the rest of the round must still reach it, or the locks of
    /// the round's later chunks would go unextended there. After a failure the node is
    /// sent one chunk at a time until one succeeds; it is given up for the round only when
    /// a chunk sent after a failure fails too (a node that is down or frozen costs the
    /// round the chunks in flight and one more, and two node timeouts).
    async fn renew_on(
        &self,
        index: usize,
        node: &dyn LockNode,
        chunks: &Chunks<'_>,
        start: usize,
        timeout: Duration,
    ) -> Vec<ChunkReply> {
        let count = chunks.leases.len().div_ceil(chunks.size);
        let mut order = (0..count).map(|place| (place, (start + place) % count));
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
                let Some((place, number)) = order.next() else {
                    break;
                };
                let prepared = chunks.get(place, number);
                let size = chunks.size.min(chunks.leases.len() - number * chunks.size);
                let sequence = sent;
                sent += 1;
                in_flight.push(async move {
                    let reply = self
                        .timed_chunk(index, node, &prepared, size, timeout)
                        .await;
                    (number, sequence, reply)
                });
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
        prepared: &Prepared<'_>,
        size: usize,
        timeout: Duration,
    ) -> ChunkReply {
        let ttl = self.config.key_ttl();
        let sent = Instant::now();
        let flags = renew_chunk(node, prepared, size, ttl, timeout).await;
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

/// One chunk's request to `node`: the live leases of the `size` of the chunk (a lease
/// already expired is not sent, and reads as refused), within `timeout`; a flag per lease
/// of the chunk.
async fn renew_chunk(
    node: &dyn LockNode,
    prepared: &Prepared<'_>,
    size: usize,
    ttl: Duration,
    timeout: Duration,
) -> Result<Vec<bool>, NodeError> {
    let mut all = vec![false; size];
    if prepared.sent.is_empty() {
        return Ok(all);
    }
    let extension = node.extend_many(&prepared.renewals, ttl, &prepared.encoding);
    let flags = tokio::time::timeout(timeout, extension)
        .await
        .map_err(|_| NodeError::Timeout(timeout))??;
    for (&i, flag) in prepared.sent.iter().zip(flags) {
        all[i] = flag;
    }
    Ok(all)
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
