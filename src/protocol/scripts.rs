//! [`NodeScript`]: every Lua script a lock node runs, by name, with its text and the keys
//! it takes. They are the server-side half of the lock protocol. Each one is atomic on its
//! node, which is what makes "all keys or none", "only the holder of the token" and "only
//! the waiter it is reserved for" hold there.
//!
//! Each script's text is in a file of its own under `lua/`, read in at compile time: the
//! scripts that free a key begin with the queue's shared functions (`queue.lua`,
//! `pass_on.lua`), as one text. A node names a script by the SHA-1 of its text, so a
//! change to a file (a space, a comment) is a new script to every node: clients of earlier
//! versions then run the old text beside it. A test pins every script's SHA-1.
//!
//! The keys the scripts use are listed in [`keys`](super::keys); the scripts read the
//! node's clock (`TIME`), which needs Redis 5 or later (scripts replicated by their
//! effects).

use std::sync::OnceLock;

use redis::Script;

use super::keys::{deadlines_key, queue_key, watched_key};

/// The text of a script: each of its files under `lua/` after a newline (every script's
/// text has begun with one since the first version, and its SHA-1 with it).
macro_rules! lua {
    ($($file:literal),+) => {
        concat!($("\n", include_str!(concat!("lua/", $file))),+)
    };
}

/// One of the Lua scripts a node runs, by name: its text ([`source`](Self::source)) and the
/// keys it takes after the lock keys (its key layout, [`keys`](Self::keys)), which together
/// with the arguments that the crate's one request-to-command mapping (`protocol::wire`)
/// gives each request are everything a node sends. A script added here (a variant, its
/// source, its layout, and its place in [`ALL`](Self::ALL)) is cached, sent and reloaded by
/// every node, real or simulated, with no other change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeScript {
    /// Takes every key, only if none exists (a lock over several keys; one key goes through
    /// `SET NX PX`). ARGV: token, TTL in ms.
    Lock,
    /// As `Lock`, and when refused marks the first key as watched. ARGV: token, TTL in ms,
    /// interest in ms.
    LockWatching,
    /// As `Lock` for a queued waiter for one key. ARGV: token, TTL in ms, waiter id,
    /// ticket, place lifetime in ms.
    LockQueued,
    /// As `LockQueued` for several keys. ARGV: as `LockQueued`, then the channel prefix.
    LockQueuedMany,
    /// Deletes the keys that hold the token and hands each to its next waiter. ARGV: token,
    /// channel prefix.
    Unlock,
    /// Takes a waiter out of the keys' queues. ARGV: waiter id, channel prefix.
    LeaveQueue,
    /// Sets every key's TTL, only if all hold the token. ARGV: token, TTL in ms.
    Extend,
    /// Raises fencing counters to a value unless higher. ARGV: the value.
    RaiseCounter,
    /// Takes a reader's entry of a read-write lock. KEYS: the entry, the write side, the
    /// reader list, the writer-waiting mark. ARGV: token, TTL in ms.
    LockShared,
    /// Takes the write side of a read-write lock. KEYS: the write side, the reader list,
    /// the writer-waiting mark. ARGV: token, TTL in ms, waiting time in ms (0: none).
    LockExclusive,
    /// Writes an election leader's record while its lock key holds its token. KEYS: the
    /// lock key, the record. ARGV: token, record.
    Proclaim,
    /// Takes a permit slot of a semaphore. KEYS: the slot, the name's lock key, its
    /// holder list. ARGV: token, TTL in ms, the semaphore's permits.
    LockPermit,
    /// As `Extend`, for listed shared holders (reader entries, permit slots), and raises
    /// their holder list's expiry to at least the TTL. KEYS: the entries, then the list.
    /// ARGV: token, TTL in ms.
    ExtendListed,
    /// As `Extend`, for an election's lock key, and gives the leader record written under
    /// the token the same TTL. KEYS: the lock key, the record. ARGV: token, TTL in ms.
    ExtendLeader,
    /// Many extensions in one call, each as `Extend`, `ExtendListed` or `ExtendLeader`.
    /// KEYS: each lease's keys, then its list or record if any. ARGV: TTL in ms, then per
    /// lease its token, its number of keys, and `-`, `l` (a list) or `r` (a record).
    ExtendMany,
}

