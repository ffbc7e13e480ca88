//! Every key and channel name the lock uses on a node, spelled once: the library's Redis
//! nodes, the simulation and the command-line tool all name them through here, so that
//! clients of this and earlier versions meet on the same keys.
//!
//! Each name is a prefix and the lock key it belongs to (a resource's key, see
//! [`LockConfig::key_for`](crate::LockConfig::key_for)): the prefixes are brace-free, so
//! every name of a hash-tagged key (`{...}`) hashes to that key's Redis Cluster slot.
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
//! | `quorumlock:fence-bucket:<bucket>` | string | with [shared fencing counters](crate::fencing::FencingCounters::Shared), the counter of every key whose [`counter_bucket`] is `<bucket>`; never expires |
//! | `quorumlock:reader:<key>:<id>` | string | one reader's entry of a read-write lock whose write side is `<key>`: its token, with its own TTL; released, extended and checked as a mutex key |
//! | `quorumlock:readers:<key>` | sorted set | the names of the shared holders of `<key>`: reader entries (score 0) and the permit slots of the semaphore of the name (score K, its permits); an entry that no longer exists is a holder gone, and is dropped when next seen. Every exclusive acquisition of `<key>` refuses while a listed entry exists. Expires no sooner than any live entry it names: at most a TTL after its last holder's last acquisition or extension |
//! | `quorumlock:writer-waiting:<key>` | string | present while a blocked writer waits: new readers are refused (writer preference) |
//! | `quorumlock:leader:<key>` | string | an election's leader record: `<lock token> <record>`; current only while `<key>` holds that token, and expires with it (the key's TTL, at every extension of the term) |
//!
//! Both queue keys expire with their longest-lived place, and the watch marker with its
//! last waiter's interest, so an idle lock leaves nothing behind but its fencing counter.
//! The reader list must name an entry for as long as the entry lives, however often it
//! was extended: every script that lists an entry, and the extension of a listed entry
//! ([`NodeScript::ExtendListed`](super::NodeScript::ExtendListed), which takes the list as
//! a key), raises the list's expiry to at least the entry's, never lowering it. A list
//! without expiry (only an earlier version makes one) keeps none until it empties. The
//! leader record is read only together with the lock key it names, and takes that key's
//! TTL when written and on every extension of its term
//! ([`NodeScript::ExtendLeader`](super::NodeScript::ExtendLeader)). The read-write lock's
//! scripts touch the reader entries the list names, which are not among their KEYS: on a
//! Redis Cluster, those names share the hash slot of `<key>` only when `<key>` has a hash
//! tag.
//!
//! A semaphore's permit slots are locks of resources of their own ([`permit_resource`]),
//! with the keys above, each listed among the shared holders of the semaphore name's own
//! key (`quorumlock:readers:<key>`, score K) by the script that takes it: so a mutex of
//! the name, its readers and permits of another K are refused while a permit lives
//! (docs/safety.md, "One name, one lock").
//!
//! # Channels
//!
//! | channel | message | when |
//! |---|---|---|
//! | `quorumlock:waiter:<client>` | the waiter's id | a released key was reserved for a queued waiter of that client |
//! | `quorumlock:released:<key>` | empty | `<key>` was released with nobody in line, while its watch marker existed |
//! | `quorumlock:shard-released:<key>` | empty | the same on a Redis Cluster member, by `SPUBLISH` in the key's slot |
//!
//! A waiter's id is `<client>:<random>` ([`waiter_id`]): the scripts announce a
//! reservation on the channel of the id's client part, everything before its last `:`.
//!
//! The Lua scripts ([`NodeScript`](super::NodeScript)) take every name as a key or an
//! argument, but for four they spell themselves: the reservation prefix
//! ([`RESERVED_PREFIX`]), the waiters' channel ([`WAITER_CHANNEL_PREFIX`]), the sharded
//! release channel ([`SHARDED_RELEASE_CHANNEL_PREFIX`]), and the holder list
//! ([`READERS_PREFIX`]), which every exclusive acquisition reads beside each of its keys
//! (as the read-write lock's scripts read reader entries not among their KEYS); a test
//! holds them against these constants.

/// The queue of the lock key `key` is this prefix and the key: the waiters in order.
pub const QUEUE_PREFIX: &str = "quorumlock:waiters:";

/// The deadlines of the waiters in the queue of `key` are under this prefix and the key.
pub const DEADLINES_PREFIX: &str = "quorumlock:waiter-deadlines:";

/// The marker that asks for the releases of `key` to be announced on its channel is this
/// prefix and the key.
pub const WATCHED_PREFIX: &str = "quorumlock:watched:";

/// A lock key released to a queued waiter holds this prefix and the waiter's id instead of
/// a token, until the waiter takes it or its place lapses.
pub const RESERVED_PREFIX: &str = "quorumlock:reserved:";

/// The fencing counter of `key` is this prefix and the key.
pub const COUNTER_PREFIX: &str = "quorumlock:fence:";

