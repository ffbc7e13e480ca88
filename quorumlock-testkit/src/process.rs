//! [`RedisProcess`]: one local `redis-server` process, started, killed, frozen, thawed
//! and restarted by the harness, and its log quoted when it fails to start.

use std::fmt;
use std::future::Future;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::binary::ServerBinary;
use crate::direct::{self, DirectNode, HELPER_TIMEOUT, READY_POLL, READY_TIMEOUT};
use crate::error::{Result, TestkitError};
use crate::options::NodeOptions;
use crate::ports::{free_cluster_port, free_port};
use crate::signal::{send_signal, wait_stopped_state, Signal};
use crate::state::NodeState;

/// How many ports a new node tries before giving up.
const PORT_ATTEMPTS: usize = 5;
/// How many times `restart` retries its (fixed) port when it is momentarily busy.
const RESTART_ATTEMPTS: usize = 5;
/// How many log lines error messages quote.
pub(crate) const LOG_TAIL_LINES: usize = 20;
/// How long `Drop` waits for a killed child to be reaped.
const DROP_REAP_BUDGET: Duration = Duration::from_secs(2);

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
    pub(crate) async fn start(
        binary: ServerBinary,
        options: NodeOptions,
        port: u16,
    ) -> Result<Self> {
        let dir = node_dir()?;
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
                    node.port = if node.options.cluster_enabled {
                        free_cluster_port()?
                    } else {
                        free_port()?
                    };
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

    /// Sets the node's clock to the libfaketime `spec` (`+3600`: an hour ahead of the real
    /// time; `+0`: the real time), at once: for a node started with
    /// [`NodeOptions::fake_clock`](crate::NodeOptions::fake_clock). The file is replaced
    /// whole, so the server never reads half a spec.
    pub fn set_clock(&self, spec: &str) -> Result<()> {
        if self.options.fake_clock.is_none() {
            return Err(TestkitError::Io(std::io::Error::other(
                "the node was not started with NodeOptions::fake_clock",
            )));
        }
        let file = self.clock_file();
        let staged = file.with_extension("new");
        std::fs::write(&staged, spec)?;
        std::fs::rename(&staged, &file)?;
        Ok(())
    }

    /// The file libfaketime reads the node's clock from.
    fn clock_file(&self) -> PathBuf {
        self.dir.path().join("faketime")
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
    /// With [`Persistence::None`](crate::Persistence::None) the node comes back empty;
    /// with [`Persistence::AppendFsyncAlways`](crate::Persistence::AppendFsyncAlways) it
    /// reloads every acknowledged write.
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
        direct::get(self, key).await
    }

    /// `PTTL key` on a fresh connection (2 s budget): milliseconds left, `-1`
    /// when the key has no expiry, `-2` when it does not exist.
    pub async fn pttl(&self, key: &str) -> Result<i64, TestkitError> {
        direct::pttl(self, key).await
    }

    /// `SET key value [PX ttl]` on a fresh connection (2 s budget).
    pub async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Option<Duration>,
    ) -> Result<(), TestkitError> {
        direct::set(self, key, value, ttl).await
    }

    /// `FLUSHALL` on a fresh connection (2 s budget).
    pub async fn flush(&self) -> Result<(), TestkitError> {
        direct::flush(self).await
    }

    /// Every key matching `pattern` (`SCAN ... MATCH`), sorted.
    pub async fn keys(&self, pattern: &str) -> Result<Vec<String>, TestkitError> {
        direct::scan_keys(self, pattern).await
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
            direct::query_with_timeout::<()>(
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
        cmd.args(self.binary.debug_command_args());
        if let Some(spec) = &self.options.fake_clock {
            let file = self.clock_file();
            if !file.exists() {
                std::fs::write(&file, spec)?;
            }
            cmd.envs(crate::fake_clock::environment(&file)?);
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
                ready = direct::probe(&url, pid) => {
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
    pub(crate) fn start_kill_quietly(&mut self) {
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

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The contents of `path` from byte `offset` on (empty when unreadable:
/// the text is only used for diagnostics).
pub(crate) fn read_from(path: &Path, offset: u64) -> String {
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
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    if all.is_empty() {
        return "(log is empty)".to_owned();
    }
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A node's directory: on `/dev/shm` (memory) where it exists, so that an append-only
/// file fsynced on every write costs little, else in the temporary directory. A restart
/// of the process still finds its files; only the machine's reboot would lose them.
fn node_dir() -> std::io::Result<TempDir> {
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("quorumlock-redis-");
    if shm.is_dir() {
        if let Ok(dir) = builder.tempdir_in(shm) {
            return Ok(dir);
        }
    }
    builder.tempdir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("", 2), "(log is empty)");
    }
}
