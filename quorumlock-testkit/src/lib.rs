//! Test harness: real, independent Redis nodes for exercising distributed locks (such as
//! [`quorumlock`](https://docs.rs/quorumlock)'s) against real faults.
//!
//! [`RedisCluster::start`] launches `n` local `redis-server` processes, each on
//! a free `127.0.0.1` port with its own temporary directory, and returns once
//! every node answers. Nodes are independent servers (what Redlock needs), not
//! a Redis Cluster deployment. Each node ([`RedisProcess`]) can then be
//! failure-injected:
//!
//! * [`kill`](RedisProcess::kill): `SIGKILL`; connections are refused.
//! * [`freeze`](RedisProcess::freeze) / [`thaw`](RedisProcess::thaw):
//!   `SIGSTOP` / `SIGCONT`; connections are accepted but nothing is answered,
//!   which is what a partitioned or stalled node looks like to a client.
//! * [`restart`](RedisProcess::restart): back on the same port and directory;
//!   with its data under [`Persistence::AppendFsyncAlways`] (the default), empty with
//!   [`Persistence::None`].
//! * [`debug_sleep`](RedisProcess::debug_sleep): a slow node (`DEBUG SLEEP`).
//!
//! Direct-assertion helpers ([`RedisProcess::get`], [`pttl`](RedisProcess::pttl),
//! [`set`](RedisProcess::set), [`flush`](RedisProcess::flush),
//! [`RedisCluster::keys`], ...) open a fresh connection per call with a 2 s
//! budget, and fail at once with [`TestkitError::NotRunning`] on a node the
//! harness froze or stopped instead of hanging.
//!
//! Dropping a [`RedisProcess`] (or the [`RedisCluster`] owning it) kills and
//! reaps its process synchronously and removes its directory, so tests leave
//! no servers behind even when they fail.
//!
//! The binary is `$QUORUMLOCK_REDIS_SERVER` if set, else `redis-server` on
//! `PATH`, else `/usr/bin/redis-server` or `/usr/local/bin/redis-server`.
//! Freezing needs Unix signals.
//!
//! Network faults come from [`FaultProxy`], an in-process TCP proxy on
//! `127.0.0.1` that can, at any moment and for open connections too, add
//! latency (fixed or jittered, per direction), blackhole traffic (accept and
//! read, never answer), refuse new connections, reset or close open ones,
//! reset the connection that carries a given command (before the node runs
//! it, or after, losing the reply), and heal. [`ProxiedCluster`] puts one
//! proxy in front of each node of a [`RedisCluster`], so a test combines
//! network faults (through the proxies) with process faults (through the
//! nodes). `docs/chaos.md` describes the chaos and no-oversell suites built
//! on them.
//!
//! [`PostgresServer`] starts a local PostgreSQL server the same way (`initdb` into a
//! temporary directory, a free loopback port, stopped when dropped), for tests whose
//! protected data lives in a SQL database; run as root, it runs the server as the
//! `postgres` user, since PostgreSQL refuses root.
//!
//! With the `testcontainers` feature, the `containers` module offers the same kind of
//! cluster backed by `redis:7-alpine` containers, for machines without a local
//! `redis-server` but with Docker.
//!
//! With the `measure` feature, the `measure` module records and reads latencies
//! (HdrHistogram) and draws them as PNG plots, for benchmarks and load tools run against
//! these nodes.

//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock_testkit::{NodeState, RedisCluster};
//!
//! # async fn demo() -> Result<(), quorumlock_testkit::TestkitError> {
//! let mut cluster = RedisCluster::start(3).await?;
//! let urls = cluster.urls(); // hand these to the lock under test
//! assert_eq!(urls.len(), 3);
//!
//! cluster.node(0).set("resource", "token", Some(Duration::from_secs(10))).await?;
//! assert_eq!(cluster.node(0).get("resource").await?.as_deref(), Some("token"));
//!
//! // Make one node unresponsive, then bring it back.
//! cluster.node_mut(1).freeze().await?;
//! assert_eq!(cluster.node(1).state(), NodeState::Frozen);
//! cluster.node_mut(1).thaw().await?;
//!
//! // Crash a node and restart it on the same port: without persistence it is empty.
//! cluster.node_mut(0).kill().await?;
//! cluster.node_mut(0).restart().await?;
//! assert_eq!(cluster.node(0).get("resource").await?, None);
//!
//! let keys = cluster.keys("res*").await?; // one sorted Vec per node
//! assert!(keys.iter().all(Vec::is_empty));
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
// The lints this crate passes, declared so that it keeps passing them.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod binary;
mod cluster;
#[cfg(feature = "testcontainers")]
#[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
pub mod containers;
mod direct;
mod error;
mod fake_clock;
#[cfg(feature = "measure")]
#[cfg_attr(docsrs, doc(cfg(feature = "measure")))]
pub mod measure;
mod options;
mod ports;
#[cfg(unix)]
mod postgres;
mod process;
mod proxy;
mod sentinel;
mod sharded;
mod signal;
mod state;
mod tls;

pub use binary::REDIS_SERVER_ENV;
pub use cluster::RedisCluster;
#[cfg(feature = "testcontainers")]
#[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
pub use containers::{start_containers, start_containers_with, ContainerCluster, RedisContainer};
pub use error::TestkitError;
pub use options::{NodeOptions, NodeTls, Persistence};
#[cfg(unix)]
pub use postgres::{PostgresServer, POSTGRES_BIN_ENV};
pub use process::RedisProcess;
pub use proxy::{Direction, FaultProxy, ProxiedCluster, ResetWhen, Tap};
pub use sentinel::{SentinelDeployment, SERVICE};
pub use sharded::{ShardedCluster, SLOTS};
pub use state::NodeState;
pub use tls::TestCertificates;
