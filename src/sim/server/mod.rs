//! A stand-in for one Redis server, in memory: a [`Keyspace`] with the commands the lock
//! nodes send, and a [`ScriptHost`] that runs the nodes' Lua scripts
//! ([`NodeScript`](crate::protocol::NodeScript)) on it the way Redis 7 does, so that a
//! simulated node can run the very scripts a real node runs instead of a second,
//! hand-written version of them.
//!
//! The node's clock is the caller's: every command and script takes the node-clock reading
//! it runs at (a [`Duration`](std::time::Duration) since the node's epoch). Keys expire, and
//! `TIME` answers, by that reading alone, so a simulation decides how node time passes.
//!
//! ```
//! use std::time::Duration;
//! use quorumlock::protocol::NodeScript;
//! use quorumlock::sim::{ScriptHost, ServerReply};
//!
//! let mut server = ScriptHost::new();
//! let now = Duration::from_secs(1_000);
//! let keys = NodeScript::Lock.keys(&["a", "b"]);
//! let taken = server.eval(now, NodeScript::Lock.source(), &keys, &["token-1", "30000"]);
//! assert_eq!(taken, ServerReply::Integer(1));
//! // Both keys are held, for 30 s of node time.
//! assert_eq!(server.execute(now, &["GET", "b"]), ServerReply::Bulk(b"token-1".to_vec()));
//! let later = now + Duration::from_millis(30_001);
//! assert_eq!(server.execute(later, &["GET", "b"]), ServerReply::Nil);
//! ```
//!
//! What it implements and what it does not is listed in `docs/testing-properties.md`
//! ("The script host"); `tests/servers/script_host.rs` checks it against a real `redis-server`.

mod commands;
mod keyspace;
mod lua_values;
mod number;
mod reply;
mod script_host;

pub use self::keyspace::{Data, Keyspace, LiveKey, Published};
pub use self::reply::ServerReply;
pub use self::script_host::ScriptHost;
