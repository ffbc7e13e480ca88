//! From a [`NodeRequest`] to the one Redis command that carries it out, and from the
//! node's reply back to a [`NodeReply`]: the only place where a request is given its
//! script, its KEYS and its ARGV.
//!
//! Both the Redis node (`crate::backend`) and the simulated node (`crate::sim`, feature
//! `test-util`) send what [`wire`] says and read the answer with its [`Read`], so a new
//! request, or a new script for a request, runs the same way on a real server and in the
//! simulation. To add a request: a variant of [`NodeRequest`], its arm in [`wire`] (a plain
//! command, or a [`ScriptCall`] of a [`NodeScript`] with its arguments), and the [`Read`]
//! of its reply; a new script also needs its [`NodeScript`] variant, source and layout.

mod election;
mod renewal;
mod rwlock;

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use super::keys::RELEASE_CHANNEL_PREFIX;
use super::script_calls::{CachedScript, NodeScripts, Resend, ScriptCall};
use super::scripts::NodeScript;
use crate::config::millis;
use crate::error::NodeError;
use crate::held_as::HeldAs;
use crate::node::{NodeReply, NodeRequest, QueuePlace};
use crate::token::LockToken;

/// What a node does for one request.
pub(crate) enum Wire<'a> {
    /// Sends `command` once, and reads its reply with `read`.
    Command {
        /// The command.
        command: Cmd,
        /// How its reply answers the request.
        read: Read,
    },
    /// Calls `script` with `command` (reloading it on `NOSCRIPT`, resending as `resend`
    /// says), and reads its reply with `read`.
    Script {
        /// The script called, with whether the node is known to have it.
        script: &'a Arc<CachedScript>,
        /// The call: `EVALSHA` or `EVAL`, the keys, the arguments. Shared: by the sends of
        /// one request (a resend after a reload), and by the nodes a chunk of a session's
        /// extensions goes to.
        command: Arc<Cmd>,
        /// When a failed call is sent again.
        resend: Resend,
        /// How its reply answers the request.
        read: Read,
    },
    /// Watches the release announcements of a key (pub/sub, not a command).
    WatchReleases(&'a str),
    /// Watches the announcements of the keys reserved for a client's waiters.
    WatchReservations(&'a str),
    /// The node does not do this: it answers [`NodeReply::Unsupported`].
    Unsupported,
}

/// How a node's reply answers a request.
#[derive(Debug, Clone)]
pub(crate) enum Read {
    /// A script's integer: 1 did what was asked, anything else refused.
    Flag,
    /// A shared claim's reply: as [`Flag`](Self::Flag), or `held-as:<score>` when the
    /// name is held in another mode (the score of its live holders: 0 for readers, K for
    /// the permits of a semaphore of K).
    Claim,
    /// A script's integer: a counter's value.
    Counter,
    /// `GET` (`single`) or `MGET`: whether every value is the token.
    Holds {
        /// The token the keys must hold.
        token: LockToken,
        /// One key: the reply is a value, not an array of them.
        single: bool,
    },
    /// `GET` (`single`) or `MGET` of fencing counters: the highest, 0 for none.
    HighestCounter {
        /// One key: the reply is a value, not an array of them.
        single: bool,
    },
    /// Any reply: done.
    Done,
    /// `MGET` of an election's lock key and its leader record: the record, when current.
    Proclamation,
    /// An `ExtendMany` reply: one flag per lease, of this many leases.
    Each(usize),
}

/// The command, or the script call, that carries out `request` on a node whose scripts
/// are `scripts`, which announces releases when `announce` (see
/// [`RedisNode::announce_releases`](crate::backend::RedisNode::announce_releases)).
// The simulated nodes' entry; Redis nodes pick their channel ([`wire_announcing`]).
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub(crate) fn wire<'a>(
    request: NodeRequest<'a>,
    scripts: &'a NodeScripts,
    announce: bool,
) -> Result<Wire<'a>, NodeError> {
    let channel = if announce { RELEASE_CHANNEL_PREFIX } else { "" };
    wire_announcing(request, scripts, channel)
}