/// With shared fencing counters, the counter of a bucket is this prefix and the bucket's
/// number (brace-free, and not a lock key's counter: those are under [`COUNTER_PREFIX`]).
pub const SHARED_COUNTER_PREFIX: &str = "quorumlock:fence-bucket:";

/// The reader list of the write-side key `key` is this prefix and the key.
pub const READERS_PREFIX: &str = "quorumlock:readers:";

/// A reader's entry of the write-side key `key` is this prefix, the key, `:` and an id.
pub const READER_PREFIX: &str = "quorumlock:reader:";

/// The writer-waiting marker of `key` is this prefix and the key.
pub const WRITER_WAITING_PREFIX: &str = "quorumlock:writer-waiting:";

/// The leader record of the election lock key `key` is this prefix and the key.
pub const LEADER_PREFIX: &str = "quorumlock:leader:";

/// The channel on which releases of a key are announced is this prefix and the key.
pub const RELEASE_CHANNEL_PREFIX: &str = "quorumlock:released:";

/// On a Redis Cluster member, releases of a key are announced by `SPUBLISH` on this prefix
/// and the key: a sharded channel, which hashes to the key's slot (the key's hash tag is
/// the channel's), so the announcement stays on the shard that serves the key instead of
/// being broadcast to every node of the cluster as `PUBLISH` is. The scripts recognise
/// the prefix.
pub const SHARDED_RELEASE_CHANNEL_PREFIX: &str = "quorumlock:shard-released:";

/// The channel on which keys reserved for a client's waiters are announced is this prefix
/// and the client's id.
pub const WAITER_CHANNEL_PREFIX: &str = "quorumlock:waiter:";

/// The queue of the lock key `key` ([`QUEUE_PREFIX`]).
pub fn queue_key(key: &str) -> String {
    format!("{QUEUE_PREFIX}{key}")
}

/// The waiters' deadlines of the queue of `key` ([`DEADLINES_PREFIX`]).
pub fn deadlines_key(key: &str) -> String {
    format!("{DEADLINES_PREFIX}{key}")
}

/// The watch marker of `key` ([`WATCHED_PREFIX`]).
pub fn watched_key(key: &str) -> String {
    format!("{WATCHED_PREFIX}{key}")
}

/// What a lock key reserved for the queued waiter `waiter` holds ([`RESERVED_PREFIX`]).
pub fn reserved_for(waiter: &str) -> String {
    format!("{RESERVED_PREFIX}{waiter}")
}

/// The key of the fencing counter of the lock key `key` on each lock node
/// ([`COUNTER_PREFIX`]; see [`LockConfig::key_for`](crate::LockConfig::key_for) for the
/// lock key of a resource).
pub fn counter_key(key: &str) -> String {
    format!("{COUNTER_PREFIX}{key}")
}

/// The shared fencing counter of the bucket `bucket` ([`SHARED_COUNTER_PREFIX`]).
pub fn shared_counter_key(bucket: u32) -> String {
    format!("{SHARED_COUNTER_PREFIX}{bucket}")
}

/// The bucket, below `buckets` (non-zero), whose shared fencing counter serves the lock key
/// `key`: the key's 64-bit FNV-1a hash modulo `buckets`. Every client of a resource must
/// compute the same bucket, in this version and later ones, so the function is fixed here
/// (a test pins its values).
pub fn counter_bucket(key: &str, buckets: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key.bytes().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    // The remainder is below `buckets`, a `u32`.
    (hash % u64::from(buckets)) as u32
}

/// The reader list of the write-side key `writer` ([`READERS_PREFIX`]).
pub fn readers_key(writer: &str) -> String {
    format!("{READERS_PREFIX}{writer}")
}

/// A reader's entry of the write-side key `writer`, named by the reader's `id`
/// ([`READER_PREFIX`]).
pub fn reader_key(writer: &str, id: &str) -> String {
    format!("{READER_PREFIX}{writer}:{id}")
}

/// The writer-waiting marker of the write-side key `writer` ([`WRITER_WAITING_PREFIX`]).
pub fn writer_waiting_key(writer: &str) -> String {
    format!("{WRITER_WAITING_PREFIX}{writer}")
}

/// The leader record of the election lock key `key` ([`LEADER_PREFIX`]).
pub fn leader_key(key: &str) -> String {
    format!("{LEADER_PREFIX}{key}")
}

/// The channel of `key`'s releases ([`RELEASE_CHANNEL_PREFIX`]).
pub fn release_channel(key: &str) -> String {
    format!("{RELEASE_CHANNEL_PREFIX}{key}")
}

/// The sharded channel of `key`'s releases on a Redis Cluster member
/// ([`SHARDED_RELEASE_CHANNEL_PREFIX`]).
pub fn sharded_release_channel(key: &str) -> String {
    format!("{SHARDED_RELEASE_CHANNEL_PREFIX}{key}")
}

/// The channel of the reservations for the queued waiters of `client`
/// ([`WAITER_CHANNEL_PREFIX`]).
pub fn waiter_channel(client: &str) -> String {
    format!("{WAITER_CHANNEL_PREFIX}{client}")
}

