//! Local `redis-server` processes: [`RedisCluster`] and [`RedisProcess`].
//!
//! Also home of the pieces shared with the container backend: the error type,
//! node options and state, and the short-lived-connection helpers used for
//! direct assertions.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};
use tempfile::TempDir;
use tokio::process::{Child, Command};

/// Environment variable that, when set, names the `redis-server` binary to run.
pub const REDIS_SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";

/// How long a freshly started node may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Delay between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Upper bound for one readiness probe; a probe that hangs must not eat the whole budget.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Budget of every direct-assertion helper (connect + command).
const HELPER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many ports a new node tries before giving up.
const PORT_ATTEMPTS: usize = 5;
/// How many times `restart` retries its (fixed) port when it is momentarily busy.
const RESTART_ATTEMPTS: usize = 5;
/// How many log lines error messages quote.
const LOG_TAIL_LINES: usize = 20;
/// How long `Drop` waits for a killed child to be reaped.
const DROP_REAP_BUDGET: Duration = Duration::from_secs(2);

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
type Result<T, E = TestkitError> = std::result::Result<T, E>;

/// Lifecycle state of a node, as driven by the harness.
///
/// The state is what the harness last did to the node; a node that crashes on
/// its own still reports [`NodeState::Running`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// The node is serving requests.
    Running,
    /// The node is suspended (`SIGSTOP`, or a paused container): connections
    /// are accepted by the kernel but nothing is answered.
    Frozen,
    /// The node is not running: connections are refused.
    Stopped,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Running => "running",
            NodeState::Frozen => "frozen",
            NodeState::Stopped => "stopped",
        })
    }
}

/// Durability of a node's data across a kill and restart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// No RDB snapshots, no AOF (`--save "" --appendonly no`): a restarted node
    /// comes back empty.
    #[default]
    None,
    /// AOF with `appendfsync always`: every acknowledged write survives a
    /// `SIGKILL` and is reloaded on restart.
    AppendFsyncAlways,
}

/// Options applied to every node of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOptions {
    /// Data durability across restarts.
    pub persistence: Persistence,
    /// When set, nodes run with `--requirepass` and their URLs carry the
    /// password (`redis://:PASSWORD@127.0.0.1:PORT`).
    pub password: Option<String>,
    /// When set, nodes also listen for TLS on a port of their own
    /// ([`RedisProcess::tls_url`]); the plain port stays for the harness's own
    /// connections (readiness, helpers). Process backend only.
    pub tls: Option<NodeTls>,
}

/// The TLS settings of a test node (`--tls-port`, `--tls-cert-file`, `--tls-key-file`,
/// `--tls-ca-cert-file`, `--tls-auth-clients`); needs a `redis-server` built with TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTls {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA that client certificates must chain to (PEM).
    pub ca: PathBuf,
    /// Whether clients must present a certificate (mutual TLS).
    pub auth_clients: bool,
}

impl NodeTls {
    /// The server side of `certs`: its server certificate and CA, with client
    /// certificates required if `auth_clients`.
    pub fn from_certificates(certs: &super::tls::TestCertificates, auth_clients: bool) -> Self {
        NodeTls {
            cert: certs.server_cert(),
            key: certs.server_key(),
            ca: certs.ca_cert(),
            auth_clients,
        }
    }

    fn server_args(&self, port: u16) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["--tls-port".into(), port.to_string().into()];
        args.extend(["--tls-cert-file".into(), self.cert.clone().into()]);
        args.extend(["--tls-key-file".into(), self.key.clone().into()]);
        args.extend(["--tls-ca-cert-file".into(), self.ca.clone().into()]);
        args.extend([
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]);
        args
    }
}

