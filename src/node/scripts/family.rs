//! The scripts of the lock family: the read and write sides of a read-write lock, and the
//! leader's record of an election. Included by the node's scripts, beside the mutex's.
//!
//! # Keys on a node
//!
//! | key | type | what |
//! |---|---|---|
//! | `<key>` | string | the write side: the writer's token, with the lock's TTL (a mutex key) |
//! | `quorumlock:reader:<key>:<id>` | string | one reader's entry: its token, with its own TTL; released, extended and checked as a mutex key |
//! | `quorumlock:readers:<key>` | sorted set | the names of the reader entries of `<key>`; an entry that no longer exists is a reader gone, and is dropped when next seen |
//! | `quorumlock:writer-waiting:<key>` | string | present while a blocked writer waits: new readers are refused (writer preference) |
//! | `quorumlock:leader:<key>` | string | an election's leader record: `<lock token> <record>`; current only while `<key>` holds that token |
//!
//! The reader list has no TTL: a reader extends its own entry, and the list must name it
//! for as long as the entry lives, however often it was extended. It holds only names of
//! entries, pruned by every acquisition, so an idle lock keeps at most the names of the
//! readers since the last one. The leader record has no TTL either (one per election,
//! like a fencing counter): it is read only together with the lock key it names.
//!
//! The scripts touch the reader entries the list names, which are not among their KEYS:
//! on a Redis Cluster, those names share the hash slot of `<key>` only when `<key>` has a
//! hash tag (`{...}`).

/// The reader list of the write-side key `key` is this prefix and the key.
pub(crate) const READERS_PREFIX: &str = "quorumlock:readers:";

/// A reader's entry of the write-side key `key` is this prefix, the key, `:` and an id.
pub(crate) const READER_PREFIX: &str = "quorumlock:reader:";

/// The writer-waiting marker of `key` is this prefix and the key.
pub(crate) const WRITER_WAITING_PREFIX: &str = "quorumlock:writer-waiting:";

/// The leader record of the election lock key `key` is this prefix and the key.
pub(crate) const LEADER_PREFIX: &str = "quorumlock:leader:";

/// Takes a reader's entry, only if the write side is free and no writer waits: sets the
/// entry (`NX`: an entry is never overwritten) and lists it among the readers, forgetting
/// the listed entries that no longer exist.
///
/// KEYS: the reader's entry, the write side, the reader list, the writer-waiting marker.
/// ARGV: token, TTL in ms.
pub(crate) const LOCK_SHARED: &str = r#"
if redis.call("EXISTS", KEYS[2]) == 1 or redis.call("EXISTS", KEYS[4]) == 1 then
    return 0
end
for _, reader in ipairs(redis.call("ZRANGE", KEYS[3], 0, -1)) do
    if redis.call("EXISTS", reader) == 0 then
        redis.call("ZREM", KEYS[3], reader)
    end
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
redis.call("ZADD", KEYS[3], 0, KEYS[1])
return 1
"#;

/// Takes the write side, only if it is free and no listed reader's entry exists
/// (forgetting those that do not). When refused with a waiting time, marks a writer as
/// waiting (unless marked for longer already), which keeps new readers out; a writer that
/// wins clears the mark (another writer still blocked marks it again when refused).
///
/// KEYS: the write side, the reader list, the writer-waiting marker. ARGV: token, TTL in
/// ms, waiting time in ms (0: do not mark).
pub(crate) const LOCK_EXCLUSIVE: &str = r#"
local readers = 0
for _, reader in ipairs(redis.call("ZRANGE", KEYS[2], 0, -1)) do
    if redis.call("EXISTS", reader) == 1 then
        readers = readers + 1
    else
        redis.call("ZREM", KEYS[2], reader)
    end
end
if readers > 0 or redis.call("EXISTS", KEYS[1]) == 1 then
    local waiting = tonumber(ARGV[3])
    if waiting > 0 and redis.call("PTTL", KEYS[3]) < waiting then
        redis.call("SET", KEYS[3], "1", "PX", waiting)
    end
    return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("DEL", KEYS[3])
return 1
"#;

/// Writes the leader's record, only while the lock key holds the leader's token.
///
/// KEYS: the lock key, the leader record. ARGV: token, record.
pub(crate) const PROCLAIM: &str = r#"
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call("SET", KEYS[2], ARGV[1] .. " " .. ARGV[2])
return 1
"#;