/// The id of a queued waiter of `client`: `<client>:<random>`, where `random` (drawn once
/// per blocking acquisition) holds no `:`. A reservation for it is announced on
/// [`waiter_channel`] of `client`.
pub fn waiter_id(client: &str, random: &str) -> String {
    format!("{client}:{random}")
}

/// The resource of the permit slot `slot` of the semaphore `name`: a mutex of its own.
pub fn permit_resource(name: &str, slot: u32) -> String {
    format!("{name}:permit:{slot}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::NodeScript;

    #[test]
    fn the_key_table_names_the_queue_prefixes() {
        let module_docs = include_str!("keys.rs");
        assert!(module_docs.contains(&format!("`{QUEUE_PREFIX}<key>`")));
        assert!(module_docs.contains(&format!("`{DEADLINES_PREFIX}<key>`")));
        assert!(module_docs.contains(&format!("`{WATCHED_PREFIX}<key>`")));
    }

    #[test]
    fn the_tables_name_every_other_key_and_channel() {
        let module_docs = include_str!("keys.rs");
        for prefix in [
            COUNTER_PREFIX,
            READERS_PREFIX,
            WRITER_WAITING_PREFIX,
            LEADER_PREFIX,
            RELEASE_CHANNEL_PREFIX,
            SHARDED_RELEASE_CHANNEL_PREFIX,
        ] {
            assert!(
                module_docs.contains(&format!("`{prefix}<key>`")),
                "{prefix}"
            );
        }
        assert!(module_docs.contains(&format!("`{READER_PREFIX}<key>:<id>`")));
        assert!(module_docs.contains(&format!("`{SHARED_COUNTER_PREFIX}<bucket>`")));
        assert!(module_docs.contains(&format!("`{RESERVED_PREFIX}<waiter>`")));
        assert!(module_docs.contains(&format!("`{WAITER_CHANNEL_PREFIX}<client>`")));
    }

    #[test]
    fn the_names_the_scripts_spell_are_these() {
        let frees_keys = [
            NodeScript::Unlock,
            NodeScript::LeaveQueue,
            NodeScript::LockQueuedMany,
        ];
        for script in [NodeScript::LockQueued].into_iter().chain(frees_keys) {
            let source = script.source();
            assert!(source.contains(&format!("local RESERVED = \"{RESERVED_PREFIX}\"")));
        }
        for script in [
            NodeScript::Lock,
            NodeScript::LockWatching,
            NodeScript::LockQueued,
            NodeScript::LockQueuedMany,
        ] {
            let source = script.source();
            assert!(source.contains(&format!("local list = \"{READERS_PREFIX}\" .. key")));
        }
        for script in frees_keys {
            let source = script.source();
            assert!(source.contains(&format!("\"{WAITER_CHANNEL_PREFIX}\" .. client")));
            assert!(source.contains(&format!("channel == \"{SHARDED_RELEASE_CHANNEL_PREFIX}\"")));
        }
    }

    #[test]
    fn names_are_a_prefix_and_the_key() {
        assert_eq!(queue_key("k"), "quorumlock:waiters:k");
        assert_eq!(deadlines_key("k"), "quorumlock:waiter-deadlines:k");
        assert_eq!(watched_key("k"), "quorumlock:watched:k");
        assert_eq!(reserved_for("c:w"), "quorumlock:reserved:c:w");
        assert_eq!(counter_key("k"), "quorumlock:fence:k");
        assert_eq!(shared_counter_key(7), "quorumlock:fence-bucket:7");
        assert_eq!(readers_key("k"), "quorumlock:readers:k");
        assert_eq!(reader_key("k", "id"), "quorumlock:reader:k:id");
        assert_eq!(writer_waiting_key("k"), "quorumlock:writer-waiting:k");
        assert_eq!(leader_key("k"), "quorumlock:leader:k");
        assert_eq!(release_channel("k"), "quorumlock:released:k");
        assert_eq!(sharded_release_channel("k"), "quorumlock:shard-released:k");
        assert_eq!(waiter_channel("c"), "quorumlock:waiter:c");
        assert_eq!(waiter_id("c", "w"), "c:w");
        assert_eq!(permit_resource("pool", 2), "pool:permit:2");
    }

    /// Clients of every version must put a resource in the same bucket: these values are
    /// the function's, not just any spread.
    #[test]
    fn the_bucket_of_a_key_is_fixed() {
        // FNV-1a 64 of the empty string is its offset basis, of "a" the published value.
        assert_eq!(
            counter_bucket("", u32::MAX),
            (0xcbf2_9ce4_8422_2325u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            counter_bucket("a", u32::MAX),
            (0xaf63_dc4c_8601_ec8cu64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(counter_bucket("order:1", 1), 0);
        let spread: std::collections::HashSet<u32> = (0..1000)
            .map(|i| counter_bucket(&format!("order:{i}"), 16))
            .collect();
        assert_eq!(spread.len(), 16, "1000 keys reach every one of 16 buckets");
        assert!(spread.iter().all(|&bucket| bucket < 16));
    }
}
