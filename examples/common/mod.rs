//! What the examples share: where their lock nodes (and data store) are, and how a run ends.
//!
//! An example runs against the nodes listed in `QUORUMLOCK_NODES`
//! (`redis://h1:6379,redis://h2:6379,...`) when it is set, and otherwise against local
//! `redis-server` nodes started through `quorumlock_testkit`, which stop (and whose
//! directories are removed) when dropped. Being in a subdirectory, this module is not built
//! as an example of its own: each example includes it with `mod common;`.

// Each example uses its own part of this module.
#![allow(dead_code)]

use std::error::Error;
use std::process::ExitCode;

use quorumlock_testkit::{NodeOptions, Persistence, RedisCluster};
use redis::aio::MultiplexedConnection;

/// The examples' result type: any error, printed as the reason the run failed.
pub type Result<T = (), E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;

/// The nodes an example locks on.
pub struct Nodes {
    /// One URL per node, in node order.
    pub urls: Vec<String>,
    /// The local nodes, for the examples that kill or freeze some; `None` with
    /// `QUORUMLOCK_NODES`. The nodes stop when this is dropped.
    pub cluster: Option<RedisCluster>,
}

/// The server holding the data a lock protects, apart from the lock nodes.
pub struct Store {
    /// Its URL.
    pub url: String,
    /// The local one-node server, if one was started; it stops when this is dropped.
    _server: Option<RedisCluster>,
}

impl Nodes {
    fn remote(urls: Vec<String>) -> Self {
        Nodes {
            urls,
            cluster: None,
        }
    }

    fn local(cluster: RedisCluster) -> Self {
        let urls = cluster.urls();
        Nodes {
            urls,
            cluster: Some(cluster),
        }
    }
}

/// The nodes of `QUORUMLOCK_NODES`, or `local` local nodes started here.
pub async fn lock_nodes(local: usize) -> Result<Nodes> {
    Ok(match nodes_from_env() {
        Some(urls) => Nodes::remote(urls),
        None => Nodes::local(RedisCluster::start(local).await?),
    })
}

/// Like [`lock_nodes`], with local nodes that keep their data as `persistence` says
/// (fencing needs an append-only file).
pub async fn lock_nodes_with(local: usize, persistence: Persistence) -> Result<Nodes> {
    Ok(match nodes_from_env() {
        Some(urls) => Nodes::remote(urls),
        None => {
            let options = NodeOptions::default().with_persistence(persistence);
            Nodes::local(RedisCluster::start_with(local, options).await?)
        }
    })
}

/// Like [`lock_nodes`], plus a store for the protected data: with local nodes a server of
/// its own (as a database would be: the lock nodes only hold locks), with
/// `QUORUMLOCK_NODES` the first node (the example keeps its data under its own keys).
/// Local lock nodes keep their data as `persistence` says (fencing needs an append-only
/// file).
pub async fn lock_nodes_and_store(
    local: usize,
    persistence: Persistence,
) -> Result<(Nodes, Store)> {
    Ok(match nodes_from_env() {
        Some(urls) => {
            let url = urls.first().cloned().ok_or("QUORUMLOCK_NODES is empty")?;
            let store = Store { url, _server: None };
            (Nodes::remote(urls), store)
        }
        None => {
            let (cluster, server) = tokio::try_join!(
                RedisCluster::start_with(
                    local,
                    NodeOptions::default().with_persistence(persistence)
                ),
                RedisCluster::start(1)
            )?;
            let store = Store {
                url: server.node(0).url(),
                _server: Some(server),
            };
            (Nodes::local(cluster), store)
        }
    })
}

/// A connection to the Redis server at `url`, outside any lock.
pub async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// `main`'s exit code for the outcome of a run: on failure, the error goes to stderr.
pub fn exit_code(outcome: Result) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nFAILED: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The URLs of `QUORUMLOCK_NODES`, if it is set.
fn nodes_from_env() -> Option<Vec<String>> {
    let nodes = std::env::var("QUORUMLOCK_NODES").ok()?;
    let urls = nodes
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty());
    Some(urls.map(str::to_owned).collect())
}