/// [`wire`], announcing releases on `channel` and the key (none when empty): the classic
/// [`RELEASE_CHANNEL_PREFIX`], or a Redis Cluster member's sharded one
/// ([`SHARDED_RELEASE_CHANNEL_PREFIX`](super::keys::SHARDED_RELEASE_CHANNEL_PREFIX)).
pub(crate) fn wire_announcing<'a>(
    request: NodeRequest<'a>,
    scripts: &'a NodeScripts,
    channel: &'static str,
) -> Result<Wire<'a>, NodeError> {
    let announce = !channel.is_empty();
    let repeatable = |name, keys: &[Arc<str>], args: &[&[u8]], read| {
        script_call(scripts, name, keys, args, Resend::AlsoAfterReconnect, read)
    };
    Ok(match request {
        NodeRequest::Lock { keys, token, ttl } => lock(scripts, keys, token, ttl)?,
        NodeRequest::Unlock { keys, token } => repeatable(
            NodeScript::Unlock,
            keys,
            &[token.as_bytes(), channel.as_bytes()],
            Read::Flag,
        )?,
        NodeRequest::Extend { keys, token, ttl } => {
            let ttl = Decimal::new(millis(ttl));
            repeatable(
                NodeScript::Extend,
                keys,
                &[token.as_bytes(), ttl.as_bytes()],
                Read::Flag,
            )?
        }
        NodeRequest::Holds { keys, token } => Wire::Command {
            command: values(keys)?,
            read: Read::Holds {
                token: token.clone(),
                single: keys.len() == 1,
            },
        },
        NodeRequest::ReadCounter { keys } => Wire::Command {
            command: values(keys)?,
            read: Read::HighestCounter {
                single: keys.len() == 1,
            },
        },
        NodeRequest::RaiseCounter { keys, value } => {
            let value = Decimal::new(value);
            repeatable(
                NodeScript::RaiseCounter,
                keys,
                &[value.as_bytes()],
                Read::Counter,
            )?
        }
        NodeRequest::LockWatching {
            keys,
            token,
            ttl,
            interest,
        } => {
            if !announce {
                return lock(scripts, keys, token, ttl);
            }
            let (ttl, interest) = (
                Decimal::new(millis(ttl)),
                Decimal::new(millis(interest).max(1)),
            );
            let args = [token.as_bytes(), ttl.as_bytes(), interest.as_bytes()];
            lock_script(scripts, NodeScript::LockWatching, keys, &args)?
        }
        NodeRequest::LockQueued {
            keys,
            token,
            ttl,
            place,
            stamp,
        } => lock_queued(scripts, keys, token, ttl, place, stamp, channel)?,
        NodeRequest::LeaveQueue { keys, waiter } => {
            // A waiter for several keys may be queued under any of them.
            let args = [waiter.as_bytes(), channel.as_bytes()];
            repeatable(NodeScript::LeaveQueue, keys, &args, Read::Done)?
        }
        NodeRequest::WatchReleases { key } if announce => Wire::WatchReleases(key),
        NodeRequest::WatchReservations { client } if announce => Wire::WatchReservations(client),
        NodeRequest::WatchReleases { .. } | NodeRequest::WatchReservations { .. } => {
            Wire::Unsupported
        }
        NodeRequest::LockShared {
            keys,
            token,
            ttl,
            writer,
        } => rwlock::lock_shared(scripts, keys, token, ttl, writer)?,
        NodeRequest::LockExclusive {
            keys,
            token,
            ttl,
            waiting,
        } => rwlock::lock_exclusive(scripts, keys, token, ttl, waiting)?,
        NodeRequest::LockPermit {
            keys,
            token,
            ttl,
            name,
            permits,
        } => rwlock::lock_permit(scripts, keys, token, ttl, name, permits)?,
        NodeRequest::Proclaim {
            keys,
            token,
            record,
        } => election::proclaim(scripts, keys, token, record)?,
        NodeRequest::ReadProclamation { keys } => election::read_proclamation(keys)?,
        NodeRequest::ExtendListed {
            keys,
            token,
            ttl,
            name,
        } => rwlock::extend_listed(scripts, keys, token, ttl, name)?,
        NodeRequest::ExtendLeader { keys, token, ttl } => {
            election::extend_leader(scripts, keys, token, ttl)?
        }
        NodeRequest::ExtendMany {
            renewals,
            ttl,
            encoding,
        } => renewal::extend_many(scripts, renewals, ttl, encoding)?,
    })
}

/// A lock attempt, by the lock script for one key as for several: a plain `SET NX PX`
/// cannot see the readers and permits of the name, which the script refuses as well.
fn lock<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
) -> Result<Wire<'a>, NodeError> {
    let ttl = Decimal::new(millis(ttl));
    let args = [token.as_bytes(), ttl.as_bytes()];
    lock_script(scripts, NodeScript::Lock, keys, &args)
}

/// A queued waiter's lock attempt. A waiter for several keys may move between their queues
/// and pass on a key reserved for it, so it needs every key's queue and marker, and the
/// channel prefix to announce what it passes on; it takes no grants (a `stamp` is for one
/// key only).
fn lock_queued<'a>(
    scripts: &'a NodeScripts,
    keys: &[Arc<str>],
    token: &LockToken,
    ttl: Duration,
    place: &QueuePlace,
    stamp: Option<u64>,
    channel: &str,
) -> Result<Wire<'a>, NodeError> {
    let ttl = Decimal::new(millis(ttl));
    let ticket = Decimal::new(place.ticket);
    let lifetime = Decimal::new(millis(place.lifetime).max(1));
    let stamp = stamp.map(Decimal::new);
    let mut args = [
        token.as_bytes(),
        ttl.as_bytes(),
        place.waiter.as_bytes(),
        ticket.as_bytes(),
        lifetime.as_bytes(),
        channel.as_bytes(),
    ];
    match keys {
        [] => Err(no_keys()),
        [_] => match &stamp {
            Some(stamp) => {
                args[5] = stamp.as_bytes();
                lock_script(scripts, NodeScript::LockQueued, keys, &args)
            }
            None => lock_script(scripts, NodeScript::LockQueued, keys, &args[..5]),
        },
        _ => lock_script(scripts, NodeScript::LockQueuedMany, keys, &args),
    }
}

