//! How a node calls a script: one command per call, `EVALSHA` once the node is known to
//! have the script and `EVAL` until then ([`CachedScript`]); a node that lost its scripts
//! (a restart, a `SCRIPT FLUSH`) answers `NOSCRIPT`, and the script is loaded and called
//! again ([`CachedScript::invoke`]). Which script a request calls, with which KEYS and
//! ARGV, is decided once for every node in [`wire`](mod@super::wire); this is how the call is
//! written and sent, the same for a Redis node and a simulated one.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use redis::{Cmd, ErrorKind, RedisError, RedisResult, RedisWrite, ServerErrorKind, Value};

use super::keys::{DEADLINES_PREFIX, QUEUE_PREFIX, WATCHED_PREFIX};
use super::scripts::NodeScript;

/// The node's scripts, each with whether the node is known to have it cached: one set per
/// connection to a node (a node that lost its scripts is reloaded from here).
pub(crate) struct NodeScripts {
    scripts: Vec<Arc<CachedScript>>,
}

impl NodeScripts {
    /// Every script, none known to be cached yet.
    pub(crate) fn new() -> Self {
        NodeScripts {
            scripts: NodeScript::ALL
                .iter()
                .map(|name| Arc::new(CachedScript::new(*name)))
                .collect(),
        }
    }

    /// Every script, always sent whole (`EVAL`), never by its hash: for a Redis Cluster
    /// member, whose masters each cache scripts of their own, so that no call meets a
    /// `NOSCRIPT` on a master that has not run it yet (its reload would let a later
    /// request of the process, such as the next lock attempt, overtake an unlock).
    pub(crate) fn sent_whole() -> Self {
        let scripts = NodeScripts::new();
        for script in &scripts.scripts {
            script.always_whole.store(true, Ordering::Relaxed);
        }
        scripts
    }

    /// Every script, as if the node had run each once (tests of the calls by hash).
    #[cfg(test)]
    pub(crate) fn cached() -> Self {
        let scripts = NodeScripts::new();
        for script in &scripts.scripts {
            script.cached.store(true, Ordering::Relaxed);
        }
        scripts
    }

    /// The script `name`.
    pub(crate) fn get(&self, name: NodeScript) -> &Arc<CachedScript> {
        // `new` made one per name, in the order of `ALL`, whose order the enum follows.
        &self.scripts[name as usize]
    }
}

/// A script, sent by its hash (`EVALSHA`) once the node ran it, and whole (`EVAL`, which
/// caches it on the node) until then.
///
/// Either way a call is one command: a request that nobody awaits any more (a lock request
/// still in flight when a quorum already granted the lock) runs to its end once sent,
/// instead of stopping at a `NOSCRIPT` answer that nobody is there to act on.
pub(crate) struct CachedScript {
    name: NodeScript,
    /// Whether the node answered a call of this script (and so has it cached).
    cached: AtomicBool,
    /// `SCRIPT LOAD` of the script, made for a node that lost it.
    load: OnceLock<Cmd>,
    /// Sent whole on every call ([`NodeScripts::sent_whole`]).
    always_whole: AtomicBool,
}

impl CachedScript {
    /// The script `name`, not known to be cached on the node yet.
    pub(crate) fn new(name: NodeScript) -> Self {
        CachedScript {
            name,
            cached: AtomicBool::new(false),
            load: OnceLock::new(),
            always_whole: AtomicBool::new(false),
        }
    }

    /// Whether the node is known to have the script, so that a call goes by its hash.
    pub(crate) fn is_cached(&self) -> bool {
        self.cached.load(Ordering::Relaxed)
    }

