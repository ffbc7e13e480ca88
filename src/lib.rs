//! Distributed locks on Redis that stay correct under faults.
//!
//! `quorumlock` runs the [Redlock] algorithm across N independent Redis nodes, so a lock
//! survives the loss of any minority of them, and offers a single-node lock behind the same
//! [`DistributedLock`] trait.
//!
//! | you have | use |
//! |---|---|
//! | several independent Redis masters (3 or 5) | [`Redlock`] |
//! | one Redis server | [`RedisLock`] |
//! | many lock names with shared defaults | [`LockFactory`] over either |
//!
//! # A lock in five lines
//!
//! ```no_run
//! use quorumlock::{DistributedLock, LockConfig, Redlock};
//!
//! # async fn run() -> Result<(), quorumlock::LockError> {
//! let urls = (1..=5).map(|i| format!("redis://127.0.0.1:700{i}"));
//! let lock = Redlock::connect(urls, LockConfig::default()).await?;
//! let guard = lock.acquire("order:12345").await?;   // bounded retries with jitter
//! // ... the critical section, finished within guard.validity() ...
//! guard.release().await?;                           // compare-and-delete on every node
//! # Ok(())
//! # }
//! ```
//!
//! # The pieces
//!
//! - [`LockConfig`]: immutable, validated settings (TTL 30 s, auto-release on, 3 retries,
//!   200 ms ± 100 ms between attempts, 1 % clock-drift allowance, 50 ms per-node timeout).
//! - [`DistributedLock`]: `try_acquire` (one attempt), `acquire` (bounded retries),
//!   `release`, `is_acquired`, `refresh`.
//! - [`LockGuard`]: proof of ownership, with the token and the validity deadline. Dropping
//!   it releases the lock in the background.
//! - [`LockError`]: says which resource and why: [`Held`](LockError::Held) by another owner,
//!   [`NoQuorum`](LockError::NoQuorum) (naming each failed node and the reason),
//!   [`ValidityExhausted`](LockError::ValidityExhausted) (the nodes were too slow),
//!   [`NotHeld`](LockError::NotHeld) / [`Expired`](LockError::Expired) on release or refresh,
//!   invalid configuration or name.
//! - [`node::LockNode`]: the four commands a lock sends to one node; [`node::RedisNode`]
//!   implements them on a real server over one auto-reconnecting multiplexed connection.
//!
//! # Guarantees, and their limits
//!
//! Every delete and every expiry change is conditional on the holder's token, so no client
//! can release or extend another's lock; a refresh never creates or revives a key. Validity
//! is computed on a monotonic clock with checked arithmetic, and an acquisition that fails
//! unlocks every node before returning, including nodes that did not answer.
//!
//! Mutual exclusion holds for the validity period as long as the nodes' clocks advance at
//! nearly the same rate (within the drift factor) and no node loses its keys (a restart
//! without persistence, an eviction). A client that pauses (GC, swap, SIGSTOP) longer than
//! its validity may act after losing the lock: protect the resource itself where that
//! matters. Redlock is an efficiency lock with good availability, not a consensus protocol.
//!
//! [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/

#![warn(missing_docs)]

mod config;
mod error;
mod factory;
pub mod fencing;
mod guard;
mod handoff;
mod lease;
mod lock;
mod metrics;
pub mod node;
mod quorum;
mod redlock;
mod resource;
mod retry;
mod scoped;
mod single;
mod token;
mod watchdog;

#[cfg(feature = "test-util")]
pub mod sim;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use config::{LockConfig, LockConfigBuilder};
pub use error::{ConfigError, LockError, NodeError, NodeFailure, Tally};
pub use factory::{LockFactory, NamedLock};
pub use guard::LockGuard;
pub use lease::{LeaseEnd, LostSignal};
pub use lock::DistributedLock;
pub use metrics::LockMetrics;
pub use redlock::Redlock;
pub use resource::{MAX_RESOURCES, MAX_RESOURCE_LEN};
pub use single::RedisLock;
pub use token::LockToken;
pub use watchdog::AutoExtend;
