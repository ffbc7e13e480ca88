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
//! Each node keeps a counter per resource (`quorumlock:fence:<key>`, never expiring: see
//! [`counter_key`](crate::protocol::keys::counter_key)), or one per bucket of resources
//! (see [Counter layouts](#counter-layouts)). After winning the lock, the
//! holder reads the counter from a majority of nodes, takes the maximum, and raises the
//! counter to `max + 1` on a majority before using it. Any two majorities share a node,
//! so the next holder reads at least this token and mints a larger one. A plain `INCR` on
//! each node with the maximum taken would not be monotonic: two holders whose majorities
//! differ can see the same maximum.
//!
//! # Counter layouts
//!
//! A per-resource counter never expires, so every resource ever fenced leaves a key on
//! every node: a lock per order, per user or per job leaves millions.
//! [`FencingCounters::Shared { buckets }`](FencingCounters::Shared) bounds them: a
//! resource's counter is one of `buckets` keys, `quorumlock:fence-bucket:<bucket>`, the
//! bucket a fixed hash of the lock key
//! ([`counter_bucket`](crate::protocol::keys::counter_bucket)), so each node keeps at most
//! `buckets` counter keys however many resources are fenced.
//!
//! Tokens still strictly increase from holder to holder of each resource: a counter only
//! ever grows, and one that other resources raise too only grows faster. The next holder
//! still reads at least this holder's token from the counter it raised, and mints more.
//! The trade-off:
//!
//! - **Tokens have gaps.** A resource's tokens increase across every resource of its
//!   bucket (`buckets: 1`: across all resources of the lock), so they no longer count its
//!   holders, and two resources may be handed the same token. Compare tokens of one
//!   resource only, which is all a fenced store does.
//! - **The counters grow faster.** A bucket reaches [`MAX_TOKEN`] (2^53) after that many
//!   mints of all its resources together: at a million mints a second, after 285 years.
//! - **Every client of a resource must use the same layout and bucket count**, as every
//!   client must use the same key prefix: tokens are only ordered among holders that raise
//!   the same counter. To move from per-resource counters, switch every client at once:
//!   a shared mint also reads the resource's old counter (without raising it), so its tokens
//!   go on above the old ones. An old counter can be deleted once its resource has been
//!   locked with the shared layout (its bucket then exceeds it on a majority), and no
//!   client with per-resource counters is left.
//! - **Not on hash-tagged nodes.** On a Redis Cluster member, every key of a script must
//!   share the lock key's slot, which a counter shared by many lock keys cannot do. A lock
//!   with shared counters refuses such nodes (a Redis Cluster member, or
//!   [`Nodes::hash_tags`](crate::Nodes::hash_tags)) with
//!   [`ConfigError::SharedFencingCountersOnHashTags`](crate::ConfigError::SharedFencingCountersOnHashTags),
//!   at connect and on every acquisition; keep per-resource counters there.
//! - **A busier key.** Every mint of a bucket reads and raises the same key: on one node
//!   this costs what a per-resource counter does (Redis runs one command at a time anyway).
//!
//! # Limits
//!
//! - The counters must never be lost: run the nodes with an append-only file (`appendonly
//!   yes`; `appendfsync always` to survive a machine crash too) and with
//!   `maxmemory-policy noeviction`. A node that restarts empty loses its counters however
//!   long it stays down, and one such restart at a time is enough to make a later holder
//!   mint a token that was already used. So a lock with fencing refuses a node whose
//!   server reports no append-only file (`aof_enabled:0`), at connect and on every
//!   reconnect, unless
//!   [`fencing_on_volatile_nodes`](crate::Nodes::fencing_on_volatile_nodes) is
//!   set.
//! - Tokens strictly increase across holders only while the lock's own exclusion holds;
//!   they do not repair a broken lock, they let the resource notice a stale holder.
//! - The protected resource must check the token on every write, atomically with the write;
//!   [`fenced_set`] does that for a value kept in Redis.
//! - Fencing the write alone does not protect a read-modify-write: claim the token with
//!   [`fenced_claim`] *before* reading (see [Read-modify-write](fenced_set#read-modify-write)).
//!
//! # Fencing a SQL database
//!
//! [`fenced_set`] and [`fenced_claim`] keep the data in Redis. A SQL database checks the
//! token itself, in the statements that touch the row: no client library of this crate is
//! needed, only a column that keeps the highest token that claimed the row (a `bigint`:
//! tokens are at most [`MAX_TOKEN`], 2^53) and a condition on it in every statement. A
//! statement applies only when no newer token has been seen for the row; an equal token
//! is the same holder (tokens strictly increase from holder to holder of a resource), who
//! may write again. For a read-modify-write, claim while reading, then write:
//!
//! ```sql
//! CREATE TABLE stock (sku text PRIMARY KEY, qty bigint NOT NULL, fence bigint NOT NULL DEFAULT 0);
//! -- right after acquiring: claim the row and read it (no row back: a newer holder exists)
//! UPDATE stock SET fence = $1 WHERE sku = $2 AND fence <= $1 RETURNING qty;
//! -- the write computed from that read (0 rows: a newer holder claimed it; stop)
//! UPDATE stock SET qty = $3, fence = $1 WHERE sku = $2 AND fence <= $1;
//! ```
//!
//! and for a blind write, which may create the row, one upsert:
//!
//! ```sql
//! INSERT INTO stock (sku, qty, fence) VALUES ($2, $3, $1)
//! ON CONFLICT (sku) DO UPDATE SET qty = EXCLUDED.qty, fence = EXCLUDED.fence
//! WHERE stock.fence <= EXCLUDED.fence;
//! ```
//!
//! As with [`fenced_set`], fencing only the write (the second `UPDATE` after a plain
//! `SELECT`) still loses an update to a stale holder that wakes between the new holder's
//! read and its write; the claim closes that. All tokens of a row must come from the lock
//! of one resource. Where the change can be one statement (`SET qty = qty - 1`), the
//! database already serialises it and the lock only saves wasted work.
//! `tests/servers/fencing_postgres.rs` runs holders paused past their TTL against a real
//! PostgreSQL table: no update lost with these statements, one per paused holder with plain
//! ones; `examples/fencing_postgres.rs` shows the same on a timeline.

