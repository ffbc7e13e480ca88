//! The Lua scripts a [`RedisNode`](super::RedisNode) runs, and how it calls them: every
//! script a node runs is here. They are the server-side half of the lock protocol. Each
//! one is atomic on its node, which is what makes "all keys or none", "only the holder of
//! the token" and "only the waiter it is reserved for" hold there.
//!
//! A call ([`ScriptCall`]) is one command, `EVALSHA` once the node is known to have the
//! script and `EVAL` until then ([`CachedScript`]); a node that lost its scripts (a restart,
//! a `SCRIPT FLUSH`) answers `NOSCRIPT`, and the script is loaded and called again
//! ([`CachedScript::invoke`]). Which script a request calls, with which KEYS and ARGV, is
//! decided once for every node in [`wire`](super::wire).
//!
//! # Keys on a node
//!
//! | key | type | what |
//! |---|---|---|
//! | `<key>` | string | the lock: the holder's token, with the lock's TTL; or `quorumlock:reserved:<waiter>`, a key released to the first waiter in line, until that waiter's place would lapse |
//! | `quorumlock:waiters:<key>` | sorted set | the queue of `<key>`: waiter ids scored by ticket; a waiter for several keys is in the queue of the one it is blocked on |
//! | `quorumlock:waiter-deadlines:<key>` | hash | when each waiter's place lapses, in the node's milliseconds |
//! | `quorumlock:watched:<key>` | string | present while some waiter that races for `<key>` (not queued) wants its releases announced |
//! | `quorumlock:fence:<key>` | string | the [fencing](crate::fencing) counter of `<key>`; never expires |
//!
//! The read-write lock's and the election's keys are listed with their scripts (`family`).
//!
//! Both queue keys expire with their longest-lived place, and the watch marker with its
//! last waiter's interest, so an idle lock leaves nothing behind. A release is announced
//! only when one of them exists: an uncontended release runs no `PUBLISH`, which costs as
//! much on the node as the compare-and-delete itself. The scripts read the node's clock
//! (`TIME`), which needs Redis 5 or later (scripts replicated by their effects).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use redis::{Cmd, ErrorKind, RedisResult, RedisWrite, Script, ServerErrorKind, Value};

use super::link::is_unreachable;

mod family;
pub(crate) use self::family::{
    LEADER_PREFIX, LOCK_EXCLUSIVE, LOCK_SHARED, PROCLAIM, READERS_PREFIX, READER_PREFIX,
    WRITER_WAITING_PREFIX,
};

/// The queue of the lock key `key` is this prefix and the key: the waiters in order.
pub(crate) const QUEUE_PREFIX: &str = "quorumlock:waiters:";

/// The deadlines of the waiters in the queue of `key` are under this prefix and the key.
pub(crate) const DEADLINES_PREFIX: &str = "quorumlock:waiter-deadlines:";

/// The marker that asks for the releases of `key` to be announced on its channel is this
/// prefix and the key.
pub(crate) const WATCHED_PREFIX: &str = "quorumlock:watched:";

