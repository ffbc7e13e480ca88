//! The leases a session keeps alive, who may join, and when the next round is due.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{LockError, SessionEnd};
use crate::lease::Lease;
use crate::quorum::Coordinator;

/// The ids sessions are told apart by in their leases (0 is no session).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How often a session extends its locks, and how many go in one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cadence {
    pub(crate) interval: Duration,
    pub(crate) chunk: usize,
    /// How long one node may take to answer one request of a round: a node timeout, or a
    /// twentieth of the interval if longer. A request carries a chunk of locks, not one
    /// (some 20 KB and hundreds of key operations in a script), and four wait on each
    /// connection: on a busy machine a node timeout made for one command is missed now
    /// and then, and each miss costs the round a chunk on that node. Waiting
    /// longer costs no safety, since each lock's validity counts from the request's
    /// sending and a confirmation after its old deadline is refused.
    pub(crate) request_timeout: Duration,
    pub(crate) node_timeout: Duration,
}

impl Cadence {
    /// The first retry of a lock a round could not confirm: two node timeouts.
    pub(crate) fn first_retry(&self) -> Duration {
        self.node_timeout.saturating_mul(2)
    }

    /// How long before a lock is due a round starts, for a round expected to take
    /// `round`: twice that, the first retry and a node timeout, at most a quarter of the
    /// interval. A lock in the round's last chunk is sent as long as the round takes after
    /// its start; one the round could not confirm (a node slow for its chunk) is sent
    /// again after the round, the retry and as long again. Before any round ran (`None`),
    /// how long one takes is unknown, and the lead is the whole quarter: at 100,000 locks
    /// a first round takes over a second, and one planned as if it took nothing extended
    /// its last chunks 0.9 s late.
    pub(crate) fn lead(&self, round: Option<Duration>) -> Duration {
        let most = self.interval / 4;
        round.map_or(most, |round| {
            round
                .saturating_mul(2)
                .saturating_add(self.first_retry())
                .saturating_add(self.node_timeout)
                .min(most)
        })
    }

    /// Below this much validity left, a lock's extension can no longer be confirmed in
    /// time: two request timeouts.
    pub(crate) fn margin(&self) -> Duration {
        self.request_timeout.saturating_mul(2)
    }
}

/// How long a full round took, and over how many leases: what the next one is expected
/// to take, grown or shrunk with the list (a round's requests are one per chunk).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub(crate) took: Duration,
    pub(crate) leases: usize,
}

impl Pace {
    /// How long a round of `leases` leases is expected to take.
    fn expected(&self, leases: usize) -> Duration {
        self.took.mul_f64(leases as f64 / self.leases.max(1) as f64)
    }
}

/// A session's members: a plain list of leases, one pointer each, so that a held lock costs
/// the session 8 bytes. A lease is listed at most once: its `session` field names the
/// session it is listed in, and changes only under this list's lock.
pub(crate) struct Members {
    id: u64,
    /// The coordinator that extends the members: of the session's lock.
    pub(crate) coordinator: Arc<Coordinator>,
    pub(crate) cadence: Cadence,
    state: Mutex<State>,
    /// Wakes the keeper when a member joins whose round is due before the next one
    /// planned, and when the session ends.
    pub(crate) changed: Notify,
    /// Wakes the waits for the session's end.
    pub(crate) ending: Notify,
}

struct State {
    leases: Vec<Arc<Lease>>,
    /// When the next round is due.
    next_round: Instant,
    /// When the last full round started, once one has.
    last_round: Option<Instant>,
    /// How long the last full round took, once one has: the lead of the next one (see
    /// `Cadence::lead`) is reckoned from it, for as many leases as are listed then.
    pace: Option<Pace>,
    /// Why the session ended, once it has.
    ended: Option<SessionEnd>,
}

impl Members {
    /// No members of a session of `coordinator`'s locks; the first round due at
    /// `next_round`.
    pub(crate) fn new(
        coordinator: Arc<Coordinator>,
        cadence: Cadence,
        next_round: Instant,
    ) -> Self {
        Members {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            coordinator,
            cadence,
            state: Mutex::new(State {
                leases: Vec::new(),
                next_round,
                last_round: None,
                pace: None,
                ended: None,
            }),
            changed: Notify::new(),
            ending: Notify::new(),
        }
    }

