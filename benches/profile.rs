//! A fixed amount of one scenario's work, for counting the client's instructions per
//! operation under callgrind (instruction counts repeat on a shared machine where wall
//! time does not). See docs/benchmarks.md, "Client CPU".
//!
//! ```text
//! cargo bench --bench profile --no-run
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p target/release/deps/profile-<hash> s3 quorumlock 100
//! ```
//!
//! Arguments: the load (`s1`: one task's uncontended acquire + release; `s6`: the same on
//! one node, quorumlock's `RedisLock` against the single-node floor; `s3`: 8 clients,
//! each with its own connections, taking turns at one lock around a counter's GET + SET;
//! `s3b`: the same with 8 tasks sharing one client), the contender (`quorumlock`,
//! `rslock`, `floor`), and the operations per task. The nodes are 5 local redis-server
//! processes, not traced. Run it with two operation counts and divide the difference in
//! instructions by the difference in operations: what is left is the cost of one
//! operation, without the start-up.

#[path = "scenarios/clients.rs"]
#[allow(dead_code)]
mod clients;

use std::sync::Arc;
use std::time::Instant;

use clients::{Client, Contender};
use quorumlock::LockConfig;
use quorumlock_testkit::RedisCluster;
use redis::AsyncCommands;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, kind, count] = args.as_slice() {
        if mode == "requests" {
            let count = count.parse().expect("request count");
            return current_thread().block_on(requests(kind, count));
        }
    }
    let [load, contender, ops] = args.as_slice() else {
        eprintln!("usage: profile <s1|s6|s3|s3b> <quorumlock|rslock|floor> <ops per task>");
        std::process::exit(2);
    };
    let contender = match contender.as_str() {
        "quorumlock" => Contender::Quorumlock,
        "rslock" => Contender::Rslock,
        "floor" => Contender::Floor,
        other => panic!("unknown contender {other}"),
    };
    let ops: u64 = ops.parse().expect("ops per task");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(load, contender, ops));
}

async fn run(load: &str, contender: Contender, ops: u64) {
    let nodes = if load == "s6" { 1 } else { 5 };
    let cluster = RedisCluster::start(nodes).await.expect("start the nodes");
    let urls = cluster.urls();
    // Under valgrind the client runs tens of times slower: a node timeout that it never
    // reaches, so that the work done is the same in every run. Otherwise the scenarios'
    // settings: the defaults for the uncontended cycles, and no giving up under contention.
    let node_timeout = std::time::Duration::from_millis(1_000);
    let config = match load {
        "s1" | "s6" => LockConfig::builder().node_timeout(node_timeout).build(),
        _ => LockConfig::builder()
            .node_timeout(node_timeout)
            .retry_count(1_000_000)
            .acquire_timeout(LockConfig::MAX_BLOCKING_ACQUIRE)
            .build(),
    }
    .expect("config");
    let counter = cluster
        .node(0)
        .client()
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("counter connection");
    let clients: Vec<Arc<Client>> = match load {
        "s1" | "s6" => vec![Arc::new(Client::connect(contender, &urls, &config).await)],
        "s3" => {
            let mut clients = Vec::new();
            for _ in 0..8 {
                clients.push(Arc::new(Client::connect(contender, &urls, &config).await));
            }
            clients
        }
        "s3b" => {
            let shared = Arc::new(Client::connect(contender, &urls, &config).await);
            vec![shared; 8]
        }
        other => panic!("unknown load {other}"),
    };
    for (i, client) in clients.iter().enumerate() {
        for w in 0..20 {
            client
                .cycle(&format!("warm:{i}:{w}"))
                .await
                .expect("warm-up");
        }
    }
    let replies_before = node_replies(&clients);
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .clone()
        .into_iter()
        .enumerate()
        .map(|(task, client)| {
            let mut counter = counter.clone();
            let contended = !matches!(load, "s1" | "s6");
            tokio::spawn(async move {
                for i in 0..ops {
                    if !contended {
                        client.cycle(&format!("cycle:{i}")).await.expect("cycle");
                        continue;
                    }
                    let held = client.acquire("shared").await.expect("acquire");
                    let value: i64 = counter.get("counter").await.unwrap_or(0);
                    let () = counter.set("counter", value + 1).await.expect("SET");
                    client.release(held).await.expect("release");
                }
                task
            })
        })
        .collect();
    let tasks_run = tasks.len() as u64;
    for task in tasks {
        task.await.expect("task");
    }
    let elapsed = started.elapsed();
    let requests = node_replies(&clients) - replies_before;
    println!(
        "{load} {}: {} operations in {elapsed:?}, {requests} node replies",
        contender.label(),
        tasks_run * ops,
    );
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// `count` requests of one kind to one node, one after the other, each refused the same
/// way: the same path every time, so that the instructions per request are exact. `lock`
/// is `SET NX` on a held key, `queued` a queued waiter's attempt on it (its place
/// refreshed), `unlock` a compare-and-delete of a key held by another token.
async fn requests(kind: &str, count: u64) {
    use quorumlock::backend::RedisNode;
    use quorumlock::node::{LockNode, QueuePlace};
    use quorumlock::LockToken;
    use std::time::Duration;

    let cluster = RedisCluster::start(1).await.expect("start a node");
    let node: Arc<dyn LockNode> = Arc::new(
        RedisNode::connect(&cluster.urls()[0], Duration::from_secs(1))
            .await
            .expect("node"),
    );
    let keys: Vec<Arc<str>> = vec![Arc::from("profiled")];
    let (holder, token) = (LockToken::generate(), LockToken::generate());
    let ttl = Duration::from_secs(60);
    assert!(node
        .try_lock(&keys, &holder, ttl)
        .await
        .expect("hold the key"));
    let place = QueuePlace {
        waiter: LockToken::from_string(format!("client:{}", LockToken::generate())),
        ticket: 1,
        lifetime: Duration::from_secs(60),
    };
    for _ in 0..count {
        let taken = match kind {
            "lock" => node.try_lock(&keys, &token, ttl).await,
            "queued" => node.try_lock_queued(&keys, &token, ttl, &place, None).await,
            "unlock" => node.unlock(&keys, &token).await,
            other => panic!("unknown request kind {other}"),
        };
        assert!(!taken.expect("the node answers"), "refused every time");
    }
    println!("{count} {kind} requests");
}

/// The node replies quorumlock's clients counted so far (each shared client once).
fn node_replies(clients: &[Arc<Client>]) -> u64 {
    let mut seen: Vec<*const Client> = Vec::new();
    let mut replies = 0;
    for client in clients {
        if seen.contains(&Arc::as_ptr(client)) {
            continue;
        }
        seen.push(Arc::as_ptr(client));
        let metrics = match &**client {
            Client::Redlock(lock) => lock.node_metrics(),
            Client::Single(lock) => lock.node_metrics(),
            _ => continue,
        };
        replies += metrics.iter().map(|node| node.replies).sum::<u64>();
    }
    replies
}
