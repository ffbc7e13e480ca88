//! A user granted exactly the commands, keys and channels that docs/operations.md ("ACL
//! users") lists, on nodes of its own, and the denials the servers logged: shared by the
//! library's ACL test (tests/acl.rs) and the CLI's (quorumlock-cli/tests/acl.rs).

use quorumlock::redis;
use quorumlock_testkit::{NodeOptions, Persistence, RedisCluster, RedisProcess};

/// The key prefix of the locks here; the user may touch nothing else but the library's own
/// `quorumlock:` keys.
pub const PREFIX: &str = "locks:";

/// The grant of docs/operations.md, word for word: keep the two in step.
pub const GRANT: &[&str] = &[
    "on",
    ">locker-secret",
    "resetkeys",
    "resetchannels",
    "-@all",
    // Connecting: the server check, its fallback, and the probe of a silent connection.
    "+info",
    "+client|info",
    "+ping",
    // The lock: take, refresh, release (scripts by hash, loaded again after NOSCRIPT),
    // is_acquired, and the commands the scripts run.
    "+set",
    "+get",
    "+mget",
    "+eval",
    "+evalsha",
    "+script|load",
    "+del",
    "+exists",
    "+pexpire",
    "+pttl",
    "+time",
    // The fair queue and release announcements.
    "+zadd",
    "+zrange",
    "+zrem",
    "+zscore",
    "+hset",
    "+hget",
    "+hdel",
    "+publish",
    "+subscribe",
    "+unsubscribe",
    // Keys and channels.
    "~locks:*",
    "~quorumlock:*",
    "&quorumlock:*",
];

/// Runs `args` on `node` as its default (all-powerful) user.
pub async fn admin(node: &RedisProcess, args: &[&str]) -> redis::Value {
    let mut connection = node
        .client()
        .expect("a client for the node")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the node directly");
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query_async(&mut connection).await.expect(args[0])
}

/// Three nodes on which the user `locker` (password `locker-secret`) has exactly
/// [`GRANT`], with an empty `ACL LOG`.
pub async fn acl_cluster() -> RedisCluster {
    // Append-only, so that fencing may run on them.
    let options = NodeOptions::default().with_persistence(Persistence::AppendFsyncAlways);
    let cluster = RedisCluster::start_with(3, options).await.unwrap();
    for i in 0..cluster.len() {
        let mut args = vec!["ACL", "SETUSER", "locker"];
        args.extend_from_slice(GRANT);
        admin(cluster.node(i), &args).await;
        admin(cluster.node(i), &["ACL", "LOG", "RESET"]).await;
    }
    cluster
}

/// The URLs of `cluster`'s nodes as the user `locker`.
pub fn user_urls(cluster: &RedisCluster) -> Vec<String> {
    (0..cluster.len())
        .map(|i| format!("redis://locker:locker-secret@{}", cluster.node(i).address()))
        .collect()
}

/// Every denial the servers logged, but for the library name redis-rs sets on connect and
/// ignores a refusal of (`CLIENT SETINFO`, Redis 7.2+; Redis 6.2 logs it as a denied
/// `client` command, the only `CLIENT` subcommand the lock may be refused, since
/// `client|info` is granted).
pub async fn denials(cluster: &RedisCluster) -> Vec<String> {
    let mut found = Vec::new();
    for i in 0..cluster.len() {
        let log = admin(cluster.node(i), &["ACL", "LOG"]).await;
        let text = format!("{log:?}");
        if let redis::Value::Array(entries) = log {
            for entry in entries {
                let entry = format!("{entry:?}");
                let lib_name =
                    entry.to_lowercase().contains("setinfo") || entry.contains("cmd=client ");
                // The server check's `CONFIG GET appendfsync`, asked where the append-only
                // file is on and denied by the listed grants (docs/operations.md, "ACL
                // users"): the server then abstains for a lease after it starts.
                let fsync_policy = entry.contains("appendfsync")
                    || entry.contains("config|get")
                    || entry.contains("cmd=config ");
                if !lib_name && !fsync_policy {
                    found.push(format!("node {i}: {entry}"));
                }
            }
        } else {
            found.push(format!("node {i}: unexpected ACL LOG reply {text}"));
        }
    }
    found
}
