//! Distributed locks on Redis that stay correct under faults.
//!
//! `quorumlock` runs the [Redlock] algorithm across N independent Redis nodes, so a lock
//! survives the loss of any minority of them, and offers a single-node lock behind the same
//! [`DistributedLock`] trait. It is for services that must never run the same critical
//! section twice: stock that must not be oversold, a cron job that must run on one host,
//! leader election, singleton workers.
//!
//! # Choosing a lock
//!
//! | you have | use |
//! |---|---|
//! | 3 or 5 independent Redis masters | [`Redlock`]: survives the loss of any minority |
//! | one Redis server | [`RedisLock`]: a `Redlock` of one node, as available as that server |
//! | a Redis Cluster, or a master managed by Sentinel | one member of either kind (`redis+cluster://`, `redis+sentinel://`; see [`NodeAddress`]), alone or beside others |
//! | readers and writers, K holders, a leader | [`RwLock`], [`Semaphore`], [`Election`], on a `Redlock` |
//! | many lock names with shared defaults | [`LockFactory`] over any [`DistributedLock`] |
//! | tests without Redis | [`Redlock::from_nodes`] over in-memory nodes (feature `test-util`, module `sim`) |
//!
//! # Cargo features
//!
//! - `tls` (default): `rediss://` through rustls, and [`TlsOptions`] for a private CA, a
//!   client certificate or no verification.
//! - `metrics`: counters and histograms through the `metrics` crate's facade, under the
//!   names of docs/operations.md ("Monitoring").
//! - `test-util`: the `sim` module, simulated nodes and clusters for deterministic tests.
//!
//! # Taking a lock
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock::{LockConfig, LockError, Redlock};
//!
//! # async fn run() -> Result<(), LockError> {
//! let urls: Vec<String> = (1..=5).map(|i| format!("redis://127.0.0.1:700{i}")).collect();
//! let lock = Redlock::connect(urls, LockConfig::default()).await?;
//!
//! // Bounded retries. Contended, it queues on the nodes: the holder's release hands the
//! // lock to the waiter that came first and wakes that one (see `LockConfig::fair`).
//! let guard = lock.acquire("order:12345").await?;
//! // ... the critical section, finished within guard.validity() ...
//! guard.release().await?; // compare-and-delete on every node
//!
//! // One attempt, no waiting: a cron job that must run on one host only.
//! match lock.try_acquire("cron:nightly").await {
//!     Ok(guard) => guard.release().await?,
//!     Err(LockError::Held { .. }) => println!("another host runs it"),
//!     Err(other) => return Err(other),
//! }
//!
//! // Give up after a deadline, whatever retries remain.
//! let guard = lock.acquire_timeout("report", Duration::from_secs(2)).await?;
//! # drop(guard);
//! # Ok(())
//! # }
//! ```
//!
//! A successful acquisition returns a [`LockGuard`]: the resource, a 128-bit random
//! [`LockToken`], and the deadline until which the lock is guaranteed to be ours
//! ([`validity`](LockGuard::validity)). Dropping the guard (an early return, `?`, a panic)
//! releases the lock in the background; [`release`](LockGuard::release) does it now and
//! reports whether the lock was still ours.
//!
//! # Long work: auto-extension and the lost-lock signal
//!
//! Work that may outlast the TTL keeps the lock alive with a watchdog and watches for its
//! loss, so it stops before another holder can start:
//!
//! ```no_run
//! # async fn run(lock: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
//! let rows = lock
//!     .with("nightly-export", |lost| async move {
//!         // Extended every third of the TTL while this runs; cancelled if the lock is lost.
//!         // `lost.validity()` says how long the lock is guaranteed right now.
//!         export_everything().await
//!     })
//!     .await?;
//! # Ok(())
//! # }
//! # async fn export_everything() -> u64 { 0 }
//! ```
//!
//! Many locks held at once (one per tenant, shard or device) are kept alive together by
//! a [`Session`]: one task and one request per node per interval for all of them, each lock
//! still extended, counted and lost on its own.
//!
//! The same pieces are available separately: [`LockGuard::auto_extend`] with [`AutoExtend`]
//! (interval, cap on the total hold time) and [`LockGuard::lost`], a [`LostSignal`] to
//! `select!` on, which fires before the deadline when extensions cannot be confirmed.
//!
//! # Fencing tokens
//!
//! A client paused longer than its validity (GC, swap, SIGSTOP) may act after losing its
//! lock. With [`fencing`](LockConfigBuilder::fencing) on, each acquisition mints a token
//! that strictly increases across holders of a resource ([`LockGuard::fencing_token`]), and
//! the protected resource rejects stale writes with [`fencing::fenced_set`]; a
//! read-modify-write claims its token with [`fencing::fenced_claim`] before it reads. See
//! [`fencing`] for how tokens are minted across a quorum and what they require.
//!
//! # Cohorts: tasks of one process pass the lock on
//!
//! When tasks of this process wait (with `acquire`) for a lock that another of its tasks
//! holds, the holder's release passes the lock straight to the next of them, without a
//! round trip: the keys stay on the nodes under the same token, and the waiter gets a
//! guard of its own (its own [`lost`](LockGuard::lost) signal and
//! [`auto_extend`](LockGuard::auto_extend)); [`LockMetrics::passed`] counts the passes. So
//! that waiters of other processes wait a bounded time, a lock passes at most
//! [`cohort_passes`](LockConfig::cohort_passes) times in a row (32 by default), within
//! [`cohort_window`](LockConfig::cohort_window) of being won on the nodes (10 ms), and
//! only with at least half its validity left; then the release goes to the nodes and
//! their fair queue. With fencing on, locks are not passed (each holder mints its own
//! token); `cohort_passes(0)` turns cohorts off.
//!
//! # Several resources at once
//!
//! [`DistributedLock::acquire_many`] locks a set of resources atomically: on each node all
//! keys or none, the quorum rule over nodes, one guard for all.
//!
//! # The lock family
//!
//! Built on the same quorum, each with the guard, the watchdog, the lost signal and the
//! deadlines of the mutex:
//!
//! - [`RwLock`]: any number of readers or one writer; a waiting writer keeps new readers
//!   out.
//! - [`Semaphore`]: at most K holders at once, as K permit slots that are each a mutex
//!   (a count per node would not be safe).
//! - [`Election`]: leader election with `campaign`, `resign` and `observe`, its terms
//!   numbered by fencing tokens.
//!
//! # Errors
//!
//! Every failure is a [`LockError`] naming the resource and the reason:
//! [`Held`](LockError::Held) by another owner, [`NoQuorum`](LockError::NoQuorum) (with a
//! [`Tally`] naming each node that failed and why), [`ValidityExhausted`](LockError::ValidityExhausted)
//! (the nodes were too slow), [`NotHeld`](LockError::NotHeld) or
//! [`Expired`](LockError::Expired) on release or refresh, [`Lost`](LockError::Lost) when
//! work under [`with`](DistributedLock::with) lost its lock, [`TimedOut`](LockError::TimedOut),
//! invalid configuration or names. [`LockError::is_retryable`] separates the failures worth
//! another attempt. Node names never include passwords.
//!
//! # Configuration
//!
//! [`LockConfig`] is an immutable, validated value: TTL 30 s, auto-release on, 3 retries,
//! 200 ms ± 100 ms between attempts, 1 % clock-drift allowance, 50 ms per-node timeout,
//! release notifications on, fencing off. Settings that make no sense (a zero TTL, a drift
//! allowance that eats the TTL, a per-node timeout not well below the TTL, ...) are
//! rejected with a [`ConfigError`] saying why.
//!
//! # Observability
//!
//! Each lock kind counts what it did ([`LockMetrics`], from `metrics()`) and what each
//! node did ([`NodeMetrics`], from `node_metrics()`), and emits
//! [`tracing`](https://docs.rs/tracing) events: per-node replies and latencies at `trace`,
//! acquisitions (with the tally), extensions and releases at `debug`, a failing node (at
//! most once per node every 10 s), losses and unconfirmed releases at `warn`. Acquisitions,
//! refreshes and releases run in `quorumlock.acquire` / `.refresh` / `.release` spans with
//! the resource, the attempts and the outcome. The `metrics` feature records counters and
//! histograms through the `metrics` crate (names in docs/operations.md, "Monitoring").
//!
//! # Deployments
//!
//! A lock's nodes are a [`Nodes`]: each member a [`NodeAddress`] (a server, a Redis
//! Cluster by its seeds as `redis+cluster://`, a Sentinel-managed master as
//! `redis+sentinel://`, or your own [`redis::Client`]), read once from anything
//! [`IntoNodeAddress`], with the facts of the deployment beside them: TLS options, hash
//! tags, [`ReplicaAcks`], Sentinel members, fencing on volatile nodes, the connect
//! timeout. [`Redlock::connect`] takes a node set, or anything [`IntoNodes`]. `rediss://`
//! works out of the box; `TlsOptions` (feature `tls`) adds a private CA, a client
//! certificate or (for development) no verification ([`Nodes::tls`]). Redis 6.2+ and
//! Valkey 7.2+ are supported; docs/operations.md lists the ACL grants a lock's user needs.
//!
//! # Guarantees, and their limits
//!
//! Every delete and every expiry change is conditional on the holder's token, so no client
//! can release or extend another's lock; a refresh never creates or revives a key. Validity
//! is computed on a monotonic clock with checked arithmetic, and an acquisition that fails
//! unlocks every node before returning, including nodes that did not answer; one dropped
//! mid-round unlocks them in the background.
//!
//! Mutual exclusion holds for the validity period as long as the nodes' clocks advance at
//! nearly the same rate (within the drift factor) and no node loses its keys (a restart
//! without persistence, an eviction). A client that pauses longer than its validity may
//! act after losing the lock: use fencing tokens where that matters. Redlock is an
//! efficiency lock with good availability, not a consensus protocol; where correctness
//! must survive arbitrary pauses and clock faults, use fencing or a consensus system.
//!
//! # Testing
//!
//! - The `quorumlock-testkit` crate: `RedisCluster` starts N real `redis-server` processes
//!   on free loopback ports and kills, freezes or restarts them, and `FaultProxy` injects
//!   network faults, to test your code against real faults.
//! - Feature `test-util`: `sim` offers in-memory nodes with simulated clocks and faults, on
//!   tokio's paused clock, to unit-test your code without Redis.
//!
//! [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/

