//! [`PostgresServer`]: one local PostgreSQL server for tests whose protected data lives in a
//! SQL database, started the way the harness starts `redis-server`: `initdb` into a
//! temporary directory, the server on a free loopback port, waited for until it accepts
//! connections, and stopped (its directory removed) when dropped.

use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::error::{Result, TestkitError};
use crate::ports::{free_port_at_most, MAX_CLUSTER_PORT};
use crate::process::{file_len, read_from, tail, LOG_TAIL_LINES};
use crate::signal::{send_signal, Signal};

/// Environment variable that, when set, names the directory holding the PostgreSQL server
/// binaries (`initdb` and `postgres`) [`PostgresServer`] runs.
pub const POSTGRES_BIN_ENV: &str = "QUORUMLOCK_POSTGRES_BIN";

/// The line the server logs once it accepts connections.
const READY_LINE: &str = "database system is ready to accept connections";
/// How many ports a new server tries before giving up.
const PORT_ATTEMPTS: usize = 5;
/// How long a started server may take to accept connections (crash recovery included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the log is read while waiting.
const READY_POLL: Duration = Duration::from_millis(20);
/// How long `Drop` waits for the server's immediate shutdown before killing it.
const STOP_BUDGET: Duration = Duration::from_secs(5);
/// Where Debian's `postgresql` package puts the server binaries: one directory per major
/// version (`/usr/lib/postgresql/15/bin`), none of them on `PATH`.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

/// One local PostgreSQL server, owned by the harness.
///
/// [`start`](Self::start) runs `initdb` into a fresh temporary directory (trust
/// authentication, superuser `postgres`, no fsync: a test database, not a durable one),
/// then the server on a free `127.0.0.1` port (drawn from the harness's range, at most
/// 55535), and returns once its log says it accepts connections. Connect with
/// [`url`](Self::url), for instance through `tokio-postgres`. Dropping the value shuts the
/// server down (`SIGQUIT`, then `SIGKILL` if it lingers), reaps it and removes the
/// directory.
///
/// PostgreSQL refuses to run as root. Run as root (as in CI), the harness runs `initdb`
/// and the server as the `postgres` user that Debian's package creates, and gives it the
/// directory; without that user, `start` fails with [`TestkitError::Postgres`].
///
/// The binaries are those in `$QUORUMLOCK_POSTGRES_BIN` if set, else `initdb` and
/// `postgres` on `PATH`, else the newest `/usr/lib/postgresql/<version>/bin` (Debian's
/// `postgresql` package); none found is [`TestkitError::PostgresNotFound`].
///
/// ```no_run
/// # async fn demo() -> Result<(), quorumlock_testkit::TestkitError> {
/// let server = quorumlock_testkit::PostgresServer::start().await?;
/// let url = server.url(); // postgres://postgres@127.0.0.1:PORT/postgres
/// assert!(url.ends_with("/postgres"));
/// # Ok(())
/// # }
/// ```
pub struct PostgresServer {
    port: u16,
    child: Option<Child>,
    // Declared last so it is removed only after `Drop::drop` has stopped the server.
    dir: TempDir,
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresServer")
            .field("port", &self.port)
            .field("pid", &self.child.as_ref().and_then(Child::id))
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PostgresServer {
    /// Initialises a database directory and starts a server on it, retrying with another
    /// port when the chosen one is taken before the server binds it.
    pub async fn start() -> Result<Self> {
        let bin = locate()?;
        let user = ServerUser::for_this_process()?;
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-postgres-")
            .tempdir()?;
        user.own(dir.path())?;
        let mut server = PostgresServer {
            port: 0,
            child: None,
            dir,
        };
        server.initdb(&bin, &user).await?;
        let mut attempt = 1;
        loop {
            server.port = free_port_at_most(MAX_CLUSTER_PORT)?;
            match server.launch(&bin, &user).await {
                Ok(()) => return Ok(server),
                Err(Launch::PortInUse) if attempt < PORT_ATTEMPTS => attempt += 1,
                Err(Launch::PortInUse) => {
                    return Err(TestkitError::PortInUse {
                        port: server.port,
                        attempts: attempt,
                        log_tail: server.log_tail(0),
                    })
                }
                Err(Launch::Failed(error)) => return Err(error),
            }
        }
    }

    /// The server's URL: `postgres://postgres@127.0.0.1:PORT/postgres` (the superuser, the
    /// default database, no password).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory: the database (`data/`), its socket and its log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (its standard output and error).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_tail(&self, offset: u64) -> String {
        tail(&read_from(&self.log_path(), offset), LOG_TAIL_LINES)
    }

