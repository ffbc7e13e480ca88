//! What the lock algorithms ask of a node ([`NodeRequest`]) and what it answers
//! ([`NodeReply`]).

use std::sync::Arc;
use std::time::Duration;

use super::shared_encoding::SharedEncoding;
use super::watch::ReleaseWatch;
use crate::held_as::HeldAs;
use crate::token::LockToken;

/// One request to a lock node; see [`LockNode::call`](super::LockNode::call).
///
/// The first six are the lock's core, which every node implements. The others serve the
/// hand-off and the fair queue; a node without them answers
/// [`Unsupported`](NodeReply::Unsupported), and waiters then race for the lock on their
/// retry delay, as with other Redlock clients.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum NodeRequest<'a> {
    /// Sets every key to `token` with a TTL, only if none of them exists, atomically: all
    /// keys or none (`SET key token NX PX ttl` for one key). Answers
    /// [`Done(true)`](NodeReply::Done) when the lock was taken.
    Lock {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token to set them to.
        token: &'a LockToken,
        /// How long they live.
        ttl: Duration,
    },
    /// Deletes each key that holds `token` (compare-and-delete), leaving keys that hold
    /// another token alone. Answers [`Done(true)`](NodeReply::Done) when every key held
    /// `token` and was deleted.
    Unlock {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token they must hold.
        token: &'a LockToken,
    },
    /// Sets the TTL of every key, only if all of them hold `token` (compare-and-pexpire):
    /// all keys or none. Never creates a key. Answers [`Done(true)`](NodeReply::Done) when
    /// the TTLs were set.
    Extend {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token they must hold.
        token: &'a LockToken,
        /// Their new TTL.
        ttl: Duration,
    },
    /// Whether every key currently holds `token`: [`Done`](NodeReply::Done).
    Holds {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token they must hold.
        token: &'a LockToken,
    },
    /// Reads the fencing counters at `keys`, and answers the highest
    /// ([`Counter`](NodeReply::Counter); 0 for a counter that does not exist).
    ReadCounter {
        /// The counter keys.
        keys: &'a [Arc<str>],
    },
    /// Raises each fencing counter at `keys` to `value` unless it is already higher, and
    /// answers the lowest value they hold afterwards ([`Counter`](NodeReply::Counter)).
    /// Never lowers a counter, never sets an expiry.
    RaiseCounter {
        /// The counter keys.
        keys: &'a [Arc<str>],
        /// The value to raise them to.
        value: u64,
    },
    /// As [`Lock`](Self::Lock), for a waiter that races for `keys` and watches releases of
    /// `keys[0]` (see [`WatchReleases`](Self::WatchReleases)): when the node refuses, it is
    /// asked to announce the key's releases for the next `interest`.
    ///
    /// A node that announces releases may skip the announcement when nobody asked for it
    /// lately, so that an uncontended release costs no `PUBLISH`; a waiter renews its
    /// interest with each attempt. Unsupported, it is a plain `Lock`: a node whose
    /// announcements cost nothing need not be asked.
    LockWatching {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token to set them to.
        token: &'a LockToken,
        /// How long they live.
        ttl: Duration,
        /// How long the first key's releases are wanted.
        interest: Duration,
    },
    /// As [`Lock`](Self::Lock), for a waiter that keeps a `place` in the node's queue of
    /// one of `keys`, the one it is blocked on (held, or reserved for another waiter): the
    /// keys may also be taken when the node reserved them for this waiter, and when the
    /// node refuses, the waiter is queued (or its place refreshed or moved), and a key
    /// reserved for it that it cannot use yet goes to the next in that key's line.
    ///
    /// A node with a queue reserves a released key for the first live waiter in line, so
    /// that waiters get the lock in the order they came (see [`QueuePlace`]). Unsupported,
    /// it is a plain `Lock`: no queue, and waiters race as with other Redlock clients.
    ///
    /// With a `stamp` (a waiter of the direct grant, for one key), the place also records
    /// the token, the TTL and the stamp, and a release grants the key to it outright: sets
    /// it to `token` with `ttl`, and announces the grant with the stamp. A key already in
    /// `token` (granted to an earlier place of the same waiter) is then taken as this
    /// request's: its TTL restarted, [`Done(true)`](NodeReply::Done).
    LockQueued {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The token to set them to.
        token: &'a LockToken,
        /// How long they live.
        ttl: Duration,
        /// The waiter's place in line.
        place: &'a QueuePlace,
        /// The stamp of this refresh of the place, when the waiter takes grants: the
        /// refresh's number (raised with every refresh) and this node's index, encoded by
        /// [`GrantStamp`](super::GrantStamp), so that a grant names the refresh whose place
        /// it was made on and the node that made it. A node echoes it as it came.
        stamp: Option<u64>,
    },
    /// Removes `waiter` from the queue of each of `keys`, and hands each reservation it had
    /// to the next waiter in that key's line: for a waiter that gave up or won the lock
    /// elsewhere. Answers [`Done`](NodeReply::Done); unsupported (no queue), nothing to do.
    LeaveQueue {
        /// The lock keys.
        keys: &'a [Arc<str>],
        /// The waiter leaving ([`QueuePlace::waiter`]).
        waiter: &'a LockToken,
    },
    /// Starts watching releases of `key` on this node, so that a waiter can retry as soon
    /// as the lock is free instead of sleeping out its retry delay: a
    /// [`Watch`](NodeReply::Watch). Unsupported, waiters rely on the delay alone.
    WatchReleases {
        /// The lock key.
        key: &'a str,
    },
    /// Starts watching the announcements of keys reserved for the queued waiters of
    /// `client` ([`QueuePlace::waiter`] begins with `client` and a colon), so that a
    /// release wakes the one waiter it was handed to, and no other: a
    /// [`Watch`](NodeReply::Watch). Unsupported, queued waiters claim their reservations
    /// on their retry delay.
    WatchReservations {
        /// The lock client whose waiters are watched.
        client: &'a str,
    },
    /// The read side of a read-write lock: sets the reader's own entry `keys` to `token`
    /// with a TTL and lists it among the readers of `writer`, only if `writer` (the write
    /// side's key) is free and no writer waits for it (see
    /// [`LockExclusive`](Self::LockExclusive)). Answers [`Done(true)`](NodeReply::Done)
    /// when the entry was taken. The entry is then a lock key like any other: released
    /// and checked by [`Unlock`](Self::Unlock) and [`Holds`](Self::Holds), and extended
    /// by [`ExtendListed`](Self::ExtendListed), which keeps the list alive with it. The
    /// node keeps the list's expiry at least the entry's.
    ///
    /// Unsupported, the read-write lock cannot run on the node: the acquisition counts it
    /// as failed ([`NodeError::Unsupported`](crate::NodeError::Unsupported)), never as a
    /// grant.
    LockShared {
        /// The reader's entry (one key).
        keys: &'a [Arc<str>],
        /// The token to set it to.
        token: &'a LockToken,
        /// How long it lives.
        ttl: Duration,
        /// The write side's key.
        writer: &'a str,
    },
    /// The write side of a read-write lock: as [`Lock`](Self::Lock) on the one key `keys`,
    /// only if no listed reader's entry still exists either. When refused and `waiting` is
    /// set, marks a writer as waiting for that long, which refuses new readers (writer
    /// preference). Answers [`Done(true)`](NodeReply::Done) when the lock was taken.
    ///
    /// Unsupported: as for [`LockShared`](Self::LockShared), a failure, never a grant.
    LockExclusive {
        /// The write side's key (one key).
        keys: &'a [Arc<str>],
        /// The token to set it to.
        token: &'a LockToken,
        /// How long it lives.
        ttl: Duration,
        /// How long to keep new readers out after a refusal; `None` for a writer that
        /// will not try again.
        waiting: Option<Duration>,
    },
    /// A permit of a semaphore of `permits` permits: sets the slot `keys` to `token` with a
    /// TTL and lists it among the holders of `name` (the name's lock key), only if `name`
    /// is free and every live listed holder is a permit of the same `permits`. Answers
    /// [`Done(true)`](NodeReply::Done) when the slot was taken, and
    /// [`HeldAs`](NodeReply::HeldAs) when a reader or a permit of another K holds the
    /// name. The slot is then a lock key like any other: released and checked by
    /// [`Unlock`](Self::Unlock) and [`Holds`](Self::Holds), and extended, with the list
    /// that names it, by [`ExtendListed`](Self::ExtendListed).
    ///
    /// Unsupported: as for [`LockShared`](Self::LockShared), a failure, never a grant.
    LockPermit {
        /// The permit's slot (one key).
        keys: &'a [Arc<str>],
        /// The token to set it to.
        token: &'a LockToken,
        /// How long it lives.
        ttl: Duration,
        /// The name's lock key.
        name: &'a str,
        /// How many permits the semaphore has.
        permits: u32,
    },
    /// Records `record` as the leader's, only while the lock key `keys` holds `token`:
    /// [`Done`](NodeReply::Done) says whether it did. Kept beside the lock key, with the
    /// key's remaining TTL (which [`ExtendLeader`](Self::ExtendLeader) keeps equal): a
    /// record whose token no longer holds the lock is stale and never read.
    Proclaim {
        /// The election's lock key (one key).
        keys: &'a [Arc<str>],
        /// The leader's lock token.
        token: &'a LockToken,
        /// What to record.
        record: &'a str,
    },
    /// The record of the leader that holds the lock key `keys` right now:
    /// [`Text`](NodeReply::Text), `None` when the key is free or its holder recorded
    /// nothing.
    ReadProclamation {
        /// The election's lock key (one key).
        keys: &'a [Arc<str>],
    },
    /// As [`Extend`](Self::Extend), for the entries of shared holders listed beside the
    /// lock key `name` (a reader's entry, a permit's slot: see
    /// [`LockShared`](Self::LockShared), [`LockPermit`](Self::LockPermit)): also raises
    /// the expiry of the name's holder list to at least `ttl`, never lowering it, so that
    /// the list outlives every live entry it names.
    ///
    /// Unsupported, a plain [`Extend`](Self::Extend): a node that does not know this
    /// request keeps its holder lists as it always did.
    ExtendListed {
        /// The entries (the lease's keys).
        keys: &'a [Arc<str>],
        /// The token they must hold.
        token: &'a LockToken,
        /// Their new TTL, and the least the list keeps.
        ttl: Duration,
        /// The lock key whose holder list names them.
        name: &'a str,
    },
    /// As [`Extend`](Self::Extend), for an election's lock key `keys`: also gives the
    /// leader record written under `token` ([`Proclaim`](Self::Proclaim)) the same TTL,
    /// so that observers see it for as long as the key holds the token.
    ///
    /// Unsupported, a plain [`Extend`](Self::Extend), as for
    /// [`ExtendListed`](Self::ExtendListed).
    ExtendLeader {
        /// The election's lock key (one key).
        keys: &'a [Arc<str>],
        /// The leader's lock token.
        token: &'a LockToken,
        /// The new TTL of the key and its record.
        ttl: Duration,
    },
    /// Many extensions in one request: each renewal as its own [`Extend`](Self::Extend)
    /// (or [`ExtendListed`](Self::ExtendListed), [`ExtendLeader`](Self::ExtendLeader), as
    /// its [`beside`](Renewal::beside) says), all keys of one renewal or none, each renewal
    /// on its own. Answers [`Renewed`](NodeReply::Renewed): one flag per renewal, in
    /// order, `true` where the TTLs were set. A [`Session`](crate::Session) sends it, so
    /// that keeping many locks alive costs one request per node per interval (and per
    /// chunk of them), not one per lock.
    ///
    /// Unsupported, each renewal is sent as its own request (see
    /// `extend_many` among the typed calls on `dyn LockNode`).
    ExtendMany {
        /// The leases to extend.
        renewals: &'a [Renewal<'a>],
        /// Their new TTL.
        ttl: Duration,
        /// The request's encoding, kept by the first node that sends it, for the others
        /// the same request goes to.
        encoding: &'a SharedEncoding,
    },
}