/// The keys a script takes after the lock keys of its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyLayout {
    /// None.
    LockKeys,
    /// The first lock key's watch marker.
    FirstMarker,
    /// Each lock key's queue and deadlines, in the keys' order.
    Queues,
    /// Each lock key's queue and deadlines, then each one's watch marker.
    QueuesAndMarkers,
}

impl NodeScript {
    /// Every script, in the order the node's scripts are listed.
    pub const ALL: [NodeScript; 15] = [
        NodeScript::Lock,
        NodeScript::LockWatching,
        NodeScript::LockQueued,
        NodeScript::LockQueuedMany,
        NodeScript::Unlock,
        NodeScript::LeaveQueue,
        NodeScript::Extend,
        NodeScript::RaiseCounter,
        NodeScript::LockShared,
        NodeScript::LockExclusive,
        NodeScript::Proclaim,
        NodeScript::LockPermit,
        NodeScript::ExtendListed,
        NodeScript::ExtendLeader,
        NodeScript::ExtendMany,
    ];

    /// The script's Lua source, exactly as the node sends it.
    pub fn source(self) -> &'static str {
        match self {
            NodeScript::Lock => LOCK,
            NodeScript::LockWatching => LOCK_WATCHING,
            NodeScript::LockQueued => LOCK_QUEUED,
            NodeScript::LockQueuedMany => LOCK_QUEUED_MANY,
            NodeScript::Unlock => UNLOCK,
            NodeScript::LeaveQueue => LEAVE_QUEUE,
            NodeScript::Extend => EXTEND,
            NodeScript::RaiseCounter => RAISE_COUNTER,
            NodeScript::LockShared => LOCK_SHARED,
            NodeScript::LockExclusive => LOCK_EXCLUSIVE,
            NodeScript::Proclaim => PROCLAIM,
            NodeScript::LockPermit => LOCK_PERMIT,
            NodeScript::ExtendListed => EXTEND_LISTED,
            NodeScript::ExtendLeader => EXTEND_LEADER,
            NodeScript::ExtendMany => EXTEND_MANY,
        }
    }

    /// The script's SHA-1, by which `EVALSHA` names it: computed once per process.
    pub fn sha1(self) -> &'static str {
        static HASHES: OnceLock<Vec<String>> = OnceLock::new();
        let hashes = HASHES.get_or_init(|| {
            NodeScript::ALL
                .iter()
                .map(|name| Script::new(name.source()).get_hash().to_owned())
                .collect()
        });
        &hashes[self as usize]
    }

    /// The KEYS of a call on the lock keys `keys` (for `RaiseCounter`, the counter keys), in
    /// the node's layout: the keys; then, for the queue scripts, each key's queue and
    /// deadlines; then the watch markers (of the first key only for `LockWatching`). The
    /// read-write lock's and the election's scripts take their whole KEYS as given.
    pub fn keys(self, keys: &[&str]) -> Vec<String> {
        let (queues_of, markers_of) = self.layout().extra_keys(keys);
        let queues = queues_of
            .iter()
            .flat_map(|key| [queue_key(key), deadlines_key(key)]);
        keys.iter()
            .map(|key| (*key).to_owned())
            .chain(queues)
            .chain(markers_of.iter().map(|key| watched_key(key)))
            .collect()
    }

    /// The keys the script takes after the lock keys.
    pub(crate) fn layout(self) -> KeyLayout {
        match self {
            NodeScript::Lock | NodeScript::Extend | NodeScript::RaiseCounter => KeyLayout::LockKeys,
            // Their whole KEYS come from `wire`, with the family's prefixes.
            NodeScript::LockShared
            | NodeScript::LockExclusive
            | NodeScript::LockPermit
            | NodeScript::Proclaim
            | NodeScript::ExtendListed
            | NodeScript::ExtendLeader
            | NodeScript::ExtendMany => KeyLayout::LockKeys,
            NodeScript::LockWatching => KeyLayout::FirstMarker,
            NodeScript::LockQueued => KeyLayout::Queues,
            NodeScript::LockQueuedMany | NodeScript::Unlock | NodeScript::LeaveQueue => {
                KeyLayout::QueuesAndMarkers
            }
        }
    }
}

