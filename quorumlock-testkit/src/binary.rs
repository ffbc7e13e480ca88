//! Binary discovery: which `redis-server` the harness runs, and what its version allows.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use crate::error::{Result, TestkitError};

/// Environment variable that, when set, names the `redis-server` binary to run.
pub const REDIS_SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";

/// The `redis-server` binary and the facts about it the harness depends on.
#[derive(Clone, Debug)]
pub(crate) struct ServerBinary {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// Major version; `DEBUG` must be enabled explicitly from 7 on, and older
    /// servers reject the option that does so.
    major: Option<u32>,
}

impl ServerBinary {
    /// Finds the binary (see [`REDIS_SERVER_ENV`]) and asks it for its version.
    pub(crate) async fn locate() -> Result<Self> {
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

    /// The arguments that allow `DEBUG` (for [`debug_sleep`](crate::RedisProcess::debug_sleep)):
    /// none before Redis 7, which allows it unasked and refuses the option.
    pub(crate) fn debug_command_args(&self) -> &'static [&'static str] {
        if self.major.is_some_and(|major| major >= 7) {
            &["--enable-debug-command", "local"]
        } else {
            &[]
        }
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
}