/// One lease of an [`ExtendMany`](NodeRequest::ExtendMany) request: its keys, the token
/// they must hold, and what lives beside them with the same TTL.
#[derive(Debug, Clone, Copy)]
pub struct Renewal<'a> {
    /// The lease's keys.
    pub keys: &'a [Arc<str>],
    /// The token they must hold.
    pub token: &'a LockToken,
    /// What else the extension keeps alive.
    pub beside: Beside<'a>,
}

/// What a [`Renewal`] keeps alive beside its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Beside<'a> {
    /// Nothing: a plain [`Extend`](NodeRequest::Extend).
    Nothing,
    /// The holder list of this lock key, which names the keys (a reader's entry, a
    /// permit's slot): as [`ExtendListed`](NodeRequest::ExtendListed).
    HolderList(&'a str),
    /// The leader record written under the token: as
    /// [`ExtendLeader`](NodeRequest::ExtendLeader).
    LeaderRecord,
}

impl NodeRequest<'_> {
    /// What the request asks, for error messages.
    pub(super) fn what(&self) -> &'static str {
        match self {
            NodeRequest::Lock { .. } => "lock",
            NodeRequest::Unlock { .. } => "unlock",
            NodeRequest::Extend { .. } => "extend",
            NodeRequest::Holds { .. } => "holds",
            NodeRequest::ReadCounter { .. } => "read counter",
            NodeRequest::RaiseCounter { .. } => "raise counter",
            NodeRequest::LockWatching { .. } => "lock watching",
            NodeRequest::LockQueued { .. } => "lock queued",
            NodeRequest::LeaveQueue { .. } => "leave queue",
            NodeRequest::WatchReleases { .. } => "watch releases",
            NodeRequest::WatchReservations { .. } => "watch reservations",
            NodeRequest::LockShared { .. } => "lock shared",
            NodeRequest::LockExclusive { .. } => "lock exclusive",
            NodeRequest::LockPermit { .. } => "lock permit",
            NodeRequest::Proclaim { .. } => "proclaim",
            NodeRequest::ReadProclamation { .. } => "read proclamation",
            NodeRequest::ExtendListed { .. } => "extend listed",
            NodeRequest::ExtendLeader { .. } => "extend leader",
            NodeRequest::ExtendMany { .. } => "extend many",
        }
    }
}