impl KeyLayout {
    /// Of the lock keys `keys`, those whose queue and deadlines follow them in a call, and
    /// those whose watch markers follow those.
    pub(crate) fn extra_keys<K>(self, keys: &[K]) -> (&[K], &[K]) {
        let first = &keys[..keys.len().min(1)];
        match self {
            KeyLayout::LockKeys => (&[], &[]),
            KeyLayout::FirstMarker => (&[], first),
            KeyLayout::Queues => (keys, &[]),
            KeyLayout::QueuesAndMarkers => (keys, keys),
        }
    }
}

/// Takes every key for our token with a TTL, only if none exists and no shared holder
/// (a reader, a permit) of any of them is live: all or nothing. A key reserved for a
/// waiter exists, so it is not taken. Every exclusive acquisition asks `held_shared`
/// (`holders.lua`), which costs one `EXISTS` while the name has no holder list.
///
/// KEYS: the lock keys. ARGV: token, TTL in ms.
const LOCK: &str = lua!("holders.lua", "lock.lua");

/// As [`LOCK`], for a waiter that races for the keys and watches their releases: when
/// refused, the first key is marked as watched for the waiter's interest (unless marked
/// for longer already), so that its next release is announced.
///
/// KEYS: the lock keys, then the first key's watch marker. ARGV: token, TTL in ms,
/// interest in ms.
const LOCK_WATCHING: &str = lua!("holders.lua", "lock_watching.lua");

/// As [`LOCK`], for a queued waiter for one key: the key reserved for this waiter counts as
/// free. When refused, the waiter is queued at its ticket, or its place refreshed. (Several
/// keys go through [`LOCK_QUEUED_MANY`].)
///
/// A waiter of the direct grant also sends its refresh's stamp: its place then records its
/// grant terms (the refresh's token, TTL, stamp) for a release to grant it the key
/// (`pass_on.lua`, which records the granted token as the waiter's), and a key granted to
/// the waiter's earlier place is taken as this refresh's grant, set to this refresh's token
/// with a fresh TTL: the refresh was sent before it arrived, so the refresh's validity
/// covers the key (docs/safety.md, "The direct grant").
///
/// KEYS: the lock key, then its queue and deadlines. ARGV: token, TTL in ms,
/// waiter id, ticket, place lifetime in ms, and the stamp (a direct-grant waiter's).
const LOCK_QUEUED: &str = lua!("queue.lua", "holders.lua", "lock_queued.lua");

/// As [`LOCK_QUEUED`], for a waiter for several keys. It queues under the key it is
/// blocked on (held by a token, or reserved for another waiter), so that the releases of
/// its other keys go to waiters who can use them: it stays in the queue it is in while
/// that key is still blocked, else moves to the first blocked key. A key reserved for it
/// that it cannot use yet (another key is blocked) goes at once to the next in that key's
/// line, as when leaving the queue, rather than sitting reserved until its place lapses.
/// Taking the keys leaves every queue.
///
/// KEYS: the n lock keys, each key's queue and deadlines (in the keys' order), then each
/// key's watch marker. ARGV: token, TTL in ms, waiter id, ticket, place lifetime in ms,
/// channel prefix.
const LOCK_QUEUED_MANY: &str = lua!(
    "queue.lua",
    "holders.lua",
    "pass_on.lua",
    "lock_queued_many.lua"
);

/// Deletes each key that still holds our token (forgetting its record as granted, if it
/// was), and hands each to the next waiter in its own queue, if any: granted to a
/// direct-grant waiter (set to its refresh's token, unless a shared holder is live beside
/// the key), reserved for any other. A release is announced (none when `ARGV[2]` is empty) only when
/// somebody waits: a hand-off on the waiter's client channel, else on the channel
/// `ARGV[2] .. key` while the key's watch marker exists. The common, uncontended release
/// costs three commands: `GET`, `DEL`, and one `EXISTS` of the queue and the marker.
/// Returns 1 only if every key was ours.
///
/// KEYS: the n lock keys, each key's queue and deadlines (in the keys' order), then the n
/// keys' watch markers; for one key, the key, its queue, its deadlines and its marker.
/// ARGV: token, channel prefix.
const UNLOCK: &str = lua!("queue.lua", "holders.lua", "pass_on.lua", "unlock.lua");