impl NodeOptions {
    /// Returns these options with `persistence` set.
    pub fn with_persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Returns these options with TLS set (see [`NodeOptions::tls`]).
    pub fn with_tls(mut self, tls: NodeTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Returns these options with a password set.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The `redis-server` arguments for persistence and authentication, shared
    /// by the process and container backends.
    pub(crate) fn server_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec!["--save".into(), String::new()];
        match self.persistence {
            Persistence::None => args.extend(["--appendonly".into(), "no".into()]),
            Persistence::AppendFsyncAlways => args.extend([
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
            ]),
        }
        if let Some(password) = &self.password {
            args.extend(["--requirepass".into(), password.clone()]);
        }
        args
    }

    /// `redis://[:PASSWORD@]HOST:PORT`, with the password percent-encoded so
    /// any character survives URL parsing.
    pub(crate) fn url(&self, host: &str, port: u16) -> String {
        match &self.password {
            Some(password) => format!("redis://:{}@{host}:{port}", percent_encode(password)),
            None => format!("redis://{host}:{port}"),
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `redis-server` binary and the facts about it the harness depends on.
#[derive(Clone, Debug)]
struct ServerBinary {
    path: PathBuf,
    /// Major version; `DEBUG` must be enabled explicitly from 7 on, and older
    /// servers reject the option that does so.
    major: Option<u32>,
}

impl ServerBinary {
    async fn locate() -> Result<Self> {
        let path = locate_redis_server()?;
        let major = match Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
        {
            Ok(output) => parse_major_version(&String::from_utf8_lossy(&output.stdout)),
            Err(source) => {
                return Err(TestkitError::Spawn {
                    binary: path,
                    source,
                })
            }
        };
        Ok(Self { path, major })
    }
}

/// Extracts `7` from `Redis server v=7.0.15 sha=...`.
fn parse_major_version(version: &str) -> Option<u32> {
    let rest = &version[version.find("v=")? + 2..];
    rest.split('.').next()?.trim().parse().ok()
}

fn is_executable_file(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// `$QUORUMLOCK_REDIS_SERVER` (unless empty), else `redis-server` on `PATH`, else the
/// usual install locations.
fn locate_redis_server() -> Result<PathBuf> {
    if let Some(explicit) = std::env::var_os(REDIS_SERVER_ENV).filter(|value| !value.is_empty()) {
        let path = PathBuf::from(explicit);
        if is_executable_file(&path) {
            return Ok(path);
        }
        // An explicit choice that is wrong should not silently fall back to another binary.
        return Err(TestkitError::ServerNotFound {
            searched: format!(
                "{REDIS_SERVER_ENV}={} is not an executable file",
                path.display()
            ),
        });
    }
    let name = if cfg!(windows) {
        "redis-server.exe"
    } else {
        "redis-server"
    };
    if let Some(paths) = std::env::var_os("PATH") {
        if let Some(found) = std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable_file(candidate))
        {
            return Ok(found);
        }
    }
    const FALLBACKS: [&str; 2] = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"];
    FALLBACKS
        .iter()
        .map(PathBuf::from)
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| TestkitError::ServerNotFound {
            searched: format!(
                "{REDIS_SERVER_ENV} unset, `{name}` not on PATH, not at {}",
                FALLBACKS.join(" or ")
            ),
        })
}

/// A port that was free a moment ago. Another process may take it before
/// redis binds it; callers detect that and retry.
pub(crate) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// `n` distinct ports that were free a moment ago (see [`free_port`]): all
/// probe listeners are held at once, and released just before returning.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let ports = listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(ports)
}

// ---------------------------------------------------------------------------
// Short-lived-connection helpers, shared with the container backend.
// ---------------------------------------------------------------------------

/// A node the direct-assertion helpers can reach: [`RedisProcess`], and the
/// container backend's `RedisContainer`. Their public helper methods (and
/// those of their clusters) are thin wrappers over the functions below.
pub(crate) trait DirectNode {
    /// The node's URL.
    fn url(&self) -> String;
    /// `host:port`, as used in error messages.
    fn address(&self) -> String;
    /// What the harness last did to the node.
    fn state(&self) -> NodeState;

