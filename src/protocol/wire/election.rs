//! An election's requests on the wire: the leader's record written beside the lock key
//! while the key holds the leader's token, and read together with the key.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::{one_key, values, Read, Wire};
use crate::config::millis;
use crate::error::NodeError;
use crate::protocol::keys::leader_key;
use crate::protocol::script_calls::{NodeScripts, Resend, ScriptCall};
use crate::protocol::scripts::NodeScript;
use crate::token::LockToken;

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
    let keys: [Arc<str>; 2] = [Arc::clone(key), leader_key(key).into()];
    let script = scripts.get(NodeScript::Proclaim);
    let args = [token.as_bytes(), record.as_bytes()];
    Ok(Wire::Script {
        script,
        command: Arc::new(ScriptCall::new(script, &keys, &args).command()),
        resend: Resend::AlsoAfterReconnect,
        read: Read::Flag,
    })
}

/// The extension of the election's lock key `keys[0]`, with the leader record written
/// under `token`. Safe to repeat: the same TTL set again.
pub(super) fn extend_leader<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
) -> Result<Wire<'a>, NodeError> {
    let [key] = keys else {
        return Err(one_key("extend leader"));
    };
    let keys: [Arc<str>; 2] = [Arc::clone(key), leader_key(key).into()];
    let script = scripts.get(NodeScript::ExtendLeader);
    let ttl = millis(ttl).to_string();
    let args = [token.as_bytes(), ttl.as_bytes()];
    Ok(Wire::Script {
        script,
        command: Arc::new(ScriptCall::new(script, &keys, &args).command()),
        resend: Resend::AlsoAfterReconnect,
        read: Read::Flag,
    })
}

/// The lock key `keys[0]` and the leader record, read at once (`MGET`).
pub(super) fn read_proclamation(keys: &[Arc<str>]) -> Result<Wire<'static>, NodeError> {
    let [key] = keys else {
        return Err(one_key("read proclamation"));
    };
    let both: [Arc<str>; 2] = [Arc::clone(key), leader_key(key).into()];
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