/// Removes a waiter from the queue of each key; a key reserved for it, or granted to it
/// (recorded as granted to it), goes to the next in that key's line. A waiter for several
/// keys may be queued under any of them, and on each node under another one.
///
/// KEYS: as for [`UNLOCK`]: the lock keys, each one's queue and deadlines, each one's
/// watch marker. ARGV: waiter id, channel prefix.
const LEAVE_QUEUE: &str = lua!("queue.lua", "holders.lua", "pass_on.lua", "leave_queue.lua");

/// Sets every key's TTL, only if all still hold our token. PEXPIRE never creates a key, so
/// a lock that expired or was flushed cannot be revived.
///
/// KEYS: the lock keys. ARGV: token, TTL in ms.
const EXTEND: &str = lua!("extend.lua");

/// Raises each fencing counter in `KEYS` to `ARGV[1]` unless it is already higher; returns
/// the lowest value they hold afterwards. Never sets an expiry: counters must outlive every
/// lock.
const RAISE_COUNTER: &str = lua!("raise_counter.lua");

/// Takes a reader's entry, only if the write side is free and no writer waits: sets the
/// entry (`NX`: an entry is never overwritten) and lists it among the readers (score 0),
/// forgetting the listed entries that no longer exist, and raises the list's expiry to at
/// least the entry's (`holder_list.lua`). A live listed permit (a score K > 0) refuses it
/// with `held-as:K`: the name is a semaphore's while that permit lives.
///
/// KEYS: the reader's entry, the write side, the reader list, the writer-waiting marker.
/// ARGV: token, TTL in ms.
const LOCK_SHARED: &str = lua!("holder_list.lua", "lock_shared.lua");

/// Takes the write side, only if it is free and no listed reader's entry exists
/// (forgetting those that do not). When refused with a waiting time, marks a writer as
/// waiting (unless marked for longer already), which keeps new readers out; a writer that
/// wins clears the mark (another writer still blocked marks it again when refused).
///
/// KEYS: the write side, the reader list, the writer-waiting marker. ARGV: token, TTL in
/// ms, waiting time in ms (0: do not mark).
const LOCK_EXCLUSIVE: &str = lua!("lock_exclusive.lua");

/// Takes a permit slot of a semaphore of K permits, only if the name's lock key is free
/// (no mutex, writer or reservation) and every live listed holder is a permit of the
/// same K: sets the slot (`NX`) and lists it with the score K, raising the list's expiry as
/// [`LOCK_SHARED`] does. A live reader (score 0) or a permit of another K refuses it with
/// `held-as:<score>`.
///
/// KEYS: the slot, the name's lock key, its holder list. ARGV: token, TTL in ms, K.
const LOCK_PERMIT: &str = lua!("holder_list.lua", "lock_permit.lua");

/// Writes the leader's record, only while the lock key holds the leader's token, with the
/// lock key's remaining TTL: the record lives as long as the key it is current under.
///
/// KEYS: the lock key, the leader record. ARGV: token, record.
const PROCLAIM: &str = lua!("proclaim.lua");

/// As [`EXTEND`] for the entries of shared holders (reader entries, permit slots), then
/// raises the expiry of the holder list that names them to at least the TTL (never
/// lowering it; a list without expiry keeps none): the list must outlive every live entry
/// it names, or an exclusive acquisition would no longer see them.
///
/// KEYS: the entries, then their holder list. ARGV: token, TTL in ms.
const EXTEND_LISTED: &str = lua!("holder_list.lua", "extend_listed.lua");

/// As [`EXTEND`] for an election's lock key, then gives the leader record the same TTL
/// when it was written under the token (a record of another term is left alone): so the
/// record lives exactly as long as the key it is current under.
///
/// KEYS: the lock key, the leader record. ARGV: token, TTL in ms.
const EXTEND_LEADER: &str = lua!("extend_leader.lua");