    /// Lists `lease`, granted by `coordinator`, among the session's locks: refused for a
    /// lease of other nodes or another TTL, one that ended, or a session that did.
    pub(crate) fn admit(
        &self,
        coordinator: &Coordinator,
        lease: &Arc<Lease>,
    ) -> Result<(), LockError> {
        let refuse = |reason: String| LockError::Session {
            resource: lease.resource().to_owned(),
            reason,
        };
        if !coordinator.shares_nodes_with(&self.coordinator) {
            return Err(LockError::ForeignGuard {
                resource: lease.resource().to_owned(),
            });
        }
        let (ours, theirs) = (self.coordinator.config(), coordinator.config());
        if ours.ttl() != theirs.ttl()
            || ours.key_ttl() != theirs.key_ttl()
            || ours.max_validity() != theirs.max_validity()
        {
            return Err(refuse(format!(
                "its TTL is {:?} (keys {:?}), the session's {:?} (keys {:?})",
                theirs.ttl(),
                theirs.key_ttl(),
                ours.ttl(),
                ours.key_ttl()
            )));
        }
        if lease.has_ended() || lease.was_passed() {
            return Err(refuse("it is no longer held".to_owned()));
        }
        // Its extension is due an interval after it was won or last extended; its round
        // starts the lead before that.
        let extended = lease.state().acquired_at;
        self.join(lease, extended)
            .map_err(|end| refuse(end.to_string()))
    }

    /// Lists `lease`, last extended (or won) at `extended`; a lease listed already stays
    /// listed once. Refused once the session ended, with why it did.
    ///
    /// The round comes forward when the lease is due before it, and when the list grew
    /// so that the round, longer now, must start earlier for the leases the last round
    /// extended.
    fn join(&self, lease: &Arc<Lease>, extended: Instant) -> Result<(), SessionEnd> {
        let mut state = self.lock();
        if let Some(ended) = &state.ended {
            return Err(ended.clone());
        }
        if lease.session() == self.id {
            return Ok(());
        }
        lease.set_session(self.id);
        state.leases.push(Arc::clone(lease));
        let lead = self.lead(&state);
        let due = |extended: Instant| {
            extended
                .checked_add(self.cadence.interval)
                .map_or(extended, |due| due.checked_sub(lead).unwrap_or(extended))
        };
        let due = state
            .last_round
            .map_or(due(extended), |last| due(last).min(due(extended)));
        if due < state.next_round {
            state.next_round = due;
            drop(state);
            self.changed.notify_one();
        }
        Ok(())
    }

    /// Takes `lease` off the list, if it is listed.
    pub(crate) fn leave(&self, lease: &Lease) {
        let mut state = self.lock();
        if lease.session() != self.id {
            return;
        }
        lease.set_session(0);
        if let Some(at) = state
            .leases
            .iter()
            .position(|listed| std::ptr::eq(&**listed, lease))
        {
            state.leases.swap_remove(at);
        }
    }

    /// The members to extend now: the list, without the leases that ended (released,
    /// lost, passed) or left, which it drops.
    pub(crate) fn current(&self) -> Vec<Arc<Lease>> {
        let mut state = self.lock();
        let id = self.id;
        state.leases.retain(|lease| {
            let member = lease.session() == id && !lease.was_passed() && !lease.has_ended();
            if !member && lease.session() == id {
                lease.set_session(0);
            }
            member
        });
        state.leases.clone()
    }

    /// How many leases are listed (some may have ended since the last round).
    pub(crate) fn len(&self) -> usize {
        self.lock().leases.len()
    }

    /// When the next round is due.
    pub(crate) fn next_round(&self) -> Instant {
        self.lock().next_round
    }

    /// How long before a lock is due its round starts, with the list as it is now.
    fn lead(&self, state: &State) -> Duration {
        let expected = state.pace.map(|pace| pace.expected(state.leases.len()));
        self.cadence.lead(expected)
    }

    /// Records a full round that started at `started` (and, once it is over, its `pace`),
    /// and plans the next one an interval after it less the lead, unless a member due
    /// earlier joined meanwhile. Returns when the next round is due; `None` when that is
    /// too far off to be told (an interval of decades).
    pub(crate) fn plan(&self, started: Instant, pace: Option<Pace>) -> Option<Instant> {
        let mut state = self.lock();
        if pace.is_some() {
            state.pace = pace;
        }
        state.last_round = Some(started);
        let at = started.checked_add(self.cadence.interval - self.lead(&state))?;
        // A join during the round moved `next_round` before the round's start plus an
        // interval only if it is due earlier still; keep that.
        if state.next_round <= started || state.next_round > at {
            state.next_round = at;
        }
        Some(state.next_round)
    }

    /// Ends the session (the first end recorded wins), and hands back every member, taken
    /// off the list.
    pub(crate) fn end(&self, end: SessionEnd) -> Vec<Arc<Lease>> {
        let mut state = self.lock();
        if state.ended.is_none() {
            state.ended = Some(end);
        }
        let leases = std::mem::take(&mut state.leases);
        for lease in &leases {
            if lease.session() == self.id {
                lease.set_session(0);
            }
        }
        drop(state);
        self.changed.notify_one();
        self.ending.notify_waiters();
        leases
    }

    /// Why the session ended, if it has.
    pub(crate) fn ended(&self) -> Option<SessionEnd> {
        self.lock().ended.clone()
    }

    /// The list, recovered from a poisoned mutex: every change is a push, a removal or a
    /// take, none left half done by a panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
