//! The lock protocol on a Redis server: what each [`NodeRequest`](crate::node::NodeRequest)
//! becomes on a node (a command, or a call of one of the [`NodeScript`]s), every script's
//! text, and every key and channel name the lock uses there.
//!
//! It stands between the node contract ([`node`](crate::node)) and the two nodes that
//! carry requests out: the Redis node ([`backend`](crate::backend)) and the simulated node
//! (`sim`, feature `test-util`), which send the same commands and run the same scripts
//! through the same code, so that the simulation tests the protocol a real server runs.
//! It knows nothing of connections, and nothing of the coordinator above the contract.
//!
//! What a node stores, and which channels it announces on, is the part that clients of
//! different versions share: the names are public here ([`keys`]: constants for each
//! prefix, functions for each name) so that tools which inspect the nodes spell them the
//! same way, and the scripts' texts and hashes ([`NodeScript::source`],
//! [`NodeScript::sha1`]) are what a node caches. Changing either is a change of the wire
//! format, which clients of earlier versions would not follow.
//!
//! - `keys`: the names of keys and channels, with the tables of what each holds;
//! - `scripts`: the scripts by name, their Lua (under `lua/`) and the keys each takes;
//! - `script_calls`: how a node calls a script (`EVALSHA`, `EVAL` until cached, a reload
//!   on `NOSCRIPT`) and when a failed call is sent again;
//! - `wire`: the one mapping from a request to the command or script call that carries it
//!   out, and from the node's reply back to a [`NodeReply`](crate::node::NodeReply).

pub mod keys;
mod script_calls;
mod scripts;
mod wire;

pub(crate) use self::script_calls::{is_unreachable, CachedScript, NodeScripts, Resend};
pub use self::scripts::NodeScript;
pub(crate) use self::wire::{wire_announcing, Wire};
// The simulated node's entry, and what it reads replies with.
#[cfg(feature = "test-util")]
pub(crate) use self::wire::{wire, Read};