mod counters;
mod mint;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

pub use self::counters::FencingCounters;
pub(crate) use self::mint::{mint, CounterQuorum, CounterRequest};

/// The largest fencing token: Redis scripts compute in doubles, exact up to 2^53.
pub const MAX_TOKEN: u64 = 1 << 53;

/// The key where [`fenced_set`] and [`fenced_claim`] keep the highest token they accepted
/// for `key`.
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
/// # Read-modify-write
///
/// Fencing only the write protects a blind write, not an update computed from a read. A
/// stale holder that read the value before its pause, and wakes between the new holder's
/// read and write, still passes the check (the new holder has written no newer token
/// yet), and the new holder then overwrites it with a value computed from the old read:
///
/// | step | old holder (token 7) | new holder (token 8) | stock |
/// |---|---|---|---|
/// | 1 | reads 10, pauses | | 10 |
/// | 2 | | reads 10 | 10 |
/// | 3 | wakes, `fenced_set(9, 7)`: accepted (highest seen: none) | | 9 |
/// | 4 | | `fenced_set(9, 8)`: accepted | 9 |
///
/// Two sales, one unit gone: a lost update. The safe pattern claims before it reads:
/// [`fenced_claim`] records the holder's token first, so from then on every write with an
/// older token is refused, and what the holder reads afterwards can no longer be changed
/// behind its back by an older holder. In the table, the new holder claims 8 before step 2,
/// and the old holder's write in step 3 is refused. (An older holder's write that lands
/// *before* the claim is not lost: the new holder reads it.) A refused claim, or a refused
/// write, means a newer holder exists: the lock was lost, so stop and do not retry the write.
///
/// ```no_run
/// use quorumlock::fencing::{fenced_claim, fenced_set};
/// use redis::AsyncCommands;
///
/// # async fn run(lock: quorumlock::Redlock, store: redis::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let guard = lock.acquire("stock:sku-42").await?;
/// let token = guard.fencing_token().expect("the lock was built with fencing(true)");
/// let mut connection = store.get_multiplexed_async_connection().await?;
/// // Claim first: from here on, older holders can no longer write the stock.
/// if fenced_claim(&mut connection, "stock:sku-42", token).await? {
///     let stock: i64 = connection.get("stock:sku-42").await?;
///     // ... a long pause may happen here; a newer holder's claim then refuses our write ...
///     let level = (stock - 1).to_string();
///     if !fenced_set(&mut connection, "stock:sku-42", &level, token).await? {
///         // A newer holder claimed the stock: our lock was lost while we paused.
///     }
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// A blind write (the value does not depend on what was there) needs no claim:
///
/// ```no_run
/// # async fn run(lock: quorumlock::Redlock, store: redis::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let guard = lock.acquire("report:daily").await?;
/// let token = guard.fencing_token().expect("the lock was built with fencing(true)");
/// let mut connection = store.get_multiplexed_async_connection().await?;
/// // ... compute the report from other data; a long pause may happen here ...
/// if !quorumlock::fencing::fenced_set(&mut connection, "report:daily", "{...}", token).await? {
///     // A newer holder already wrote: our lock was lost while we paused.
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// The check and the write are one script, which Redis runs whole or not at all, but a
/// future dropped after the script went out cannot say which. Treat that write as unknown:
/// read the value back before relying on it.
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

