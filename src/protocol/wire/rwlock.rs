//! The read-write lock's requests on the wire: the read and write sides, each with the
//! full KEYS its script takes (the reader list and the writer-waiting mark, named in
//! [`keys`](crate::protocol::keys)).

use std::sync::Arc;
use std::time::Duration;

use super::{lock_script, one_key, script_call, Read, Wire};
use crate::config::millis;
use crate::error::NodeError;
use crate::protocol::keys::{readers_key, writer_waiting_key};
use crate::protocol::script_calls::NodeScripts;
use crate::protocol::script_calls::Resend;
use crate::protocol::scripts::NodeScript;
use crate::token::LockToken;

/// The read side: the reader's entry `keys[0]`, beside the write side `writer`.
pub(super) fn lock_shared<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
    writer: &str,
) -> Result<Wire<'a>, NodeError> {
    let [entry] = keys else {
        return Err(one_key("lock shared"));
    };
    let keys: [Arc<str>; 4] = [
        Arc::clone(entry),
        writer.into(),
        readers_key(writer).into(),
        writer_waiting_key(writer).into(),
    ];
    let ttl = millis(ttl).to_string();
    let args = [token.as_bytes(), ttl.as_bytes()];
    claim_script(scripts, NodeScript::LockShared, &keys, &args)
}

/// The write side `keys[0]`, marking a writer as waiting for `waiting` when refused.
pub(super) fn lock_exclusive<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
    waiting: Option<Duration>,
) -> Result<Wire<'a>, NodeError> {
    let [writer] = keys else {
        return Err(one_key("lock exclusive"));
    };
    let keys: [Arc<str>; 3] = [
        Arc::clone(writer),
        readers_key(writer).into(),
        writer_waiting_key(writer).into(),
    ];
    // A waiting time under a millisecond still marks the writer as waiting.
    let waiting = waiting.map_or(0, |waiting| millis(waiting).max(1));
    let (ttl, waiting) = (millis(ttl).to_string(), waiting.to_string());
    let args = [token.as_bytes(), ttl.as_bytes(), waiting.as_bytes()];
    lock_script(scripts, NodeScript::LockExclusive, &keys, &args)
}

/// A permit of `permits` in the slot `keys[0]`, listed among the holders of the name's
/// lock key `name`.
pub(super) fn lock_permit<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
    name: &str,
    permits: u32,
) -> Result<Wire<'a>, NodeError> {
    let [slot] = keys else {
        return Err(one_key("lock permit"));
    };
    let keys: [Arc<str>; 3] = [Arc::clone(slot), name.into(), readers_key(name).into()];
    let (ttl, permits) = (millis(ttl).to_string(), permits.to_string());
    let args = [token.as_bytes(), ttl.as_bytes(), permits.as_bytes()];
    claim_script(scripts, NodeScript::LockPermit, &keys, &args)
}

/// The extension of the shared holders' entries `keys` (a reader's entry, a permit's
/// slot), raising the expiry of the holder list of `name` with them. Safe to repeat, as
/// every extension: the same TTL set again, the list's expiry only raised.
pub(super) fn extend_listed<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
    name: &str,
) -> Result<Wire<'a>, NodeError> {
    let with_list: Vec<Arc<str>> = keys
        .iter()
        .cloned()
        .chain([Arc::from(readers_key(name))])
        .collect();
    let ttl = millis(ttl).to_string();
    let args = [token.as_bytes(), ttl.as_bytes()];
    let (name, read) = (NodeScript::ExtendListed, Read::Flag);
    script_call(
        scripts,
        name,
        &with_list,
        &args,
        Resend::AlsoAfterReconnect,
        read,
    )
}

/// A call of a shared claim's script, read as [`Read::Claim`]; sent again only after a
/// reload, as every lock call.
fn claim_script<'a>(
    scripts: &'a NodeScripts,
    name: NodeScript,
    keys: &[Arc<str>],
    args: &[&[u8]],
) -> Result<Wire<'a>, NodeError> {
    script_call(scripts, name, keys, args, Resend::AfterReload, Read::Claim)
}
