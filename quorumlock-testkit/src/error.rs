//! [`TestkitError`], what every operation of the harness fails with.

use std::path::PathBuf;
use std::time::Duration;

use crate::state::NodeState;

/// Errors of the test harness.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` binary could be found.
    #[error(
        "redis-server not found ({searched}); install it with `apt-get install redis-server` \
         or set QUORUMLOCK_REDIS_SERVER to the binary's path"
    )]
    ServerNotFound {
        /// The places that were searched.
        searched: String,
    },
    /// The `redis-server` process could not be spawned.
    #[error("failed to spawn `{binary}`: {source}", binary = binary.display())]
    Spawn {
        /// The binary that was run.
        binary: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// A tool the harness runs (`openssl`, for [`TestCertificates`](crate::TestCertificates))
    /// is not installed.
    #[error("`{tool}` not found; install it with `apt-get install {package}`")]
    ToolNotFound {
        /// The program that was looked for.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// No PostgreSQL server binaries (`initdb` and `postgres`) could be found, for
    /// [`PostgresServer`](crate::PostgresServer).
    #[error(
        "PostgreSQL not found ({searched}); install it with `apt-get install postgresql` \
         or set QUORUMLOCK_POSTGRES_BIN to the directory holding `initdb` and `postgres`"
    )]
    PostgresNotFound {
        /// The places that were searched.
        searched: String,
    },
    /// A [`PostgresServer`](crate::PostgresServer) could not be made ready: `initdb`
    /// failed, the server exited or did not accept connections in time, or no user could
    /// run it (PostgreSQL refuses to run as root).
    #[error("PostgreSQL {step} failed: {reason}; log tail:\n{log_tail}")]
    Postgres {
        /// What was being done: `initdb`, `start`.
        step: &'static str,
        /// Why it failed.
        reason: String,
        /// The last lines of the tool's output or the server's log.
        log_tail: String,
    },
    /// The node was started but did not answer `PING` in time.
    #[error("redis-server on port {port} did not become ready within {timeout:?}; log tail:\n{log_tail}")]
    NotReady {
        /// The node's port.
        port: u16,
        /// How long the harness waited.
        timeout: Duration,
        /// The last lines of the node's log.
        log_tail: String,
    },
    /// The node exited while starting up (bad option, unusable directory, ...).
    #[error("redis-server on port {port} exited during startup ({status}); log tail:\n{log_tail}")]
    ExitedEarly {
        /// The node's port.
        port: u16,
        /// The exit status.
        status: String,
        /// The last lines of the node's log.
        log_tail: String,
    },
    /// The node could not bind its port because something else holds it.
    #[error("port {port} is already in use (tried {attempts} time(s)); log tail:\n{log_tail}")]
    PortInUse {
        /// The (last) port tried.
        port: u16,
        /// How many attempts were made.
        attempts: usize,
        /// The last lines of the node's log.
        log_tail: String,
    },
    /// The node is frozen or stopped, so it cannot serve a direct-assertion helper.
    #[error("node {node} is {state}, not running")]
    NotRunning {
        /// The node's address (`host:port`).
        node: String,
        /// Its current state.
        state: NodeState,
    },
    /// A direct-assertion helper did not finish in time.
    #[error("{operation} on node {node} timed out after {timeout:?}")]
    Timeout {
        /// The node's address (`host:port`).
        node: String,
        /// The command that timed out.
        operation: &'static str,
        /// The budget that was exceeded.
        timeout: Duration,
    },
    /// Sending a signal to a node's process failed.
    #[error("sending {signal} to pid {pid} failed: {source}")]
    Signal {
        /// The signal's name.
        signal: &'static str,
        /// The target process.
        pid: u32,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// A node index was out of range.
    #[error("node index {index} is out of range (the cluster has {len} node(s))")]
    NoSuchNode {
        /// The index asked for.
        index: usize,
        /// The number of nodes.
        len: usize,
    },
    /// The operation is not available on this platform (signals need Unix).
    #[error("{0} is not supported on this platform")]
    Unsupported(&'static str),
    /// An error reported by Redis or the Redis client.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// An I/O error (temporary directory, log file, free-port probe, ...).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// An error from the container backend.
    #[cfg(feature = "testcontainers")]
    #[error("testcontainers error: {0}")]
    Container(#[from] testcontainers::TestcontainersError),
}

/// Shorthand for results of the harness.
pub(crate) type Result<T, E = TestkitError> = std::result::Result<T, E>;