/// One of the Lua scripts a node runs, by name: its text ([`source`](Self::source)) and the
/// keys it takes after the lock keys (its key layout), which together with the arguments
/// that the crate's one request-to-command mapping (`node::wire`) gives each request are
/// everything a node sends. A script
/// added here (a variant, its source, its layout, and its place in [`ALL`](Self::ALL)) is
/// cached, sent and reloaded by every node, real or simulated, with no other change.
// Public as `quorumlock::sim::NodeScript` (feature `test-util`), crate-internal otherwise.
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeScript {
    /// Takes every key, only if none exists (a lock over several keys; one key goes through
    /// `SET NX PX`). ARGV: token, TTL in ms.
    Lock,
    /// As `Lock`, and when refused marks the first key as watched. ARGV: token, TTL in ms,
    /// interest in ms.
    LockWatching,
    /// As `Lock` for a queued waiter for one key. ARGV: token, TTL in ms, waiter id,
    /// ticket, place lifetime in ms.
    LockQueued,
    /// As `LockQueued` for several keys. ARGV: as `LockQueued`, then the channel prefix.
    LockQueuedMany,
    /// Deletes the keys that hold the token and hands each to its next waiter. ARGV: token,
    /// channel prefix.
    Unlock,
    /// Takes a waiter out of the keys' queues. ARGV: waiter id, channel prefix.
    LeaveQueue,
    /// Sets every key's TTL, only if all hold the token. ARGV: token, TTL in ms.
    Extend,
    /// Raises fencing counters to a value unless higher. ARGV: the value.
    RaiseCounter,
    /// Takes a reader's entry of a read-write lock. KEYS: the entry, the write side, the
    /// reader list, the writer-waiting mark. ARGV: token, TTL in ms.
    LockShared,
    /// Takes the write side of a read-write lock. KEYS: the write side, the reader list,
    /// the writer-waiting mark. ARGV: token, TTL in ms, waiting time in ms (0: none).
    LockExclusive,
    /// Writes an election leader's record while its lock key holds its token. KEYS: the
    /// lock key, the record. ARGV: token, record.
    Proclaim,
}

/// The keys a script takes after the lock keys of its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyLayout {
    /// None.
    LockKeys,
    /// The first lock key's watch marker.
    FirstMarker,
    /// Each lock key's queue and deadlines, in the keys' order.
    Queues,
    /// Each lock key's queue and deadlines, then each one's watch marker.
    QueuesAndMarkers,
}

#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))]
impl NodeScript {
    /// Every script, in the order the node's scripts are listed.
    pub const ALL: [NodeScript; 11] = [
        NodeScript::Lock,
        NodeScript::LockWatching,
        NodeScript::LockQueued,
        NodeScript::LockQueuedMany,
        NodeScript::Unlock,
        NodeScript::LeaveQueue,
        NodeScript::Extend,
        NodeScript::RaiseCounter,
        NodeScript::LockShared,
        NodeScript::LockExclusive,
        NodeScript::Proclaim,
    ];