    /// The error of an operation refused because the node is not running.
    fn not_running(&self) -> TestkitError {
        TestkitError::NotRunning {
            node: self.address(),
            state: self.state(),
        }
    }
}

/// Opens a fresh multiplexed connection whose connect and responses are bounded by `timeout`.
async fn connect(url: &str, timeout: Duration) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Refuses to talk to a node the harness knows cannot answer, so helpers fail
/// at once instead of waiting for a timeout.
fn ensure_running(node: &str, state: NodeState) -> Result<()> {
    match state {
        NodeState::Running => Ok(()),
        state => Err(TestkitError::NotRunning {
            node: node.to_owned(),
            state,
        }),
    }
}

/// Runs `cmd` on a fresh connection, the whole exchange bounded by `timeout`.
pub(crate) async fn query_with_timeout<T: FromRedisValue>(
    url: &str,
    node: &str,
    state: NodeState,
    operation: &'static str,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> Result<T> {
    ensure_running(node, state)?;
    let exchange = async {
        let mut con = connect(url, timeout).await?;
        cmd.query_async::<T>(&mut con).await
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(TestkitError::Timeout {
            node: node.to_owned(),
            operation,
            timeout,
        }),
    }
}

/// [`query_with_timeout`] on `node`, with the standard helper budget.
async fn query<T: FromRedisValue>(
    node: &impl DirectNode,
    operation: &'static str,
    cmd: &redis::Cmd,
) -> Result<T> {
    let (url, address) = (node.url(), node.address());
    query_with_timeout(&url, &address, node.state(), operation, cmd, HELPER_TIMEOUT).await
}

/// `GET key`.
pub(crate) async fn get(node: &impl DirectNode, key: &str) -> Result<Option<String>> {
    query(node, "GET", redis::cmd("GET").arg(key)).await
}

/// `PTTL key`.
pub(crate) async fn pttl(node: &impl DirectNode, key: &str) -> Result<i64> {
    query(node, "PTTL", redis::cmd("PTTL").arg(key)).await
}

/// `SET key value [PX ms]`.
pub(crate) async fn set(
    node: &impl DirectNode,
    key: &str,
    value: &str,
    ttl: Option<Duration>,
) -> Result<()> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    if let Some(ttl) = ttl {
        cmd.arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    query::<()>(node, "SET", &cmd).await
}

/// `FLUSHALL`.
pub(crate) async fn flush(node: &impl DirectNode) -> Result<()> {
    query::<()>(node, "FLUSHALL", &redis::cmd("FLUSHALL")).await
}

/// Every key matching `pattern`, through `SCAN` (never `KEYS`), sorted and deduplicated.
pub(crate) async fn scan_keys(node: &impl DirectNode, pattern: &str) -> Result<Vec<String>> {
    let (url, address) = (node.url(), node.address());
    ensure_running(&address, node.state())?;
    let scan = async {
        let mut con = connect(&url, HELPER_TIMEOUT).await?;
        // SCAN may return a key more than once; a set removes the repeats.
        let mut keys = BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut con)
                .await?;
            keys.extend(batch);
            if next == 0 {
                return redis::RedisResult::Ok(keys.into_iter().collect());
            }
            cursor = next;
        }
    };
    match tokio::time::timeout(HELPER_TIMEOUT, scan).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(TestkitError::Timeout {
            node: address,
            operation: "SCAN",
            timeout: HELPER_TIMEOUT,
        }),
    }
}

/// Every key matching `pattern` on each of `nodes`, in node order. Fails if
/// any node is not running.
pub(crate) async fn keys_on_all<N: DirectNode>(
    nodes: &[N],
    pattern: &str,
) -> Result<Vec<Vec<String>>> {
    futures::future::try_join_all(nodes.iter().map(|node| scan_keys(node, pattern))).await
}

