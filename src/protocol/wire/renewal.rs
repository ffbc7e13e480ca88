//! A session's keep-alive on the wire: many extensions in one call of the `ExtendMany`
//! script, and its reply, one flag per lease.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::{script_call, Decimal, Read, Wire};
use crate::config::millis;
use crate::error::NodeError;
use crate::node::{Beside, Renewal};
use crate::protocol::keys::{leader_key, readers_key};
use crate::protocol::script_calls::{NodeScripts, Resend};
use crate::protocol::scripts::NodeScript;

/// The call that extends every one of `renewals` to `ttl`, each on its own. Repeatable,
/// like every extension: a compare-and-pexpire sent twice sets the same TTL twice.
pub(super) fn extend_many<'a>(
    scripts: &'a NodeScripts,
    renewals: &[Renewal<'_>],
    ttl: Duration,
) -> Result<Wire<'a>, NodeError> {
    if renewals.iter().any(|renewal| renewal.keys.is_empty()) {
        return Err(super::no_keys());
    }
    let mut keys: Vec<Arc<str>> = Vec::with_capacity(renewals.len() + 1);
    let counts: Vec<Decimal> = renewals
        .iter()
        .map(|renewal| Decimal::new(renewal.keys.len() as u64))
        .collect();
    let ttl = Decimal::new(millis(ttl));
    let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 3 * renewals.len());
    args.push(ttl.as_bytes());
    for (renewal, count) in renewals.iter().zip(&counts) {
        keys.extend(renewal.keys.iter().cloned());
        let beside: &[u8] = match renewal.beside {
            Beside::HolderList(name) => {
                keys.push(readers_key(name).into());
                b"l"
            }
            Beside::LeaderRecord => {
                let [key] = renewal.keys else {
                    return Err(super::one_key("extend leader"));
                };
                keys.push(leader_key(key).into());
                b"r"
            }
            Beside::Nothing => b"-",
        };
        args.extend([renewal.token.as_bytes(), count.as_bytes(), beside]);
    }
    let read = Read::Each(renewals.len());
    script_call(
        scripts,
        NodeScript::ExtendMany,
        &keys,
        &args,
        Resend::AlsoAfterReconnect,
        read,
    )
}

/// The flags of an `ExtendMany` reply of `count` leases: one `0` or `1` each.
pub(super) fn flags(reply: Value, count: usize) -> Result<Vec<bool>, NodeError> {
    let text: Vec<u8> =
        redis::from_redis_value(reply).map_err(|err| NodeError::Redis(err.to_string()))?;
    if text.len() != count || text.iter().any(|flag| !matches!(flag, b'0' | b'1')) {
        return Err(NodeError::Redis(format!(
            "unexpected reply to extend many ({count} leases): {:?}",
            String::from_utf8_lossy(&text)
        )));
    }
    Ok(text.iter().map(|flag| *flag == b'1').collect())
}