    /// The script's Lua source, exactly as the node sends it.
    pub fn source(self) -> &'static str {
        match self {
            NodeScript::Lock => LOCK,
            NodeScript::LockWatching => LOCK_WATCHING,
            NodeScript::LockQueued => LOCK_QUEUED,
            NodeScript::LockQueuedMany => LOCK_QUEUED_MANY,
            NodeScript::Unlock => UNLOCK,
            NodeScript::LeaveQueue => LEAVE_QUEUE,
            NodeScript::Extend => EXTEND,
            NodeScript::RaiseCounter => RAISE_COUNTER,
            NodeScript::LockShared => LOCK_SHARED,
            NodeScript::LockExclusive => LOCK_EXCLUSIVE,
            NodeScript::Proclaim => PROCLAIM,
        }
    }

    /// The script's SHA-1, by which `EVALSHA` names it: computed once per process.
    pub fn sha1(self) -> &'static str {
        static HASHES: OnceLock<Vec<String>> = OnceLock::new();
        let hashes = HASHES.get_or_init(|| {
            NodeScript::ALL
                .iter()
                .map(|name| Script::new(name.source()).get_hash().to_owned())
                .collect()
        });
        &hashes[self as usize]
    }

    /// The keys the script takes after the lock keys.
    pub(crate) fn layout(self) -> KeyLayout {
        match self {
            NodeScript::Lock | NodeScript::Extend | NodeScript::RaiseCounter => KeyLayout::LockKeys,
            // Their whole KEYS come from `wire`, with the family's prefixes.
            NodeScript::LockShared | NodeScript::LockExclusive | NodeScript::Proclaim => {
                KeyLayout::LockKeys
            }
            NodeScript::LockWatching => KeyLayout::FirstMarker,
            NodeScript::LockQueued => KeyLayout::Queues,
            NodeScript::LockQueuedMany | NodeScript::Unlock | NodeScript::LeaveQueue => {
                KeyLayout::QueuesAndMarkers
            }
        }
    }
}

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

    /// Runs `command`, a call of this script, through `send`, and returns the node's
    /// reply. When the node answers `NOSCRIPT` (after a restart or a `SCRIPT FLUSH`), the
    /// script is loaded and the call sent again, once. With [`Resend::AlsoAfterReconnect`]
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
        let mut reloaded = false;
        let mut reconnected = resend == Resend::AfterReload;
        loop {
            match send(command).await {
                Err(err)
                    if !reloaded && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    reloaded = true;
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
/// [`KeyLayout`] names), and the arguments.
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
        let ScriptCall { script, keys, args } = *self;
        let first = &keys[..keys.len().min(1)];
        let (queues_of, markers_of): (&[Arc<str>], &[Arc<str>]) = match script.name.layout() {
            KeyLayout::LockKeys => (&[], &[]),
            KeyLayout::FirstMarker => (&[], first),
            KeyLayout::Queues => (keys, &[]),
            KeyLayout::QueuesAndMarkers => (keys, keys),
        };
        let key_count = keys.len() + 2 * queues_of.len() + markers_of.len();
        let key_bytes = |keys: &[Arc<str>]| keys.iter().map(|key| key.len()).sum::<usize>();
        let cached = script.cached.load(Ordering::Relaxed);
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

/// Lua shared by the queue scripts: the reservation prefix and the node's clock.
macro_rules! queue_lua {
    () => {
        r#"
local RESERVED = "quorumlock:reserved:"

local function now_ms()
    local time = redis.call("TIME")
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
"#
    };
}

/// Lua shared by the scripts that free a key: hands it to the first waiter in line.
macro_rules! pass_on_lua {
    () => {
        r#"
-- Reserves the freed `key` for the first waiter in `queue` whose place has not lapsed,
-- until that place would lapse, and announces it: the waiter's id on its client's channel
-- (the id is "<client>:<random>"), or, when nobody is in line, "" on `channel .. key`
-- (free for anybody) if the `watched` marker asks for it. No announcement when `channel`
-- is empty. Lapsed places met on the way are removed.
local function pass_on(key, queue, deadlines, watched, channel)
    local next_waiter = ""
    if redis.call("EXISTS", queue) == 1 then
        local now = now_ms()
        for _ = 1, 100 do
            local head = redis.call("ZRANGE", queue, 0, 0)[1]
            if not head then
                break
            end
            local lapses = tonumber(redis.call("HGET", deadlines, head))
            redis.call("ZREM", queue, head)
            redis.call("HDEL", deadlines, head)
            if lapses and lapses > now then
                redis.call("SET", key, RESERVED .. head, "PX", lapses - now)
                next_waiter = head
                break
            end
        end
    end
    if channel == "" then
        return
    end
    if channel == "quorumlock:shard-released:" then
        -- A Redis Cluster member: sharded pub/sub, in the key's own slot. A client's
        -- channel would hash to another slot, so a reservation is not announced there
        -- (its waiter claims it on its retry delay).
        if next_waiter == "" and redis.call("EXISTS", watched) == 1 then
            redis.call("SPUBLISH", channel .. key, "")
        end
        return
    end
    local client = string.match(next_waiter, "^(.+):[^:]*$")
    if client then
        redis.call("PUBLISH", "quorumlock:waiter:" .. client, next_waiter)
    elseif redis.call("EXISTS", watched) == 1 then
        redis.call("PUBLISH", channel .. key, next_waiter)
    end
end
"#
    };
}

/// Takes every key for our token with a TTL, only if none exists: all or nothing. A key
/// reserved for a waiter exists, so it is not taken. (One key goes through plain
/// `SET NX PX` instead.)
///
/// KEYS: the lock keys. ARGV: token, TTL in ms.
pub(crate) const LOCK: &str = r#"
for _, key in ipairs(KEYS) do
    if redis.call("EXISTS", key) == 1 then
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call("SET", key, ARGV[1], "PX", ARGV[2])
end
return 1
"#;

/// As [`LOCK`], for a waiter that races for the keys and watches their releases: when
/// refused, the first key is marked as watched for the waiter's interest (unless marked
/// for longer already), so that its next release is announced.
///
/// KEYS: the lock keys, then the first key's watch marker. ARGV: token, TTL in ms,
/// interest in ms.
pub(crate) const LOCK_WATCHING: &str = r#"
local n = #KEYS - 1
for i = 1, n do
    if redis.call("EXISTS", KEYS[i]) == 1 then
        local marker, interest = KEYS[n + 1], tonumber(ARGV[3])
        if redis.call("PTTL", marker) < interest then
            redis.call("SET", marker, "1", "PX", interest)
        end
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return 1
"#;

/// As [`LOCK`], for a queued waiter for one key: the key reserved for this waiter counts as
/// free. When refused, the waiter is queued at its ticket, or its place refreshed. (Several
/// keys go through [`LOCK_QUEUED_MANY`].)
///
/// KEYS: the lock key, then its queue and deadlines. ARGV: token, TTL in ms,
/// waiter id, ticket, place lifetime in ms.
pub(crate) const LOCK_QUEUED: &str = concat!(
    queue_lua!(),
    r#"
local n = #KEYS - 2
local queue, deadlines = KEYS[n + 1], KEYS[n + 2]
local mine = RESERVED .. ARGV[3]
for i = 1, n do
    local value = redis.call("GET", KEYS[i])
    if value and value ~= mine then
        local lifetime = tonumber(ARGV[5])
        redis.call("ZADD", queue, ARGV[4], ARGV[3])
        redis.call("HSET", deadlines, ARGV[3], now_ms() + lifetime)
        for _, key in ipairs({queue, deadlines}) do
            if redis.call("PTTL", key) < lifetime then
                redis.call("PEXPIRE", key, lifetime)
            end
        end
        return 0
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
redis.call("ZREM", queue, ARGV[3])
redis.call("HDEL", deadlines, ARGV[3])
return 1
"#
);

/// As [`LOCK_QUEUED`], for a waiter for several keys. It queues under the key it is
/// blocked on (held by a token, or reserved for another waiter), so that the releases of
/// its other keys go to waiters who can use them: it stays in the queue it is in while
/// that key is still blocked, else moves to the first blocked key. A key reserved for it
/// that it cannot use yet (another key is blocked) goes at once to the next in that key's
/// line, as when leaving the queue, rather than sitting reserved until its place lapses.
/// Taking the keys leaves every queue.
///
/// KEYS: the n lock keys, each key's queue and deadlines (in the keys' order), then each
/// key's watch marker. ARGV: token, TTL in ms, waiter id, ticket, place lifetime in ms,
/// channel prefix.
pub(crate) const LOCK_QUEUED_MANY: &str = concat!(
    queue_lua!(),
    pass_on_lua!(),
    r#"
local n = #KEYS / 4
local waiter = ARGV[3]
local mine = RESERVED .. waiter
local blocked, stay
for i = 1, n do
    local value = redis.call("GET", KEYS[i])
    if value and value ~= mine then
        blocked = blocked or i
        if not stay and redis.call("ZSCORE", KEYS[n + 2 * i - 1], waiter) then
            stay = i
        end
    end
end
if blocked then
    local at = stay or blocked
    for i = 1, n do
        if i ~= at then
            redis.call("ZREM", KEYS[n + 2 * i - 1], waiter)
            redis.call("HDEL", KEYS[n + 2 * i], waiter)
        end
    end
    local queue, deadlines = KEYS[n + 2 * at - 1], KEYS[n + 2 * at]
    local lifetime = tonumber(ARGV[5])
    redis.call("ZADD", queue, ARGV[4], waiter)
    redis.call("HSET", deadlines, waiter, now_ms() + lifetime)
    for _, key in ipairs({queue, deadlines}) do
        if redis.call("PTTL", key) < lifetime then
            redis.call("PEXPIRE", key, lifetime)
        end
    end
    for i = 1, n do
        if redis.call("GET", KEYS[i]) == mine then
            redis.call("DEL", KEYS[i])
            pass_on(KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i], KEYS[3 * n + i], ARGV[6])
        end
    end
    return 0
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
    redis.call("ZREM", KEYS[n + 2 * i - 1], waiter)
    redis.call("HDEL", KEYS[n + 2 * i], waiter)
end
return 1
"#
);

/// Deletes each key that still holds our token, and hands each to the next waiter in its
/// own queue, if any. A release is announced (none when `ARGV[2]` is empty) only when
/// somebody waits: a hand-off on the waiter's client channel, else on the channel
/// `ARGV[2] .. key` while the key's watch marker exists. The common, uncontended release
/// costs three commands: `GET`, `DEL`, and one `EXISTS` of the queue and the marker.
/// Returns 1 only if every key was ours.
///
/// KEYS: the n lock keys, each key's queue and deadlines (in the keys' order), then the n
/// keys' watch markers; for one key, the key, its queue, its deadlines and its marker.
/// ARGV: token, channel prefix.
pub(crate) const UNLOCK: &str = concat!(
    queue_lua!(),
    pass_on_lua!(),
    r#"
local n = #KEYS / 4
local all = 1
for i = 1, n do
    local key = KEYS[i]
    if redis.call("GET", key) == ARGV[1] then
        redis.call("DEL", key)
        local queue, watched = KEYS[n + 2 * i - 1], KEYS[3 * n + i]
        if redis.call("EXISTS", queue, watched) > 0 then
            pass_on(key, queue, KEYS[n + 2 * i], watched, ARGV[2])
        end
    else
        all = 0
    end
end
return all
"#
);

/// Removes a waiter from the queue of each key; a key reserved for it goes to the next in
/// that key's line. A waiter for several keys may be queued under any of them, and on
/// each node under another one.
///
/// KEYS: as for [`UNLOCK`]: the lock keys, each one's queue and deadlines, each one's
/// watch marker. ARGV: waiter id, channel prefix.
pub(crate) const LEAVE_QUEUE: &str = concat!(
    queue_lua!(),
    pass_on_lua!(),
    r#"
local n = #KEYS / 4
local mine = RESERVED .. ARGV[1]
for i = 1, n do
    local key, queue, deadlines = KEYS[i], KEYS[n + 2 * i - 1], KEYS[n + 2 * i]
    redis.call("ZREM", queue, ARGV[1])
    redis.call("HDEL", deadlines, ARGV[1])
    if redis.call("GET", key) == mine then
        redis.call("DEL", key)
        pass_on(key, queue, deadlines, KEYS[3 * n + i], ARGV[2])
    end
end
return 1
"#
);

/// Sets every key's TTL, only if all still hold our token. PEXPIRE never creates a key, so
/// a lock that expired or was flushed cannot be revived.
///
/// KEYS: the lock keys. ARGV: token, TTL in ms.
pub(crate) const EXTEND: &str = r#"
for _, key in ipairs(KEYS) do
    if redis.call("GET", key) ~= ARGV[1] then
        return 0
    end
end
for _, key in ipairs(KEYS) do
    redis.call("PEXPIRE", key, ARGV[2])
end
return 1
"#;

/// Raises each fencing counter in `KEYS` to `ARGV[1]` unless it is already higher; returns
/// the lowest value they hold afterwards. Never sets an expiry: counters must outlive every
/// lock.
pub(crate) const RAISE_COUNTER: &str = r#"
local wanted = tonumber(ARGV[1])
local lowest = nil
for _, key in ipairs(KEYS) do
    local current = tonumber(redis.call("GET", key) or "0")
    if current < wanted then
        redis.call("SET", key, ARGV[1])
        current = wanted
    end
    if lowest == nil or current < lowest then
        lowest = current
    end
end
return lowest
"#;

#[cfg(test)]
mod tests;