/// Like [`keys_on_all`], but the nodes that are not running yield an empty list.
pub(crate) async fn keys_on_running<N: DirectNode>(
    nodes: &[N],
    pattern: &str,
) -> Result<Vec<Vec<String>>> {
    futures::future::try_join_all(nodes.iter().map(|node| async move {
        if node.state() == NodeState::Running {
            scan_keys(node, pattern).await
        } else {
            Ok(Vec::new())
        }
    }))
    .await
}

/// `FLUSHALL` on each of `nodes`. Fails if any node is not running.
pub(crate) async fn flush_all<N: DirectNode>(nodes: &[N]) -> Result<()> {
    futures::future::try_join_all(nodes.iter().map(flush)).await?;
    Ok(())
}

/// One readiness probe: `INFO` answered, the node has finished loading its
/// data (a node restarted with an append-only file answers `INFO` while it
/// still refuses other commands with `LOADING`), and (when `expected_pid` is
/// given) by that very process rather than by some other server that happens
/// to hold the port.
async fn probe(url: &str, expected_pid: Option<u32>) -> bool {
    let exchange = async {
        let mut con = connect(url, PROBE_TIMEOUT).await?;
        // Every default section (server and persistence among them): `INFO` with several
        // section names is Redis 7+, and 6.2 refuses it.
        redis::cmd("INFO").query_async::<String>(&mut con).await
    };
    let Ok(Ok(info)) = tokio::time::timeout(PROBE_TIMEOUT, exchange).await else {
        return false;
    };
    if info.lines().any(|line| line.trim() == "loading:1") {
        return false;
    }
    match expected_pid {
        None => true,
        Some(pid) => info
            .lines()
            .filter_map(|line| line.strip_prefix("process_id:"))
            .any(|value| value.trim().parse::<u32>() == Ok(pid)),
    }
}

/// Polls until the node at `url` answers, for nodes the harness cannot watch
/// as a child process (containers).
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
pub(crate) async fn wait_until_answers(url: &str, node: &str) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if probe(url, None).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestkitError::Timeout {
                node: node.to_owned(),
                operation: "PING (readiness)",
                timeout: READY_TIMEOUT,
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

// ---------------------------------------------------------------------------
// Signals.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Signal {
    Stop,
    Cont,
}

