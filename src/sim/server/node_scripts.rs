//! [`NodeScript`]: the Lua scripts a real lock node runs, by name, with the keys each takes.

use std::sync::Arc;

pub use crate::node::scripts::NodeScript;
use crate::node::scripts::{CachedScript, ScriptCall};

/// What a simulation needs of the node scripts beyond what a node sends them with.
impl NodeScript {
    /// The KEYS of a call on the lock keys `keys` (for `RaiseCounter`, the counter keys), in
    /// the node's layout, as the node lays them out (the same code builds both): the keys;
    /// then, for the queue scripts, each key's queue and deadlines; then the watch markers
    /// (of the first key only for `LockWatching`).
    pub fn keys(self, keys: &[&str]) -> Vec<String> {
        let keys: Vec<Arc<str>> = keys.iter().map(|key| Arc::from(*key)).collect();
        let script = Arc::new(CachedScript::new(self));
        let call = ScriptCall::new(&script, &keys, &[]).command();
        // EVAL, the code, the key count, then the keys (no arguments were given).
        call.args_iter()
            .skip(3)
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect()
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