#![cfg_attr(docsrs, feature(doc_cfg))]
// The lints this crate passes, declared so that it keeps passing them.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

/// The `redis` crate this one is built on, whose [`Client`](redis::Client) (and so
/// [`ConnectionInfo`](redis::ConnectionInfo)) [`Redlock::connect`] takes: use this
/// re-export to build them with the same version.
pub use redis;

/// The `futures` crate, whose [`Stream`](futures::Stream) [`Election::observe`] returns:
/// `use quorumlock::futures::StreamExt` reads it (`.next().await`) with no dependency of
/// your own, and with the same version.
pub use futures;

#[cfg(test)]
mod allocations;
pub mod backend;
mod bounds;
mod config;
mod election;
mod error;
mod factory;
mod fan_out;
pub mod fencing;
mod guard;
mod handoff;
mod held_as;
mod lease;
mod lock;
mod metrics;
pub mod node;
mod observe;
pub mod protocol;
mod quorum;
mod redlock;
mod resource;
mod retry;
mod rwlock;
mod scoped;
mod semaphore;
mod session;
mod token;
mod watchdog;
mod woken;

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod sim;

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use backend::tls::TlsOptions;
pub use backend::{IntoNodeAddress, IntoNodes, NodeAddress, Nodes, ReplicaAcks};
pub use config::{LockConfig, LockConfigBuilder};
pub use election::{Election, Leader, Leadership};
pub use error::{ConfigError, LeaseEnd, LockError, NodeError, NodeFailure, SessionEnd, Tally};
pub use factory::{LockFactory, NamedLock};
pub use guard::LockGuard;
pub use held_as::HeldAs;
pub use lease::LostSignal;
pub use lock::DistributedLock;
pub use metrics::{LockMetrics, NodeMetrics};
pub use quorum::quorum_of;
pub use redlock::{RedisLock, Redlock};
pub use resource::{MAX_RESOURCES, MAX_RESOURCE_LEN};
pub use rwlock::RwLock;
pub use semaphore::{Permit, Semaphore};
pub use session::{KeepAlive, Session, SessionOptions, SessionSignal};
pub use token::LockToken;
pub use watchdog::AutoExtend;

/// The README's examples, compiled (and, but for the one that needs real nodes, run) as
/// doctests, so that the first code a user copies cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
