//! The lock family's requests on the wire: the read and write sides of a read-write lock
//! and an election leader's record, each with the full KEYS its script takes (the
//! family's keys carry prefixes of their own; see `node::scripts::family`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::{lock_script, values, Read, Wire};
use crate::config::millis;
use crate::error::NodeError;
use crate::node::scripts::{
    NodeScript, NodeScripts, Resend, ScriptCall, LEADER_PREFIX, READERS_PREFIX,
    WRITER_WAITING_PREFIX,
};
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
        format!("{READERS_PREFIX}{writer}").into(),
        format!("{WRITER_WAITING_PREFIX}{writer}").into(),
    ];
    let ttl = millis(ttl).to_string();
    let args = [token.as_bytes(), ttl.as_bytes()];
    lock_script(scripts, NodeScript::LockShared, &keys, &args)
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
        format!("{READERS_PREFIX}{writer}").into(),
        format!("{WRITER_WAITING_PREFIX}{writer}").into(),
    ];
    // A waiting time under a millisecond still marks the writer as waiting.
    let waiting = waiting.map_or(0, |waiting| millis(waiting).max(1));
    let (ttl, waiting) = (millis(ttl).to_string(), waiting.to_string());
    let args = [token.as_bytes(), ttl.as_bytes(), waiting.as_bytes()];
    lock_script(scripts, NodeScript::LockExclusive, &keys, &args)
}

/// The leader's record beside the lock key `keys[0]`, while it holds `token`. Safe to
/// repeat: the same record written twice.
pub(super) fn proclaim<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    record: &str,
) -> Result<Wire<'a>, NodeError> {
    let [key] = keys else {
        return Err(one_key("proclaim"));
    };
    let keys: [Arc<str>; 2] = [Arc::clone(key), format!("{LEADER_PREFIX}{key}").into()];
    let script = scripts.get(NodeScript::Proclaim);
    let args = [token.as_bytes(), record.as_bytes()];
    Ok(Wire::Script {
        script,
        command: ScriptCall::new(script, &keys, &args).command(),
        resend: Resend::AlsoAfterReconnect,
        read: Read::Flag,
    })
}

/// The lock key `keys[0]` and the leader record, read at once (`MGET`).
pub(super) fn read_proclamation(keys: &[Arc<str>]) -> Result<Wire<'static>, NodeError> {
    let [key] = keys else {
        return Err(one_key("read proclamation"));
    };
    let both: [Arc<str>; 2] = [Arc::clone(key), format!("{LEADER_PREFIX}{key}").into()];
    Ok(Wire::Command {
        command: values(&both)?,
        read: Read::Proclamation,
    })
}

/// The record in an `MGET` of the lock key and the stored record `<token> <record>`: the
/// record, when the key holds the token it was written with.
pub(super) fn proclamation(reply: Value) -> Result<Option<String>, NodeError> {
    let values: Vec<Option<String>> =
        redis::from_redis_value(reply).map_err(|err| NodeError::Redis(err.to_string()))?;
    let (Some(Some(holder)), Some(Some(stored))) = (values.first(), values.get(1)) else {
        return Ok(None);
    };
    Ok(current_record(holder, stored).map(str::to_owned))
}

/// The record part of a stored leader record `<token> <record>`, when `holder` (the lock
/// key's token now) is the token it was written with.
fn current_record<'a>(holder: &str, stored: &'a str) -> Option<&'a str> {
    let (token, record) = stored.split_once(' ')?;
    (token == holder).then_some(record)
}

/// The error for a family request given other than one key, which the family never sends.
fn one_key(what: &str) -> NodeError {
    NodeError::Redis(format!("a {what} request takes exactly one key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_current_only_under_its_own_token() {
        assert_eq!(current_record("t1", "t1 7 host a"), Some("7 host a"));
        assert_eq!(current_record("t2", "t1 7 host a"), None);
        assert_eq!(current_record("t1", "t1"), None);
    }
}
