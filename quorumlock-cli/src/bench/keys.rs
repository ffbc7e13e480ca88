//! The keys a bench run may create, named in full up front, so that it can check them
//! before it starts and delete them when it ends without ever scanning (or touching) the
//! rest of a production keyspace.

use std::collections::HashSet;
use std::time::Duration;

use quorumlock::protocol::keys;
use redis::aio::ConnectionManager;

use crate::exit::{CliError, Kind};

/// The part of the prefix that says what made the keys, before the run id.
pub const PREFIX_TAG: &str = "quorumlock-bench:";

/// The keys the library derives from a lock key `<key>` when waiters queue or watch it:
/// the queue, its deadlines and the watch marker (`quorumlock::protocol::keys`).
fn derived_keys(key: &str) -> [String; 3] {
    [
        keys::queue_key(key),
        keys::deadlines_key(key),
        keys::watched_key(key),
    ]
}

/// The random run id: 8 hex digits, enough that two runs never meet by chance.
pub fn random_run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Checks a run id given with `--run-id`.
pub fn check_run_id(id: &str) -> Result<(), CliError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(
            CliError::new(Kind::Usage, format!("invalid --run-id {id:?}"))
                .hint("use 1 to 64 letters, digits, - or _"),
        )
    }
}

/// The resources of a run, under its key prefix.
#[derive(Debug, Clone)]
pub struct Names {
    /// `<--key-prefix><PREFIX_TAG><run id>:`, the lock's key prefix.
    pub prefix: String,
    /// One resource per task of the largest level, or the one shared resource.
    pub resources: Vec<String>,
}

/// The resource the per-node probes lock directly.
pub const PROBE_RESOURCE: &str = "probe";
/// The resource of the untimed warm-up cycle (connections and scripts loaded).
pub const WARMUP_RESOURCE: &str = "warmup";
/// The resource every task takes with --contended.
pub const SHARED_RESOURCE: &str = "shared";

impl Names {
    /// The names for a run of up to `tasks` concurrent tasks.
    pub fn new(base_prefix: Option<&str>, run_id: &str, tasks: u32, contended: bool) -> Self {
        let prefix = format!("{}{PREFIX_TAG}{run_id}:", base_prefix.unwrap_or(""));
        let resources = if contended {
            vec![SHARED_RESOURCE.to_owned()]
        } else {
            (0..tasks).map(|task| format!("t{task}")).collect()
        };
        Names { prefix, resources }
    }

    /// The resource task `task` takes.
    pub fn resource(&self, task: usize) -> &str {
        &self.resources[task % self.resources.len()]
    }

    /// The key of the probes.
    pub fn probe_key(&self) -> String {
        format!("{}{PROBE_RESOURCE}", self.prefix)
    }

    /// Every key the run may create on a node: each lock key and the keys the library
    /// derives from it.
    pub fn all_keys(&self) -> Vec<String> {
        let locks = self
            .resources
            .iter()
            .map(String::as_str)
            .chain([PROBE_RESOURCE, WARMUP_RESOURCE])
            .map(|resource| format!("{}{resource}", self.prefix));
        locks
            .flat_map(|key| {
                let derived = derived_keys(&key);
                std::iter::once(key).chain(derived)
            })
            .collect()
    }
}

/// Keys per `EXISTS` or `DEL`: bounded so that no single command blocks a node for long.
const BATCH: usize = 256;

/// Which of `keys` exist on the node.
pub async fn existing(
    conn: &mut ConnectionManager,
    keys: &[String],
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for batch in keys.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for key in batch {
            pipe.exists(key);
        }
        let flags: Vec<bool> = with_timeout(timeout, pipe.query_async(conn)).await?;
        found.extend(
            batch
                .iter()
                .zip(flags)
                .filter(|(_, exists)| *exists)
                .map(|(key, _)| key.clone()),
        );
    }
    Ok(found)
}

/// Deletes `keys` except those in `keep` (they existed before the run); returns how many
/// were deleted.
pub async fn delete(
    conn: &mut ConnectionManager,
    keys: &[String],
    keep: &HashSet<String>,
    timeout: Duration,
) -> Result<u64, String> {
    let ours: Vec<&String> = keys.iter().filter(|key| !keep.contains(*key)).collect();
    let mut deleted = 0;
    for batch in ours.chunks(BATCH) {
        let mut command = redis::cmd("DEL");
        for key in batch {
            command.arg(key.as_str());
        }
        deleted += with_timeout::<u64>(timeout, command.query_async(conn)).await?;
    }
    Ok(deleted)
}

/// Bounds one exchange with a node; errors as text for the report.
pub async fn with_timeout<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!(
            "timed out after {}",
            crate::duration::format_duration(timeout)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_under_the_run_prefix() {
        let names = Names::new(Some("app:"), "abc", 3, false);
        assert_eq!(names.prefix, "app:quorumlock-bench:abc:");
        let keys = names.all_keys();
        // 3 task resources, the probe and the warm-up, each with 3 derived keys.
        assert_eq!(keys.len(), 5 * 4);
        for key in &keys {
            assert!(key.contains("app:quorumlock-bench:abc:"), "{key}");
        }
        assert!(keys.contains(&"quorumlock:waiters:app:quorumlock-bench:abc:t2".to_owned()));
        assert_eq!(names.resource(4), "t1");
    }

    #[test]
    fn contended_runs_share_one_resource() {
        let names = Names::new(None, "x", 64, true);
        assert_eq!(names.resources, ["shared"]);
        assert_eq!(names.resource(63), "shared");
    }

    #[test]
    fn run_ids_are_plain() {
        assert!(check_run_id("nightly-1_a").is_ok());
        for bad in ["", "a*b", "a:b", "a b", &"x".repeat(65)] {
            assert_eq!(check_run_id(bad).unwrap_err().code(), 64, "{bad:?}");
        }
        assert_eq!(random_run_id().len(), 8);
    }
}