    async fn initdb(&self, bin: &Path, user: &ServerUser) -> Result<()> {
        let output = user
            .command(&bin.join("initdb"), self.dir())
            .arg("--pgdata")
            .arg(self.data_dir())
            .args(["--username", "postgres", "--auth", "trust"])
            .args(["--encoding", "UTF8", "--locale", "C", "--no-sync"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|source| TestkitError::Spawn {
                binary: bin.join("initdb"),
                source,
            })?;
        if output.status.success() {
            return Ok(());
        }
        let text =
            String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
        Err(TestkitError::Postgres {
            step: "initdb",
            reason: output.status.to_string(),
            log_tail: tail(&text, LOG_TAIL_LINES),
        })
    }

    /// Spawns the server on `self.port` and waits until its log says it accepts
    /// connections; on failure the process is gone.
    async fn launch(&mut self, bin: &Path, user: &ServerUser) -> Result<(), Launch> {
        let log_path = self.log_path();
        let offset = file_len(&log_path);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| Launch::Failed(error.into()))?;
        let stderr = log
            .try_clone()
            .map_err(|error| Launch::Failed(error.into()))?;
        let mut child = user
            .command(&bin.join("postgres"), self.dir())
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            // Its Unix socket in its own directory, not the system's /var/run/postgresql.
            .arg("-k")
            .arg(self.dir())
            .args(["-c", "listen_addresses=127.0.0.1"])
            // A test database: fast, small, not durable.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            // Safety net in case `Drop` is bypassed.
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| {
                Launch::Failed(TestkitError::Spawn {
                    binary: bin.join("postgres"),
                    source,
                })
            })?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let text = read_from(&log_path, offset);
            if text.contains(READY_LINE) {
                self.child = Some(child);
                return Ok(());
            }
            let exited = child
                .try_wait()
                .map_err(|error| Launch::Failed(error.into()))?;
            if let Some(status) = exited {
                // Read again: the last lines may have been written as it exited.
                let text = read_from(&log_path, offset);
                if text.contains("Address already in use") {
                    return Err(Launch::PortInUse);
                }
                return Err(Launch::Failed(self.failed(status.to_string(), offset)));
            }
            if Instant::now() >= deadline {
                let _ = child.kill().await;
                let reason = format!("not ready within {READY_TIMEOUT:?}");
                return Err(Launch::Failed(self.failed(reason, offset)));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    fn failed(&self, reason: String, offset: u64) -> TestkitError {
        TestkitError::Postgres {
            step: "start",
            reason: format!("server on port {}: {reason}", self.port),
            log_tail: self.log_tail(offset),
        }
    }
}

impl Drop for PostgresServer {
    /// Shuts the server down and reaps it synchronously: `SIGQUIT` (an immediate
    /// shutdown, which also ends its backends), then `SIGKILL` if it outlives the budget.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let _ = send_signal(pid, Signal::Quit);
        }
        let deadline = Instant::now() + STOP_BUDGET;
        loop {
            match child.try_wait() {
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(None) => {
                    // Out of budget: kill it, and leave the reaping to tokio.
                    let _ = child.start_kill();
                    break;
                }
                _ => break,
            }
        }
    }
}

/// Why one launch failed: the port was taken (another may do), or anything else.
enum Launch {
    PortInUse,
    Failed(TestkitError),
}

/// Who runs the server: this process's user, or, when that is root (which PostgreSQL
/// refuses), the `postgres` user.
struct ServerUser {
    /// The user and group ids to switch to; `None` for this process's own.
    ids: Option<(u32, u32)>,
}

impl ServerUser {
    fn for_this_process() -> Result<Self> {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(ServerUser { ids: None });
        }
        let name = CString::new("postgres").expect("no NUL in the name");
        // SAFETY: `name` is a valid C string. getpwnam returns a pointer to static storage
        // (or null), read at once before any other passwd lookup of this harness.
        let entry = unsafe { libc::getpwnam(name.as_ptr()) };
        if entry.is_null() {
            return Err(TestkitError::Postgres {
                step: "start",
                reason: "running as root, which PostgreSQL refuses, and there is no `postgres` \
                         user to run it as (Debian's `postgresql` package creates one)"
                    .to_owned(),
                log_tail: String::new(),
            });
        }
        // SAFETY: non-null, so it points to a valid passwd entry.
        let ids = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
        Ok(ServerUser { ids: Some(ids) })
    }

    /// Gives `path` to the server's user.
    fn own(&self, path: &Path) -> std::io::Result<()> {
        match self.ids {
            Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }

    /// `program`, to run as the server's user in `dir` (a user switched to from root may
    /// not enter root's working directory).
    fn command(&self, program: &Path, dir: &Path) -> Command {
        let mut command = Command::new(program);
        command.current_dir(dir);
        if let Some((uid, gid)) = self.ids {
            // Switching from root, the standard library also drops root's extra groups.
            command.uid(uid).gid(gid);
        }
        command
    }
}

/// The directory holding `initdb` and `postgres`: `$QUORUMLOCK_POSTGRES_BIN` (unless
/// empty), else the first `PATH` entry with both, else the newest Debian version directory.
fn locate() -> Result<PathBuf> {
    let has_both = |dir: &Path| {
        ["initdb", "postgres"]
            .iter()
            .all(|name| dir.join(name).is_file())
    };
    if let Some(explicit) = std::env::var_os(POSTGRES_BIN_ENV).filter(|value| !value.is_empty()) {
        let dir = PathBuf::from(explicit);
        if has_both(&dir) {
            return Ok(dir);
        }
        // An explicit choice that is wrong should not silently fall back to another one.
        return Err(TestkitError::PostgresNotFound {
            searched: format!(
                "{POSTGRES_BIN_ENV}={} holds no `initdb` and `postgres`",
                dir.display()
            ),
        });
    }
    if let Some(found) = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|dir| has_both(dir)))
    {
        return Ok(found);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| TestkitError::PostgresNotFound {
            searched: format!(
                "{POSTGRES_BIN_ENV} unset, `initdb` and `postgres` not on PATH, nor in \
                 {DEBIAN_ROOT}/<version>/bin"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_explicit_directory_is_reported_not_replaced() {
        // Only this test of the crate sets the variable.
        std::env::set_var(POSTGRES_BIN_ENV, "/nonexistent/postgres/bin");
        let error = locate().unwrap_err();
        std::env::remove_var(POSTGRES_BIN_ENV);
        let message = error.to_string();
        assert!(
            message.contains("/nonexistent/postgres/bin")
                && message.contains("apt-get install postgresql"),
            "{message}"
        );
    }
}