#[cfg(unix)]
fn send_signal(pid: u32, signal: Signal) -> Result<()> {
    let (number, name) = match signal {
        Signal::Stop => (libc::SIGSTOP, "SIGSTOP"),
        Signal::Cont => (libc::SIGCONT, "SIGCONT"),
    };
    let raw_pid = libc::pid_t::try_from(pid).map_err(|_| TestkitError::Signal {
        signal: name,
        pid,
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: kill(2) has no memory-safety preconditions; the pid belongs to a
    // child we have not reaped yet, so it cannot have been recycled.
    let rc = unsafe { libc::kill(raw_pid, number) };
    if rc == 0 {
        Ok(())
    } else {
        Err(TestkitError::Signal {
            signal: name,
            pid,
            source: std::io::Error::last_os_error(),
        })
    }
}

#[cfg(not(unix))]
fn send_signal(_pid: u32, signal: Signal) -> Result<()> {
    Err(TestkitError::Unsupported(match signal {
        Signal::Stop => "freezing a node (SIGSTOP)",
        Signal::Cont => "thawing a node (SIGCONT)",
    }))
}

/// Waits (up to 1 s) until the kernel reports the process as stopped or not,
/// so that a test acting right after `freeze`/`thaw` sees the new state.
/// Signal delivery is asynchronous; without this a request sent immediately
/// after `freeze` could still be served. Only Linux exposes this cheaply; on
/// other systems this returns at once.
async fn wait_stopped_state(pid: u32, stopped: bool) {
    #[cfg(target_os = "linux")]
    {
        let deadline = Instant::now() + Duration::from_secs(1);
        let stat_path = format!("/proc/{pid}/stat");
        while Instant::now() < deadline {
            let Ok(stat) = std::fs::read_to_string(&stat_path) else {
                return;
            };
            // Format: "pid (comm) S ..."; comm may contain spaces and parentheses.
            let Some(state) = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
            else {
                return;
            };
            if (state == "T") == stopped {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, stopped);
    }
}

// ---------------------------------------------------------------------------
// RedisProcess.
// ---------------------------------------------------------------------------

/// One local `redis-server` process, owned by the harness.
///
/// The process runs in its own temporary directory (`--dir`, also holding its
/// log) and is killed when this value is dropped; the directory is then
/// removed. The port and directory survive [`kill`](Self::kill) so that
/// [`restart`](Self::restart) brings the node back at the same address with
/// the same data files.
pub struct RedisProcess {
    binary: ServerBinary,
    options: NodeOptions,
    port: u16,
    /// The TLS port, when the options ask for TLS.
    tls_port: Option<u16>,
    child: Option<Child>,
    state: NodeState,
    // Declared last so it is removed only after `Drop::drop` has killed the process.
    dir: TempDir,
}

impl fmt::Debug for RedisProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisProcess")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("state", &self.state)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl RedisProcess {
    /// Starts a node on a free port, retrying with a new port when the chosen
    /// one is taken between the probe and redis binding it.
    async fn start(binary: ServerBinary, options: NodeOptions, port: u16) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-redis-")
            .tempdir()?;
        let mut node = RedisProcess {
            binary,
            tls_port: None,
            options,
            port,
            child: None,
            state: NodeState::Stopped,
            dir,
        };
        let mut attempt = 1;
        if node.options.tls.is_some() {
            node.tls_port = Some(free_port()?);
        }
        loop {
            match node.launch(attempt).await {
                Ok(()) => return Ok(node),
                Err(TestkitError::PortInUse { .. } | TestkitError::ExitedEarly { .. })
                    if attempt < PORT_ATTEMPTS =>
                {
                    attempt += 1;
                    node.port = free_port()?;
                    if node.tls_port.is_some() {
                        node.tls_port = Some(free_port()?);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The node's URL: `redis://127.0.0.1:PORT`, or
    /// `redis://:PASSWORD@127.0.0.1:PORT` when a password is set.
    pub fn url(&self) -> String {
        self.options.url("127.0.0.1", self.port)
    }

    /// The node's TLS URL, `rediss://[:PASSWORD@]127.0.0.1:TLS_PORT`, when it runs with
    /// [`NodeOptions::tls`].
    pub fn tls_url(&self) -> Option<String> {
        let port = self.tls_port?;
        Some(
            self.options
                .url("127.0.0.1", port)
                .replacen("redis://", "rediss://", 1),
        )
    }

    /// The node's TLS port on 127.0.0.1, when it runs with [`NodeOptions::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The node's TCP port on 127.0.0.1 (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, as used in error messages.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process id, or `None` while the node is stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// What the harness last did to the node.
    pub fn state(&self) -> NodeState {
        self.state
    }

    /// The options the node runs with.
    pub fn options(&self) -> &NodeOptions {
        &self.options
    }

    /// The node's working directory (`--dir`): data files and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node's log file (`--logfile`).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Where the process's stdout and stderr go (messages printed before the
    /// log file is opened end up here).
    fn stdio_path(&self) -> PathBuf {
        self.dir.path().join("stdio.log")
    }

    /// A `redis::Client` for this node.
    pub fn client(&self) -> Result<redis::Client, TestkitError> {
        Ok(redis::Client::open(self.url())?)
    }

    /// Kills the node with `SIGKILL` and waits for it to exit. No-op when it
    /// is already stopped. A frozen node is killed as well.
    ///
    /// The port is not held while the node is down (nothing can hold it for
    /// redis), but [`restart`](Self::restart) reuses it.
    pub async fn kill(&mut self) -> Result<(), TestkitError> {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends a stopped process, so a frozen node needs no SIGCONT here.
            // `try_wait` first: if the node already died, `kill` would report an error.
            if child.try_wait()?.is_none() {
                child.kill().await?;
            }
        }
        self.state = NodeState::Stopped;
        Ok(())
    }

    /// Suspends the node with `SIGSTOP`: its port still accepts connections,
    /// but no command is answered until [`thaw`](Self::thaw). No-op when
    /// already frozen; an error when stopped.
    pub async fn freeze(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Frozen => Ok(()),
            NodeState::Stopped => Err(self.not_running()),
            NodeState::Running => {
                let pid = self.pid().ok_or_else(|| self.not_running())?;
                send_signal(pid, Signal::Stop)?;
                wait_stopped_state(pid, true).await;
                self.state = NodeState::Frozen;
                Ok(())
            }
        }
    }

    /// Resumes a frozen node with `SIGCONT`. No-op when running; an error when stopped.
    pub async fn thaw(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Running => Ok(()),
            NodeState::Stopped => Err(self.not_running()),
            NodeState::Frozen => {
                let pid = self.pid().ok_or_else(|| self.not_running())?;
                send_signal(pid, Signal::Cont)?;
                wait_stopped_state(pid, false).await;
                self.state = NodeState::Running;
                Ok(())
            }
        }
    }

    /// Kills the node if it is running or frozen, then starts it again on the
    /// same port with the same directory, and waits until it answers.
    ///
    /// With [`Persistence::None`] the node comes back empty; with
    /// [`Persistence::AppendFsyncAlways`] it reloads every acknowledged write.
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.kill().await?;
        let mut attempt = 1;
        loop {
            match self.launch(attempt).await {
                Ok(()) => return Ok(()),
                // The port is fixed, so only waiting can help (e.g. a client
                // socket briefly bound to it).
                Err(TestkitError::PortInUse { .. }) if attempt < RESTART_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `GET key` on a fresh connection (2 s budget).
    pub async fn get(&self, key: &str) -> Result<Option<String>, TestkitError> {
        get(self, key).await
    }

    /// `PTTL key` on a fresh connection (2 s budget): milliseconds left, `-1`
    /// when the key has no expiry, `-2` when it does not exist.
    pub async fn pttl(&self, key: &str) -> Result<i64, TestkitError> {
        pttl(self, key).await
    }

    /// `SET key value [PX ttl]` on a fresh connection (2 s budget).
    pub async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), TestkitError> {
        set(self, key, value, ttl).await
    }

    /// `FLUSHALL` on a fresh connection (2 s budget).
    pub async fn flush(&self) -> Result<(), TestkitError> {
        flush(self).await
    }

    /// Every key matching `pattern` (`SCAN ... MATCH`), sorted.
    pub async fn keys(&self, pattern: &str) -> Result<Vec<String>, TestkitError> {
        scan_keys(self, pattern).await
    }

    /// `DEBUG SLEEP`: blocks the whole server for `duration`, which makes it a
    /// slow node rather than a dead one.
    ///
    /// The returned future owns what it needs, so it can be spawned and the
    /// test can act while the node sleeps:
    /// `let sleeping = tokio::spawn(node.debug_sleep(Duration::from_millis(300)));`.
    /// It resolves when the server wakes up. Needs redis-server 7+ (started
    /// with `--enable-debug-command local`) or an older server, where `DEBUG`
    /// is always allowed.
    pub fn debug_sleep(
        &self,
        duration: Duration,
    ) -> impl Future<Output = Result<(), TestkitError>> + Send + 'static {
        let url = self.url();
        let node = self.address();
        let state = self.state;
        async move {
            let mut cmd = redis::cmd("DEBUG");
            cmd.arg("SLEEP").arg(duration.as_secs_f64());
            query_with_timeout::<()>(
                &url,
                &node,
                state,
                "DEBUG SLEEP",
                &cmd,
                duration + HELPER_TIMEOUT,
            )
            .await
        }
    }

    /// Spawns redis-server on `self.port` and waits until it answers; on
    /// failure (or cancellation, through `kill_on_drop`) the process is gone
    /// and the node stays stopped.
    async fn launch(&mut self, attempt: usize) -> Result<()> {
        let log_path = self.log_path();
        let stdio_path = self.stdio_path();
        // Logs are appended across restarts; remember where this run starts so
        // that diagnosis only looks at this run's lines.
        let log_offset = file_len(&log_path);
        let stdio_offset = file_len(&stdio_path);
        let stdout = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stdio_path)?;
        let stderr = stdout.try_clone()?;

        let mut cmd = Command::new(&self.binary.path);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log_path)
            .args(self.options.server_args());
        if let (Some(tls), Some(port)) = (&self.options.tls, self.tls_port) {
            cmd.args(tls.server_args(port));
        }
        if self.binary.major.is_some_and(|major| major >= 7) {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            // Safety net in case `Drop` is bypassed (e.g. a panic while unwinding).
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| TestkitError::Spawn {
            binary: self.binary.path.clone(),
            source,
        })?;
        let pid = child.id();

        let url = self.url();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            // Race the probe against the child's exit: a node that cannot bind
            // dies at once, while a probe against whatever holds the port may
            // hang until its timeout.
            let exited = tokio::select! {
                biased;
                status = child.wait() => Some(status?),
                ready = probe(&url, pid) => {
                    if ready {
                        self.child = Some(child);
                        self.state = NodeState::Running;
                        return Ok(());
                    }
                    None
                }
            };
            if let Some(status) = exited {
                let log = read_from(&log_path, log_offset) + &read_from(&stdio_path, stdio_offset);
                let log_tail = tail(&log, LOG_TAIL_LINES);
                return Err(if log.contains("Address already in use") {
                    TestkitError::PortInUse {
                        port: self.port,
                        attempts: attempt,
                        log_tail,
                    }
                } else {
                    TestkitError::ExitedEarly {
                        port: self.port,
                        status: status.to_string(),
                        log_tail,
                    }
                });
            }
            if Instant::now() >= deadline {
                // Not stored in `self`, so it must be killed here.
                child.kill().await?;
                let log = read_from(&log_path, log_offset) + &read_from(&stdio_path, stdio_offset);
                return Err(TestkitError::NotReady {
                    port: self.port,
                    timeout: READY_TIMEOUT,
                    log_tail: tail(&log, LOG_TAIL_LINES),
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Sends `SIGKILL` without waiting, so a cluster can kill all its nodes
    /// before reaping any of them.
    fn start_kill_quietly(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if self.state == NodeState::Frozen {
                if let Some(pid) = child.id() {
                    // SIGKILL ends stopped processes too; resuming first is
                    // belt and braces and costs nothing.
                    let _ = send_signal(pid, Signal::Cont);
                }
            }
            // An error means the child already exited; reaping handles that.
            let _ = child.start_kill();
        }
    }
}

impl DirectNode for RedisProcess {
    fn url(&self) -> String {
        RedisProcess::url(self)
    }

    fn address(&self) -> String {
        RedisProcess::address(self)
    }

    fn state(&self) -> NodeState {
        self.state
    }
}

impl Drop for RedisProcess {
    /// Kills and reaps the process synchronously: no async work, no panics.
    fn drop(&mut self) {
        self.start_kill_quietly();
        if let Some(mut child) = self.child.take() {
            // Reaping here (rather than leaving it to tokio's orphan queue)
            // means the pid is really gone once the value is dropped. SIGKILL
            // takes effect within milliseconds, so the sleep loop is short.
            let deadline = Instant::now() + DROP_REAP_BUDGET;
            loop {
                match child.try_wait() {
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // Reaped, an error, or out of budget: tokio's
                    // `kill_on_drop` and orphan reaping take over.
                    _ => break,
                }
            }
        }
        self.state = NodeState::Stopped;
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The contents of `path` from byte `offset` on (empty when unreadable:
/// the text is only used for diagnostics).
fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(offset)).is_ok() && file.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    text
}

/// The last `lines` lines of `text`, or a placeholder when there are none.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    if all.is_empty() {
        return "(log is empty)".to_owned();
    }
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------
// RedisCluster.
// ---------------------------------------------------------------------------

/// `n` independent local redis-server nodes (not a Redis Cluster deployment:
/// the nodes know nothing of each other, as Redlock requires).
///
/// Dropping the cluster kills every node and removes their directories.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisProcess>,
}

impl RedisCluster {
    /// Starts `n` independent redis-server processes on free 127.0.0.1 ports,
    /// with default [`NodeOptions`], and waits until each answers.
    pub async fn start(n: usize) -> Result<RedisCluster, TestkitError> {
        Self::start_with(n, NodeOptions::default()).await
    }

    /// Starts `n` nodes with the given options (see [`start`](Self::start)).
    pub async fn start_with(n: usize, options: NodeOptions) -> Result<RedisCluster, TestkitError> {
        let binary = ServerBinary::locate().await?;
        // Distinct ports for the nodes of one cluster, free until the servers start.
        let ports = free_ports(n)?;
        // On error, the nodes already started are dropped, hence killed.
        let nodes = futures::future::try_join_all(
            ports
                .into_iter()
                .map(|port| RedisProcess::start(binary.clone(), options.clone(), port)),
        )
        .await?;
        Ok(RedisCluster { nodes })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes' URLs, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProcess::url).collect()
    }

    /// Every node's TLS URL ([`RedisProcess::tls_url`]), in node order; empty unless the
    /// nodes run with [`NodeOptions::tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(RedisProcess::tls_url)
            .collect()
    }

    /// Node `i`.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisProcess {
        &self.nodes[i]
    }

    /// Node `i`, mutably (to kill, freeze, thaw or restart it).
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisProcess {
        &mut self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[RedisProcess] {
        &self.nodes
    }

    /// All nodes, mutably.
    pub fn nodes_mut(&mut self) -> &mut [RedisProcess] {
        &mut self.nodes
    }

    /// Every key matching `pattern` on every node (`SCAN`, not `KEYS`),
    /// indexed by node, each list sorted. Fails if any node is frozen or
    /// stopped; see [`keys_on_running`](Self::keys_on_running).
    pub async fn keys(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        keys_on_all(&self.nodes, pattern).await
    }

    /// Like [`keys`](Self::keys), but frozen and stopped nodes yield an empty list.
    pub async fn keys_on_running(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        keys_on_running(&self.nodes, pattern).await
    }

    /// `FLUSHALL` on every node. Fails if any node is frozen or stopped.
    pub async fn flush_all(&self) -> Result<(), TestkitError> {
        flush_all(&self.nodes).await
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Signal every node first so they die in parallel; each node's own
        // Drop then only has to reap.
        for node in &mut self.nodes {
            node.start_kill_quietly();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_major_version() {
        assert_eq!(
            parse_major_version("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc"),
            Some(7)
        );
        assert_eq!(parse_major_version("Redis server v=6.2.1 sha=0"), Some(6));
        assert_eq!(parse_major_version("garbage"), None);
    }

    #[test]
    fn urls_encode_passwords() {
        let options = NodeOptions::default().with_password("p@ss:w/rd");
        assert_eq!(
            options.url("127.0.0.1", 7000),
            "redis://:p%40ss%3Aw%2Frd@127.0.0.1:7000"
        );
        assert_eq!(
            NodeOptions::default().url("127.0.0.1", 7000),
            "redis://127.0.0.1:7000"
        );
    }

    #[test]
    fn server_args_follow_options() {
        let args = NodeOptions::default()
            .with_persistence(Persistence::AppendFsyncAlways)
            .with_password("pw")
            .server_args();
        assert_eq!(
            args,
            [
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--requirepass",
                "pw"
            ]
        );
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("", 2), "(log is empty)");
    }
}