/// Records `token` as the highest token for `key` unless a higher one is already recorded;
/// returns whether it was (a token equal to the recorded one is accepted). Call it after
/// acquiring the lock and **before reading** `key` for a read-modify-write: from then on
/// [`fenced_set`] refuses every write with an older token, so no holder that lost the lock
/// can change the value between this holder's read and its write. See
/// [Read-modify-write](fenced_set#read-modify-write) for the race it closes.
///
/// `false` means a newer holder has claimed `key`: this holder's lock is gone, and it must
/// not go on. Claiming writes nothing to `key` itself.
///
/// # Cancel safety
///
/// A claim whose future is dropped after it went out may or may not be recorded. Claiming
/// again with the same token is harmless: an equal token is accepted.
pub async fn fenced_claim<C: ConnectionLike>(
    connection: &mut C,
    key: &str,
    token: u64,
) -> RedisResult<bool> {
    let claimed: i64 = Script::new(FENCED_CLAIM_SCRIPT)
        .key(last_token_key(key))
        .arg(token)
        .invoke_async(connection)
        .await?;
    Ok(claimed == 1)
}

/// Raise-the-highest-token unless it is already higher, atomically; the check of
/// [`FENCED_SET_SCRIPT`] without the write. (Each script's text is a newline and its
/// file, as it has been since the first version: its SHA-1, by which the store caches it,
/// stays the same.)
const FENCED_CLAIM_SCRIPT: &str = concat!("\n", include_str!("fenced_claim.lua"));

/// Compare-token-then-write, atomically.
const FENCED_SET_SCRIPT: &str = concat!("\n", include_str!("fenced_set.lua"));

#[cfg(test)]
mod tests {
    use super::*;

    /// The store caches each script by its SHA-1: clients of this and earlier versions run
    /// the same two scripts there.
    #[test]
    fn the_scripts_keep_their_sha1() {
        let claim = Script::new(FENCED_CLAIM_SCRIPT);
        assert_eq!(claim.get_hash(), "e28d16a463c8b2a69b62f032ce4dec0d4f497284");
        let set = Script::new(FENCED_SET_SCRIPT);
        assert_eq!(set.get_hash(), "9e123c1d7d840ec41f26c8c7be6fde545ad12f96");
    }
}
