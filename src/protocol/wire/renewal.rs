//! A session's keep-alive on the wire: many extensions in one call of the `ExtendMany`
//! script, and its reply, one flag per lease. The call is the same for every node a chunk
//! goes to, so the first node to send it makes it, and the others send the same bytes
//! (see [`SharedEncoding`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{Cmd, Value};

use super::{Decimal, Read, Wire};
use crate::config::millis;
use crate::error::NodeError;
use crate::node::{Beside, Renewal, SharedEncoding};
use crate::protocol::keys::{leader_key, readers_key};
use crate::protocol::script_calls::{CachedScript, NodeScripts, Resend, ScriptCall};
use crate::protocol::scripts::NodeScript;

/// The calls of one `ExtendMany` request, kept in its [`SharedEncoding`] for every node it
/// goes to: by the script's hash, for the nodes known to have the script, and whole, for
/// the others (until they ran it once, or always: a Redis Cluster member's).
#[derive(Default)]
struct SharedCalls {
    by_hash: OnceLock<Arc<Cmd>>,
    whole: OnceLock<Arc<Cmd>>,
}

/// The call that extends every one of `renewals` to `ttl`, each on its own; the one kept
/// in `encoding` when another node made it already. Repeatable, like every extension: a
/// compare-and-pexpire sent twice sets the same TTL twice.
pub(super) fn extend_many<'a>(
    scripts: &'a NodeScripts,
    renewals: &[Renewal<'_>],
    ttl: Duration,
    encoding: &SharedEncoding,
) -> Result<Wire<'a>, NodeError> {
    for renewal in renewals {
        if renewal.keys.is_empty() {
            return Err(super::no_keys());
        }
        if renewal.beside == Beside::LeaderRecord && renewal.keys.len() != 1 {
            return Err(super::one_key("extend leader"));
        }
    }
    let script = scripts.get(NodeScript::ExtendMany);
    let by_hash = script.is_cached();
    let make = || Arc::new(command(script, renewals, ttl, by_hash));
    let command = match encoding.get_or_encode(SharedCalls::default) {
        Some(calls) => {
            let slot = if by_hash {
                &calls.by_hash
            } else {
                &calls.whole
            };
            Arc::clone(slot.get_or_init(make))
        }
        None => make(),
    };
    Ok(Wire::Script {
        script,
        command,
        resend: Resend::AlsoAfterReconnect,
        read: Read::Each(renewals.len()),
    })
}

/// The call of `script` (`ExtendMany`) for `renewals`, by the script's hash when
/// `by_hash`, else whole.
fn command(
    script: &Arc<CachedScript>,
    renewals: &[Renewal<'_>],
    ttl: Duration,
    by_hash: bool,
) -> Cmd {
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
                keys.push(leader_key(&renewal.keys[0]).into());
                b"r"
            }
            Beside::Nothing => b"-",
        };
        args.extend([renewal.token.as_bytes(), count.as_bytes(), beside]);
    }
    ScriptCall::new(script, &keys, &args).command_by(by_hash)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::LockToken;

    fn command(wire: Wire<'_>) -> Arc<Cmd> {
        match wire {
            Wire::Script { command, .. } => command,
            _ => panic!("an ExtendMany is a script call"),
        }
    }

    #[test]
    fn the_nodes_of_one_request_send_one_command_of_each_form() {
        let keys: Vec<Arc<str>> = vec!["a".into()];
        let token = LockToken::generate();
        let renewals = [Renewal {
            keys: &keys,
            token: &token,
            beside: Beside::Nothing,
        }];
        let ttl = Duration::from_secs(30);
        let encoding = SharedEncoding::new();
        let (cached, uncached) = (NodeScripts::cached(), NodeScripts::new());
        let by_hash = [&cached, &NodeScripts::cached()]
            .map(|scripts| command(extend_many(scripts, &renewals, ttl, &encoding).unwrap()));
        let whole = [&uncached, &NodeScripts::new()]
            .map(|scripts| command(extend_many(scripts, &renewals, ttl, &encoding).unwrap()));
        assert!(Arc::ptr_eq(&by_hash[0], &by_hash[1]));
        assert!(Arc::ptr_eq(&whole[0], &whole[1]));
        let first = |command: &Cmd| match command.args_iter().next() {
            Some(redis::Arg::Simple(name)) => name.to_vec(),
            _ => Vec::new(),
        };
        assert_eq!(first(&by_hash[0]), b"EVALSHA");
        assert_eq!(first(&whole[0]), b"EVAL");
        // Another request's encoding: a command of its own.
        let other = command(extend_many(&cached, &renewals, ttl, &SharedEncoding::new()).unwrap());
        assert!(!Arc::ptr_eq(&other, &by_hash[0]));
    }

    #[test]
    fn a_leader_record_of_more_than_one_key_is_refused() {
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let token = LockToken::generate();
        let renewals = [Renewal {
            keys: &keys,
            token: &token,
            beside: Beside::LeaderRecord,
        }];
        let scripts = NodeScripts::new();
        let refused = extend_many(
            &scripts,
            &renewals,
            Duration::from_secs(1),
            &SharedEncoding::new(),
        );
        assert!(matches!(refused, Err(NodeError::Redis(_))));
    }
}
