//! [`NodeScript`]: the Lua scripts a real lock node runs, by name, with the keys each takes.

use crate::node::scripts::{self, DEADLINES_PREFIX, QUEUE_PREFIX, WATCHED_PREFIX};

/// One of the Lua scripts that [`RedisNode`](crate::node::RedisNode) sends to Redis: the
/// very text, so that a [`ScriptHost`](super::ScriptHost) runs what a real node runs.
///
/// Each script's arguments (ARGV) are documented on the node's scripts; [`keys`](Self::keys)
/// lays out its KEYS as the node does.
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
}

impl NodeScript {
    /// Every script, in the order the node's scripts are listed.
    pub const ALL: [NodeScript; 8] = [
        NodeScript::Lock,
        NodeScript::LockWatching,
        NodeScript::LockQueued,
        NodeScript::LockQueuedMany,
        NodeScript::Unlock,
        NodeScript::LeaveQueue,
        NodeScript::Extend,
        NodeScript::RaiseCounter,
    ];

    /// The script's Lua source, exactly as the node sends it.
    pub fn source(self) -> &'static str {
        match self {
            NodeScript::Lock => scripts::LOCK,
            NodeScript::LockWatching => scripts::LOCK_WATCHING,
            NodeScript::LockQueued => scripts::LOCK_QUEUED,
            NodeScript::LockQueuedMany => scripts::LOCK_QUEUED_MANY,
            NodeScript::Unlock => scripts::UNLOCK,
            NodeScript::LeaveQueue => scripts::LEAVE_QUEUE,
            NodeScript::Extend => scripts::EXTEND,
            NodeScript::RaiseCounter => scripts::RAISE_COUNTER,
        }
    }

    /// The KEYS of a call on the lock keys `keys` (for `RaiseCounter`, the counter keys), in
    /// the node's layout: the keys; then, for the queue scripts, each key's queue and
    /// deadlines; then the watch markers (of the first key only for `LockWatching`).
    pub fn keys(self, keys: &[&str]) -> Vec<String> {
        let first = &keys[..keys.len().min(1)];
        let (queues_of, markers_of): (&[&str], &[&str]) = match self {
            NodeScript::Lock | NodeScript::Extend | NodeScript::RaiseCounter => (&[], &[]),
            NodeScript::LockWatching => (&[], first),
            NodeScript::LockQueued => (keys, &[]),
            NodeScript::LockQueuedMany | NodeScript::Unlock | NodeScript::LeaveQueue => {
                (keys, keys)
            }
        };
        let mut laid_out: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
        for key in queues_of {
            laid_out.push(format!("{QUEUE_PREFIX}{key}"));
            laid_out.push(format!("{DEADLINES_PREFIX}{key}"));
        }
        laid_out.extend(
            markers_of
                .iter()
                .map(|key| format!("{WATCHED_PREFIX}{key}")),
        );
        laid_out
    }

    /// The script's SHA-1, by which `EVALSHA` names it.
    pub fn sha1(self) -> String {
        redis::Script::new(self.source()).get_hash().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