/// A call of one of the lock scripts: a lock call dropped midway took nothing and need not
/// go on, so it is sent again only after a reload.
fn lock_script<'a>(
    scripts: &'a NodeScripts,
    name: NodeScript,
    keys: &[Arc<str>],
    args: &[&[u8]],
) -> Result<Wire<'a>, NodeError> {
    script_call(scripts, name, keys, args, Resend::AfterReload, Read::Flag)
}

/// A call of the script `name` on `keys` with `args`.
fn script_call<'a>(
    scripts: &'a NodeScripts,
    name: NodeScript,
    keys: &[Arc<str>],
    args: &[&[u8]],
    resend: Resend,
    read: Read,
) -> Result<Wire<'a>, NodeError> {
    if keys.is_empty() {
        return Err(no_keys());
    }
    let script = scripts.get(name);
    Ok(Wire::Script {
        script,
        command: Arc::new(ScriptCall::new(script, keys, args).command()),
        resend,
        read,
    })
}

/// The values of `keys`: `GET` for one, `MGET` for several.
fn values(keys: &[Arc<str>]) -> Result<Cmd, NodeError> {
    if keys.is_empty() {
        return Err(no_keys());
    }
    let mut command = redis::cmd(if keys.len() == 1 { "GET" } else { "MGET" });
    for key in keys {
        command.arg(&**key);
    }
    Ok(command)
}

impl Read {
    /// The answer to the request in the node's `reply` (an error reply was made an error
    /// before).
    pub(crate) fn reply(&self, reply: Value) -> Result<NodeReply, NodeError> {
        Ok(match self {
            Read::Flag => NodeReply::Done(integer(reply)? == 1),
            Read::Claim => match reply {
                Value::BulkString(text) => NodeReply::HeldAs(held_as(&text)?),
                other => NodeReply::Done(integer(other)? == 1),
            },
            Read::Counter => NodeReply::Counter(integer(reply)?),
            Read::Holds { token, single } => {
                let values = strings(reply, *single)?;
                let all = values
                    .iter()
                    .all(|value| value.as_deref() == Some(token.as_str()));
                NodeReply::Done(all)
            }
            Read::HighestCounter { single } => {
                let mut highest = 0;
                for value in strings(reply, *single)?.into_iter().flatten() {
                    let counter = value.parse::<u64>().map_err(|_| {
                        NodeError::Redis(format!("a fencing counter holds {value:?}, not a number"))
                    })?;
                    highest = highest.max(counter);
                }
                NodeReply::Counter(highest)
            }
            Read::Done => NodeReply::Done(true),
            Read::Proclamation => NodeReply::Text(election::proclamation(reply)?),
            Read::Each(count) => NodeReply::Renewed(renewal::flags(reply, *count)?),
        })
    }
}

/// The mode of a `held-as:<score>` reply.
fn held_as(text: &[u8]) -> Result<HeldAs, NodeError> {
    let score = text
        .strip_prefix(b"held-as:")
        .and_then(|score| std::str::from_utf8(score).ok())
        .and_then(|score| score.parse::<u32>().ok())
        .ok_or_else(|| {
            NodeError::Redis(format!(
                "unexpected reply to a shared claim: {:?}",
                String::from_utf8_lossy(text)
            ))
        })?;
    Ok(match score {
        0 => HeldAs::Readers,
        permits => HeldAs::Permits(permits),
    })
}

/// A script's integer reply.
fn integer(reply: Value) -> Result<u64, NodeError> {
    redis::from_redis_value(reply).map_err(|err| NodeError::Redis(err.to_string()))
}

/// The values of a `GET` (`single`) or `MGET` reply.
fn strings(reply: Value, single: bool) -> Result<Vec<Option<String>>, NodeError> {
    let parsed = if single {
        redis::from_redis_value::<Option<String>>(reply).map(|value| vec![value])
    } else {
        redis::from_redis_value(reply)
    };
    parsed.map_err(|err| NodeError::Redis(err.to_string()))
}

/// A number in decimal, written on the stack: a script argument without an allocation
/// (three `to_string`s per queued attempt were a tenth of a request's allocations).
struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    fn new(mut value: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// The error for a request of the read-write lock or the election given other than one
/// key, which they never send.
fn one_key(what: &str) -> NodeError {
    NodeError::Redis(format!("a {what} request takes exactly one key"))
}

/// The error for a call without keys, which a lock never makes.
fn no_keys() -> NodeError {
    NodeError::Redis("a lock needs at least one key".to_owned())
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn decimals_read_as_their_numbers() {
        for value in [0, 7, 10, 999, 30_000, 1 << 53, u64::MAX] {
            assert_eq!(Decimal::new(value).as_bytes(), value.to_string().as_bytes());
        }
    }
}