    /// Runs `command`, a call of this script, through `send`, and returns the node's
    /// reply. When the node answers `NOSCRIPT` (after a restart or a `SCRIPT FLUSH`), the
    /// script is loaded and the call sent again, up to [`MOST_RELOADS`] times: a cache lost
    /// again between the load and the call (a second restart while the first call's answer
    /// was on its way) is met by another load. With [`Resend::AlsoAfterReconnect`]
    /// the call is also sent once more when the connection broke: the first command after
    /// a reset fails while the connection is re-made.
    pub(crate) async fn invoke<'c, S, F>(
        &'c self,
        command: &'c Cmd,
        resend: Resend,
        mut send: S,
    ) -> RedisResult<Value>
    where
        S: FnMut(&'c Cmd) -> F,
        F: Future<Output = RedisResult<Value>>,
    {
        let mut reloads = 0;
        let mut reconnected = resend == Resend::AfterReload;
        loop {
            match send(command).await {
                Err(err)
                    if reloads < MOST_RELOADS
                        && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    reloads += 1;
                    self.cached.store(false, Ordering::Relaxed);
                    let load = self.load.get_or_init(|| {
                        let mut load = redis::cmd("SCRIPT");
                        load.arg("LOAD").arg(self.name.source());
                        load
                    });
                    send(load).await?;
                }
                Err(err) if !reconnected && is_unreachable(&err) => reconnected = true,
                Ok(reply) => {
                    if !self.always_whole.load(Ordering::Relaxed) {
                        self.cached.store(true, Ordering::Relaxed);
                    }
                    return Ok(reply);
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// How many times one call loads its script again after a `NOSCRIPT` before it gives up
/// with that error: a node that loses its scripts that often is not serving, and the call's
/// keys then expire by their TTL.
pub(crate) const MOST_RELOADS: u32 = 3;

/// When a script call that failed is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Once, after loading the script the node lost: for the lock scripts, since a lock
    /// call dropped midway took nothing and need not go on.
    AfterReload,
    /// That, and once after a broken connection: for a script that is safe to repeat
    /// (compare-and-delete, compare-and-pexpire, leaving a queue, raising a counter).
    AlsoAfterReconnect,
}

/// One call of a node script: the script, the lock keys (followed by the extra keys its
/// [`KeyLayout`](super::scripts::KeyLayout) names), and the arguments.
pub(crate) struct ScriptCall<'a> {
    script: &'a Arc<CachedScript>,
    keys: &'a [Arc<str>],
    args: &'a [&'a [u8]],
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys` with `args`.
    pub(crate) fn new(
        script: &'a Arc<CachedScript>,
        keys: &'a [Arc<str>],
        args: &'a [&'a [u8]],
    ) -> Self {
        ScriptCall { script, keys, args }
    }

    /// The call as one pre-sized command: `EVALSHA` and the hash (or, until the node is
    /// known to have the script, `EVAL` and its code), the key count, the lock keys, the
    /// queue keys, the watch markers, then the arguments. It saves the script invocation's
    /// intermediate vectors and strings on every call.
    pub(crate) fn command(&self) -> Cmd {
        self.command_by(self.script.is_cached())
    }

    /// The call as [`command`](Self::command) makes it, by the script's hash when
    /// `by_hash`, else whole.
    pub(crate) fn command_by(&self, by_hash: bool) -> Cmd {
        let ScriptCall { script, keys, args } = *self;
        let (queues_of, markers_of) = script.name.layout().extra_keys(keys);
        let key_count = keys.len() + 2 * queues_of.len() + markers_of.len();
        let key_bytes = |keys: &[Arc<str>]| keys.iter().map(|key| key.len()).sum::<usize>();
        let cached = by_hash;
        let code = script.name.source();
        let bytes = 64
            + if cached { 0 } else { code.len() }
            + key_bytes(keys)
            + 2 * key_bytes(queues_of)
            + queues_of.len() * (QUEUE_PREFIX.len() + DEADLINES_PREFIX.len())
            + key_bytes(markers_of)
            + markers_of.len() * WATCHED_PREFIX.len()
            + args.iter().map(|arg| arg.len()).sum::<usize>();
        let mut call = Cmd::with_capacity(3 + key_count + args.len(), bytes);
        if cached {
            call.arg("EVALSHA").arg(script.name.sha1());
        } else {
            call.arg("EVAL").arg(code);
        }
        call.arg(key_count);
        for key in keys {
            call.arg(&**key);
        }
        for key in queues_of {
            write_prefixed_arg(&mut call, QUEUE_PREFIX, key);
            write_prefixed_arg(&mut call, DEADLINES_PREFIX, key);
        }
        for key in markers_of {
            write_prefixed_arg(&mut call, WATCHED_PREFIX, key);
        }
        for arg in args {
            call.arg(*arg);
        }
        call
    }
}

/// Appends the argument `prefix` + `key` to `call`, byte by byte: the formatting machinery
/// of `write_arg_fmt` cost about as much as the rest of the command.
fn write_prefixed_arg(call: &mut Cmd, prefix: &str, key: &str) {
    use std::io::Write;
    let mut arg = call.writer_for_next_arg();
    // Writing to the command's own buffer cannot fail.
    let _ = arg.write_all(prefix.as_bytes());
    let _ = arg.write_all(key.as_bytes());
}

/// Whether `err` means the node could not be reached (rather than that it answered): a
/// call that met it may not have run, and one that is safe to repeat is sent again after a
/// reconnect ([`Resend::AlsoAfterReconnect`]).
pub(crate) fn is_unreachable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::keys::WAITER_CHANNEL_PREFIX;

    fn args(call: &Cmd) -> Vec<String> {
        call.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_script_call_lists_the_keys_then_the_queue_and_markers_then_the_args() {
        let script = Arc::new(CachedScript::new(NodeScript::Unlock));
        script.cached.store(true, Ordering::Relaxed);
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let call = ScriptCall::new(&script, &keys, &[b"token", b"channel:"]).command();
        let expected = [
            "EVALSHA",
            script.name.sha1(),
            "8",
            "a",
            "b",
            "quorumlock:waiters:a",
            "quorumlock:waiter-deadlines:a",
            "quorumlock:waiters:b",
            "quorumlock:waiter-deadlines:b",
            "quorumlock:watched:a",
            "quorumlock:watched:b",
            "token",
            "channel:",
        ];
        assert_eq!(args(&call), expected);
    }

    #[test]
    fn a_plain_script_call_has_only_the_lock_keys() {
        let script = Arc::new(CachedScript::new(NodeScript::Extend));
        script.cached.store(true, Ordering::Relaxed);
        let keys: Vec<Arc<str>> = vec!["only".into()];
        let call = ScriptCall::new(&script, &keys, &[b"token", b"30000"]).command();
        let expected = ["EVALSHA", script.name.sha1(), "1", "only", "token", "30000"];
        assert_eq!(args(&call), expected);
    }

    #[test]
    fn a_script_the_node_may_not_have_is_sent_whole() {
        let script = Arc::new(CachedScript::new(NodeScript::Extend));
        let keys: Vec<Arc<str>> = vec!["only".into()];
        let call = ScriptCall::new(&script, &keys, &[b"token", b"30000"]).command();
        let expected = [
            "EVAL",
            NodeScript::Extend.source(),
            "1",
            "only",
            "token",
            "30000",
        ];
        assert_eq!(args(&call), expected);
    }

    #[test]
    fn the_scripts_use_the_channels_the_listener_subscribes_to() {
        // The scripts that free a key announce it: queueing for several keys frees the
        // keys reserved for the waiter that it cannot use yet.
        for script in [
            NodeScript::Unlock,
            NodeScript::LeaveQueue,
            NodeScript::LockQueuedMany,
        ] {
            let script = script.source();
            assert!(script.contains(&format!("\"{WAITER_CHANNEL_PREFIX}\" .. client")));
        }
    }

    #[test]
    fn the_watching_lock_takes_the_first_keys_marker_and_a_queued_one_its_queue() {
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let watching = Arc::new(CachedScript::new(NodeScript::LockWatching));
        let call = ScriptCall::new(&watching, &keys, &[b"t", b"1", b"2"]).command();
        assert_eq!(args(&call)[2..6], ["3", "a", "b", "quorumlock:watched:a"]);
        let queued = Arc::new(CachedScript::new(NodeScript::LockQueued));
        let call = ScriptCall::new(&queued, &keys[..1], &[b"t"]).command();
        assert_eq!(
            args(&call)[2..],
            [
                "3",
                "a",
                "quorumlock:waiters:a",
                "quorumlock:waiter-deadlines:a",
                "t"
            ]
        );
    }

    #[test]
    fn the_scripts_are_listed_in_the_order_of_their_names() {
        let scripts = NodeScripts::new();
        for name in NodeScript::ALL {
            assert_eq!(scripts.get(name).name, name);
        }
    }

    #[test]
    fn the_keys_of_a_call_are_the_keys_a_script_names() {
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        for name in NodeScript::ALL {
            let script = Arc::new(CachedScript::new(name));
            let call = ScriptCall::new(&script, &keys, &[]).command();
            // EVAL, the code, the key count, then the keys (no arguments were given).
            assert_eq!(args(&call)[3..], name.keys(&["a", "b"]), "{name:?}");
        }
    }
}
