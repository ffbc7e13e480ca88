//! The `quorumlock` binary run as a user would, against real redis-server nodes: one test
//! binary (one link, one build of the support), a module per subject.
//!
//! - [`run`]: `run` itself (mutual exclusion, exit codes, lost locks, process trees,
//!   flock's flags, node syntax, degraded nodes, logs), `status`, `release` and `--help`;
//! - [`shared_and_permits`]: `run --shared`, `--permits K`, and what `status` shows of them;
//! - [`cluster`]: Redis Cluster and Sentinel members;
//! - [`tls`]: `rediss://` nodes and the TLS options;
//! - [`acl`]: every command as an ACL user with exactly the documented grants (on another
//!   server: `QUORUMLOCK_REDIS_SERVER=... cargo test -p quorumlock-cli --test cli acl::`);
//! - [`bench`]: `quorumlock bench`;
//! - [`members`]: nodes that cannot serve the lock, named with their cause;
//! - [`messages`]: what the errors say, the usage line and `--help` (issue 29).

mod acl;
mod bench;
mod cluster;
mod members;
mod messages;
mod run;
mod shared_and_permits;
mod support;
mod tls;
