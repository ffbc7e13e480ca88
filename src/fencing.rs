//! Fencing tokens: numbers that strictly increase with each holder of a lock, so that the
//! resource a lock protects can reject the writes of a holder that lost the lock without
//! knowing it (paused by GC, swap or SIGSTOP past its validity).
//!
//! Turn them on with [`LockConfig::builder().fencing(true)`](crate::LockConfigBuilder::fencing);
//! every acquisition then mints the next token of its resource, read with
//! [`LockGuard::fencing_token`](crate::LockGuard::fencing_token).
//!
//! # How tokens are minted
//!
//! Each node keeps a counter per resource (`quorumlock:fence:<key>`, never expiring). After
//! winning the lock, the holder reads the counter from a majority of nodes, takes the
//! maximum, and raises the counter to `max + 1` on a majority before using it. Any two
//! majorities share a node, so the next holder reads at least this token and mints a larger
//! one. A plain `INCR` on each node with the maximum taken would not be monotonic: two
//! holders whose majorities differ can see the same maximum.
//!
//! # Limits
//!
//! - The counters must never be lost: run the nodes with `appendfsync always` (or restart a
//!   node only after every counter it held is safely on a majority of the others) and with
//!   `maxmemory-policy noeviction`. A node that loses its counters can make a later holder
//!   mint a token that was already used.
//! - Tokens strictly increase across holders only while the lock's own exclusion holds;
//!   they do not repair a broken lock, they let the resource notice a stale holder.
//! - The protected resource must check the token on every write, atomically with the write;
//!   [`fenced_set`] does that for a value kept in Redis.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

/// The largest fencing token: Redis scripts compute in doubles, exact up to 2^53.
pub const MAX_TOKEN: u64 = 1 << 53;

/// The key of the fencing counter of the lock key `key` on each lock node (see
/// [`LockConfig::key_for`](crate::LockConfig::key_for) for the lock key of a resource).
pub fn counter_key(key: &str) -> String {
    format!("quorumlock:fence:{key}")
}

/// The key where [`fenced_set`] keeps the highest token it accepted for `key`.
pub fn last_token_key(key: &str) -> String {
    format!("{key}:fencing-token")
}

/// Writes `value` to `key` only if `token` is at least the highest token that wrote it
/// before; returns whether the write happened. The check and the write are one script, so
/// a stale holder can never slip a write in between.
///
/// `key` is the protected data (a stock level, a report, a leader record), not the lock
/// key; the highest token seen is kept beside it, under [`last_token_key`]. The lock's
/// nodes need not be the server that keeps the data.
///
/// ```no_run
/// # async fn run(lock: quorumlock::Redlock, store: redis::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let guard = lock.acquire("stock:sku-42").await?;
/// let token = guard.fencing_token().expect("the lock was built with fencing(true)");
/// let mut connection = store.get_multiplexed_async_connection().await?;
/// // ... read the stock, compute the new level; a long pause may happen here ...
/// if !quorumlock::fencing::fenced_set(&mut connection, "stock:sku-42", "17", token).await? {
///     // A newer holder already wrote: our lock was lost while we paused.
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub async fn fenced_set<C: ConnectionLike>(
    connection: &mut C,
    key: &str,
    value: &str,
    token: u64,
) -> RedisResult<bool> {
    let written: i64 = Script::new(FENCED_SET_SCRIPT)
        .key(key)
        .key(last_token_key(key))
        .arg(token)
        .arg(value)
        .invoke_async(connection)
        .await?;
    Ok(written == 1)
}

/// Compare-token-then-write, atomically.
const FENCED_SET_SCRIPT: &str = r#"
local last = tonumber(redis.call("GET", KEYS[2]) or "0")
local token = tonumber(ARGV[1])
if token < last then
    return 0
end
redis.call("SET", KEYS[2], ARGV[1])
redis.call("SET", KEYS[1], ARGV[2])
return 1
"#;

/// Raises each fencing counter in KEYS to ARGV[1] unless it is already higher; returns the
/// lowest value they hold afterwards. Never sets an expiry: counters must outlive every lock.
pub(crate) const RAISE_COUNTER_SCRIPT: &str = r#"
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
