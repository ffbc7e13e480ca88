//! ACL users: a user granted exactly the commands, keys and channels that
//! docs/operations.md ("ACL users") lists runs every operation of the library and of the
//! CLI, and the servers log no denial at all (`ACL LOG`).

mod common;

use std::time::Duration;

use quorumlock::testkit::{NodeOptions, Persistence, RedisCluster, RedisProcess};
use quorumlock::{redis, LockConfig, Redlock};

/// The key prefix of the locks here; the user may touch nothing else but the library's own
/// `quorumlock:` keys.
const PREFIX: &str = "locks:";

/// The grant of docs/operations.md, word for word: keep the two in step.
const GRANT: &[&str] = &[
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

async fn admin(node: &RedisProcess, args: &[&str]) -> redis::Value {
    let mut connection = common::raw_connection(node).await;
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query_async(&mut connection).await.expect(args[0])
}

async fn acl_cluster() -> RedisCluster {
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

fn user_urls(cluster: &RedisCluster) -> Vec<String> {
    (0..cluster.len())
        .map(|i| format!("redis://locker:locker-secret@{}", cluster.node(i).address()))
        .collect()
}

/// Every denial the servers logged, but for the library name redis-rs sets on connect and
/// ignores a refusal of (`CLIENT SETINFO`, Redis 7.2+; Redis 6.2 logs it as a denied
/// `client` command, the only `CLIENT` subcommand the lock may be refused, since
/// `client|info` is granted).
async fn denials(cluster: &RedisCluster) -> Vec<String> {
    let mut found = Vec::new();
    for i in 0..cluster.len() {
        let log = admin(cluster.node(i), &["ACL", "LOG"]).await;
        let text = format!("{log:?}");
        if let redis::Value::Array(entries) = log {
            for entry in entries {
                let entry = format!("{entry:?}");
                let lib_name =
                    entry.to_lowercase().contains("setinfo") || entry.contains("cmd=client ");
                if !lib_name {
                    found.push(format!("node {i}: {entry}"));
                }
            }
        } else {
            found.push(format!("node {i}: unexpected ACL LOG reply {text}"));
        }
    }
    found
}

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .key_prefix(PREFIX)
        .retry_count(20)
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// Locks built on the user's own clients (a username in the connection info).
async fn lock_for(cluster: &RedisCluster, config: LockConfig) -> Redlock {
    let clients = user_urls(cluster)
        .iter()
        .map(|url| redis::Client::open(url.as_str()).unwrap())
        .collect::<Vec<_>>();
    let lock = Redlock::from_clients(clients, config).await.unwrap();
    for name in lock.node_names() {
        assert!(!name.contains("secret"), "{name}");
    }
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_listed_grants_runs_every_library_operation() {
    let cluster = acl_cluster().await;
    let lock = lock_for(&cluster, config()).await;
    let other = lock_for(&cluster, config()).await;

    // Take, check, refresh, release.
    let mut guard = lock.acquire("job").await.unwrap();
    assert!(guard.is_acquired().await.unwrap());
    guard.refresh().await.unwrap();
    guard.release().await.unwrap();

    // Several resources; a guard dropped (released in the background).
    let many = lock.acquire_many(&["a", "b"]).await.unwrap();
    assert!(many.is_acquired().await.unwrap());
    drop(many);
    common::eventually(
        "the dropped guard's keys are gone",
        Duration::from_secs(2),
        || async {
            cluster
                .keys_on_running("locks:*")
                .await
                .unwrap()
                .iter()
                .all(Vec::is_empty)
        },
    )
    .await;

    // The fair queue: a waiter queues, is handed the lock at release, and is woken by the
    // announcement (a pub/sub subscription).
    for resources in [&["queued"][..], &["q1", "q2"][..]] {
        let held = lock.acquire_many(resources).await.unwrap();
        let waiter = other.clone();
        let wanted: Vec<String> = resources.iter().map(|r| r.to_string()).collect();
        let waiting = tokio::spawn(async move {
            let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
            waiter
                .acquire_many(&wanted)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        waiting.await.unwrap();
    }

    // Racing waiters (not queued): the watch marker and the release channel.
    let racing = config().to_builder().fair(false).build().unwrap();
    let racer = lock_for(&cluster, racing).await;
    let held = lock.acquire("raced").await.unwrap();
    let waiting =
        tokio::spawn(async move { racer.acquire("raced").await.unwrap().release().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    // Fencing: counters read and raised.
    let fenced = lock_for(
        &cluster,
        config().to_builder().fencing(true).build().unwrap(),
    )
    .await;
    let first = fenced.acquire("fenced").await.unwrap();
    let token = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = fenced.acquire("fenced").await.unwrap();
    assert!(second.fencing_token().unwrap() > token);
    second.release().await.unwrap();

    // Scripts flushed: NOSCRIPT, then SCRIPT LOAD.
    for i in 0..cluster.len() {
        admin(cluster.node(i), &["SCRIPT", "FLUSH"]).await;
    }
    let guard = lock.acquire_many(&["after-flush", "too"]).await.unwrap();
    guard.release().await.unwrap();

    let denied = denials(&cluster).await;
    assert!(denied.is_empty(), "denied: {denied:#?}");
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn a_user_with_exactly_the_listed_grants_runs_every_cli_command() {
    use std::process::Stdio;
    let cluster = acl_cluster().await;
    let nodes = user_urls(&cluster).join(",");
    let cli = |args: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"));
        command
            .env("QUORUMLOCK_NODES", &nodes)
            .env("QUORUMLOCK_KEY_PREFIX", PREFIX)
            .args(["--node-timeout", "250ms"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    };
    let check = |output: &std::process::Output, code: i32| {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    };
    let run = cli(&["run", "-r", "cli", "--", "true"])
        .output()
        .await
        .unwrap();
    check(&run, 0);
    let fenced = cli(&["run", "--fencing", "-r", "cli", "--", "true"])
        .output()
        .await
        .unwrap();
    check(&fenced, 0);

    // status and release while a holder runs.
    let mut holder = cli(&["run", "--json", "-r", "held", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = holder.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let token = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the holder reports its token")
            .unwrap()
            .expect("a line from the holder");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(token) = event["token"].as_str() {
            break token.to_owned();
        }
    };
    let status = cli(&["status", "held"]).output().await.unwrap();
    check(&status, 0);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("held by {token} on 3/3 nodes")),
        "{text}"
    );
    let release = cli(&["release", "held", "--token", &token])
        .output()
        .await
        .unwrap();
    check(&release, 0);
    holder.kill().await.unwrap();

    let denied = denials(&cluster).await;
    assert!(denied.is_empty(), "denied: {denied:#?}");
}
