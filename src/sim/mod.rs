//! An in-memory, simulated lock backend for tests (feature `test-util`): no Redis needed.
//!
//! [`SimNode`] is a lock node kept in memory. It implements
//! [`LockNode`](crate::node::LockNode) by running what a Redis node sends: the same
//! commands and the very Lua scripts, with the same KEYS and ARGV, on a [`ScriptHost`] (an
//! embedded Lua 5.1 over an in-memory keyspace) whose TTLs run on a clock of its own. It
//! can be made to misbehave: its clock can run fast or slow or jump, it can crash and
//! restart with or without its data, forget its scripts, be slow to connect to, and it can
//! delay or lose replies, or apply a request and lose the reply. Its log records every
//! request with what the node did. [`SimCluster`] builds N of them and the
//! [`Redlock`](crate::Redlock)s over them.
//!
//! Every lock runs on the simulated nodes unchanged: the coordinator only sees
//! `LockNode`s, and takes its time from tokio's clock. Under a paused runtime
//! (`#[tokio::test(start_paused = true)]`) that clock is virtual: it jumps straight to the
//! next timer whenever every task waits, so a test that lets a 30-second TTL run out
//! finishes in microseconds, and runs the same way every time.
//!
//! Enable the feature for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! quorumlock = { version = "0.1", features = ["test-util"] }
//! tokio = { version = "1", features = ["macros", "rt", "test-util"] }
//! ```
//!
//! # Testing your own code without Redis
//!
//! Write the code against [`DistributedLock`](crate::DistributedLock), then hand it a
//! [`Redlock`](crate::Redlock) over simulated nodes in the tests. In a test file, the
//! runtime below is what `#[tokio::test(start_paused = true)]` sets up.
//!
//! ```
//! use std::time::Duration;
//! use quorumlock::sim::SimCluster;
//! use quorumlock::{DistributedLock, LockConfig, LockError};
//!
//! /// The code under test: runs the nightly job unless another process holds the lock.
//! async fn run_nightly<L: DistributedLock>(lock: &L, runs: &mut u32) -> Result<bool, LockError> {
//!     match lock.try_acquire("nightly").await {
//!         Ok(guard) => {
//!             *runs += 1;
//!             guard.release().await?;
//!             Ok(true)
//!         }
//!         Err(LockError::Held { .. }) => Ok(false),
//!         Err(other) => Err(other),
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Builder::new_current_thread()
//!     .enable_time()
//!     .start_paused(true)
//!     .build()?;
//! runtime.block_on(async {
//!     let cluster = SimCluster::new(3);
//!     let config = LockConfig::builder().ttl(Duration::from_secs(30)).build()?;
//!     let ours = cluster.redlock_for("ours", config.clone())?;
//!     let other = cluster.redlock_for("other", config)?;
//!     let mut runs = 0;
//!
//!     // Another process holds the lock: the job is skipped.
//!     let held = other.try_acquire("nightly").await?;
//!     assert!(!run_nightly(&ours, &mut runs).await?);
//!
//!     // Its holder vanished without releasing: the lock frees itself after the TTL (and
//!     // the millisecond Redis keeps a key past it), 30 virtual seconds that take no real
//!     // time.
//!     std::mem::forget(held);
//!     tokio::time::sleep(Duration::from_millis(30_001)).await;
//!     assert!(run_nightly(&ours, &mut runs).await?);
//!
//!     // One node of three down: still runs. Two down: a clear error naming the nodes.
//!     cluster.node(0).crash();
//!     assert!(run_nightly(&ours, &mut runs).await?);
//!     cluster.node(1).crash();
//!     let error = run_nightly(&ours, &mut runs).await.unwrap_err();
//!     assert!(matches!(error, LockError::NoQuorum { .. }), "{error}");
//!     assert!(error.to_string().contains("sim-1"));
//!     assert_eq!(runs, 2);
//!
//!     // The nodes' logs show what the code sent: here, our last attempt's rollback.
//!     let last = cluster.node(2).log().pop().unwrap();
//!     assert_eq!(last.op, quorumlock::sim::Op::Unlock);
//!     assert_eq!(last.client.as_deref(), Some("ours"));
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```
//!
//! # What is simulated, and what is not
//!
//! Simulated: the node scripts themselves (the lock, the fair queue and its reservations,
//! extension, release, fencing counters), key expiry in whole milliseconds on each node's
//! own clock (rate and jumps), the script cache (`EVALSHA`, `NOSCRIPT` and the client's
//! reload, lost on restart or `SCRIPT FLUSH`), one connection per client (its requests in
//! order, made on first use and after each crash, optionally slowly), crashes and restarts
//! with or without persistence, flushes and evictions, request and reply delays, lost
//! requests, applied requests with lost replies, and connection resets of replies in
//! flight across a crash, and release announcements once
//! [`announce_releases`](SimNode::announce_releases) turns them on (the scripts' own
//! messages, handed to the watches of their channels after the reply delay, and lost on
//! demand). Not simulated: memory limits, replication, and the client's own clock, which
//! is tokio's clock for every lock in the runtime.
//!
//! The crate's property tests (`tests/properties/`, described in
//! `docs/testing-properties.md`) run the Redlock coordinator on these nodes over thousands
//! of generated fault schedules and check the safety invariants on the nodes' logs.

mod clock;
mod cluster;
mod delivery;
mod log;
mod node;
mod pubsub;
mod server;

pub use self::cluster::SimCluster;
pub use self::log::{Applied, Op, OpRecord, Outcome, Reply, Stored};
pub use self::node::SimNode;
pub use self::server::{Data, Keyspace, LiveKey, Published, ScriptHost, ServerReply};