/// A node's answer to a [`NodeRequest`]; each request names the reply it expects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeReply {
    /// The node did what was asked (`true`), or answered but refused (`false`).
    Done(bool),
    /// The value of a fencing counter.
    Counter(u64),
    /// A watch of the node's release announcements.
    Watch(ReleaseWatch),
    /// A stored text, or its absence.
    Text(Option<String>),
    /// One flag per renewal of an [`ExtendMany`](NodeRequest::ExtendMany), in order:
    /// whether its TTLs were set.
    Renewed(Vec<bool>),
    /// Refused: the name is held in this other mode (an answer to
    /// [`LockShared`](NodeRequest::LockShared) and [`LockPermit`](NodeRequest::LockPermit)).
    HeldAs(HeldAs),
    /// The node does not implement this request.
    Unsupported,
}

/// A blocking acquisition's place in the nodes' queues of a contended lock.
///
/// With [`LockConfig::fair`](crate::LockConfig::fair) on (the default), a blocking acquire
/// that finds the lock held joins a queue on every node, ordered by `ticket` (the same on
/// every node, so the nodes agree on who is first). A release hands the key to the first
/// live waiter in line by *reserving* it for that waiter: a reserved key is not free, so
/// neither a newcomer nor the holder that just released can take it; only the waiter it
/// is reserved for can, by [`NodeRequest::LockQueued`]. The release announcement names
/// that waiter, so it alone wakes and attempts.
///
/// Places are soft state, never needed for safety (a reserved key is only ever taken
/// with `NX` semantics, under the quorum rule): a place lapses `lifetime` after the
/// waiter last refreshed it, and a reservation lapses when the place would have, so a
/// waiter that died holds the line up for at most `lifetime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlace {
    /// Identifies the waiter in the queue: `<client>:<random>`, where `client` names the
    /// lock client whose [`WatchReservations`](NodeRequest::WatchReservations) hears of
    /// it, and the random part is drawn once per blocking acquisition.
    pub waiter: LockToken,
    /// The waiter's position: lower goes first. The wall-clock time, in microseconds, at
    /// which the acquisition began, so waiters of different processes queue first come
    /// first served (as far as their clocks agree; ties go by `waiter`).
    pub ticket: u64,
    /// How long the place lasts without being refreshed; every queued attempt refreshes it.
    pub lifetime: Duration,
}