/// [`EXTEND`], [`EXTEND_LISTED`] and [`EXTEND_LEADER`] for many leases in one call, each
/// lease all or none and on its own: a session's keep-alive, one call per node (and per
/// chunk of its leases) instead of one per lease.
///
/// KEYS: each lease's keys, then its holder list or leader record if any. ARGV: TTL in ms,
/// then per lease: token, number of keys, `-`, `l` or `r`. Returns `0` or `1` per lease.
const EXTEND_MANY: &str = lua!("holder_list.lua", "extend_many.lua");

#[cfg(test)]
mod tests {
    use super::*;

    /// What every node of this and earlier versions calls each script: a script whose SHA-1
    /// changed is another script to a node, and clients of two versions would then run two
    /// texts side by side. A change here must be deliberate, and said in the release notes.
    #[test]
    fn every_script_keeps_its_sha1() {
        let pinned = [
            (NodeScript::Lock, "5cb181fe69c203756ed7e1ae64d1a4b3f183779a"),
            (
                NodeScript::LockWatching,
                "0429ead09598e45d95ca683872bfab73c177439d",
            ),
            (
                NodeScript::LockQueued,
                "3db897c9849cb8372f5027e52ce0b40bb9bfd58b",
            ),
            (
                NodeScript::LockQueuedMany,
                "c16d30b0c960dafd43eda0888a0a316e1f239948",
            ),
            (
                NodeScript::Unlock,
                "bfe237d22504a87c57b9f8fdfad73ac90648760f",
            ),
            (
                NodeScript::LeaveQueue,
                "2464399307533bf32cd85fe7dcdbbd6fb5ac7bd4",
            ),
            (
                NodeScript::Extend,
                "95cd6cf97575827636dfd849cd8fbe2e25700d71",
            ),
            (
                NodeScript::RaiseCounter,
                "cf84929bef875c51d616a45d19c6544662af5cf3",
            ),
            (
                NodeScript::LockShared,
                "40107af24a41fbcce0b9e59a923d1aa309aea6f5",
            ),
            (
                NodeScript::LockExclusive,
                "43f3c7ba56f296e04940017ea8ba15a86fd98a59",
            ),
            (
                NodeScript::Proclaim,
                "5ea7acf5d63979c2a845c672c1a864d5094a4102",
            ),
            (
                NodeScript::LockPermit,
                "487553280d55eebab0e3637abe40411af585acf9",
            ),
            (
                NodeScript::ExtendListed,
                "a726446785e13ebe05a854bb2041f1943dbdc0b3",
            ),
            (
                NodeScript::ExtendLeader,
                "e0022665364a31f081fe58ccfe6bfa4ceedd3c82",
            ),
            (
                NodeScript::ExtendMany,
                "e1512e4540bb8547d1f4ab0f9e12132de65ca645",
            ),
        ];
        assert_eq!(pinned.len(), NodeScript::ALL.len());
        for (script, sha1) in pinned {
            assert_eq!(script.sha1(), sha1, "{script:?}");
        }
    }

    #[test]
    fn all_lists_the_scripts_in_the_order_of_their_variants() {
        for (i, name) in NodeScript::ALL.into_iter().enumerate() {
            assert_eq!(name as usize, i);
        }
    }

    #[test]
    fn keys_follow_the_node_layout() {
        // One key: the key, its queue, its deadlines and its marker.
        assert_eq!(
            NodeScript::Unlock.keys(&["a"]),
            [
                "a",
                "quorumlock:waiters:a",
                "quorumlock:waiter-deadlines:a",
                "quorumlock:watched:a",
            ]
        );
        let many = NodeScript::LockQueuedMany.keys(&["a", "b"]);
        assert_eq!(many.len(), 8);
        assert_eq!(
            many[4..],
            [
                "quorumlock:waiters:b",
                "quorumlock:waiter-deadlines:b",
                "quorumlock:watched:a",
                "quorumlock:watched:b",
            ]
        );
        assert_eq!(NodeScript::LeaveQueue.keys(&["a", "b"]), many);
        assert_eq!(
            NodeScript::LockWatching.keys(&["a", "b"]),
            ["a", "b", "quorumlock:watched:a"]
        );
        assert_eq!(
            NodeScript::LockQueued.keys(&["a"]),
            ["a", "quorumlock:waiters:a", "quorumlock:waiter-deadlines:a"]
        );
        assert_eq!(NodeScript::Extend.keys(&["a", "b"]), ["a", "b"]);
    }
}
