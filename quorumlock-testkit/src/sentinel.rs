//! [`SentinelDeployment`]: a master, its replicas and a Redis Sentinel watching them, on
//! loopback, for a single-node lock that must follow a failover.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::binary::ServerBinary;
use crate::direct::{query_with_timeout, HELPER_TIMEOUT, READY_POLL, READY_TIMEOUT};
use crate::error::{Result, TestkitError};
use crate::options::NodeOptions;
use crate::ports::{free_port, free_ports};
use crate::process::RedisProcess;
use crate::sharded::query;
use crate::state::NodeState;

/// The name the sentinel monitors the master under (`sentinel monitor <name> ...`).
pub const SERVICE: &str = "quorumlock";

/// How long a failover may take: the sentinel's `down-after-milliseconds` (1 s), its
/// election, and the replica's promotion.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// A master with `replicas` replicas (servers `1..`; server 0 is the first master) and one
/// sentinel (`redis-server --sentinel`) that fails the master over 1 s after it stops
/// answering. One sentinel is enough to elect itself; a production deployment runs three
/// or more.
///
/// Dropping it kills every process and removes their directories.
#[derive(Debug)]
pub struct SentinelDeployment {
    servers: Vec<RedisProcess>,
    sentinel: Child,
    sentinel_port: u16,
    // Removed after `Drop::drop` killed the sentinel.
    _sentinel_dir: tempfile::TempDir,
}

impl SentinelDeployment {
    /// Starts the master, its replicas (synced) and the sentinel (which knows them all).
    pub async fn start(replicas: usize) -> Result<SentinelDeployment> {
        let binary = ServerBinary::locate().await?;
        let ports = free_ports(1 + replicas)?;
        let servers = futures::future::try_join_all(
            ports
                .into_iter()
                .map(|port| RedisProcess::start(binary.clone(), NodeOptions::default(), port)),
        )
        .await?;
        let master_port = servers[0].port().to_string();
        for replica in &servers[1..] {
            let mut replicaof = redis::cmd("REPLICAOF");
            replicaof.arg("127.0.0.1").arg(&master_port);
            query::<()>(replica, "REPLICAOF", &replicaof).await?;
        }
        for replica in &servers[1..] {
            crate::sharded::wait_for_sync(replica).await?;
        }
        if replicas > 0 {
            crate::sharded::wait_for_acknowledgements(&servers[0], replicas).await?;
        }
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-sentinel-")
            .tempdir()?;
        let port = free_port()?;
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 logfile {dir}/sentinel.log\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {SERVICE} 1000\n\
                 sentinel failover-timeout {SERVICE} 5000\n",
                dir = dir.path().display(),
            ),
        )?;
        let sentinel = Command::new(&binary.path)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| TestkitError::Spawn {
                binary: binary.path.clone(),
                source,
            })?;
        let deployment = SentinelDeployment {
            servers,
            sentinel,
            sentinel_port: port,
            _sentinel_dir: dir,
        };
        deployment.wait_ready(replicas).await?;
        Ok(deployment)
    }

    /// Waits until the sentinel answers and lists every replica, each synced.
    async fn wait_ready(&self, replicas: usize) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self
                .known_replicas()
                .await
                .is_ok_and(|known| known >= replicas)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::NotReady {
                    port: self.sentinel_port,
                    timeout: READY_TIMEOUT,
                    log_tail: "the sentinel did not list every replica".to_owned(),
                });
            }
            tokio::time::sleep(READY_POLL.max(Duration::from_millis(50))).await;
        }
    }

    /// How many replicas the sentinel knows, synced with the master (`master-link-status:ok`).
    async fn known_replicas(&self) -> Result<usize> {
        let mut replicas = redis::cmd("SENTINEL");
        replicas.arg("REPLICAS").arg(SERVICE);
        let replicas: Vec<Vec<String>> = self.ask_sentinel("SENTINEL REPLICAS", &replicas).await?;
        Ok(replicas
            .iter()
            .filter(|fields| {
                fields
                    .windows(2)
                    .any(|pair| pair[0] == "master-link-status" && pair[1] == "ok")
            })
            .count())
    }

    /// The lock URL: `redis+sentinel://127.0.0.1:PORT/quorumlock`.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://127.0.0.1:{}/{SERVICE}",
            self.sentinel_port
        )
    }

    /// Server `i`: 0 is the first master, the replicas follow.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn server(&self, i: usize) -> &RedisProcess {
        &self.servers[i]
    }

    /// Server `i`, to kill, freeze or restart it.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn server_mut(&mut self, i: usize) -> &mut RedisProcess {
        &mut self.servers[i]
    }

    /// The index of the server the sentinel names as the master now.
    pub async fn master(&self) -> Result<usize> {
        let mut address = redis::cmd("SENTINEL");
        address.arg("GET-MASTER-ADDR-BY-NAME").arg(SERVICE);
        let (_, port): (String, u16) = self
            .ask_sentinel("GET-MASTER-ADDR-BY-NAME", &address)
            .await?;
        self.servers
            .iter()
            .position(|server| server.port() == port)
            .ok_or(TestkitError::Unsupported(
                "the sentinel names a master not of ours",
            ))
    }

    /// Waits until the sentinel names another master than `old`, and that server says it
    /// is a master; returns its index.
    pub async fn wait_for_failover(&self, old: usize) -> Result<usize> {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            if let Ok(now) = self.master().await {
                if now != old && self.is_master(now).await {
                    return Ok(now);
                }
            }
            if Instant::now() >= deadline {
                return Err(TestkitError::Timeout {
                    node: format!("sentinel 127.0.0.1:{}", self.sentinel_port),
                    operation: "failover",
                    timeout: FAILOVER_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn is_master(&self, i: usize) -> bool {
        let role = redis::cmd("ROLE");
        let reply: Result<redis::Value> = query(&self.servers[i], "ROLE", &role).await;
        matches!(reply, Ok(redis::Value::Array(fields))
            if matches!(fields.first(), Some(redis::Value::BulkString(role)) if role == b"master"))
    }

    async fn ask_sentinel<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        command: &redis::Cmd,
    ) -> Result<T> {
        let url = format!("redis://127.0.0.1:{}", self.sentinel_port);
        let name = format!("sentinel 127.0.0.1:{}", self.sentinel_port);
        query_with_timeout(
            &url,
            &name,
            NodeState::Running,
            operation,
            command,
            HELPER_TIMEOUT,
        )
        .await
    }
}

impl Drop for SentinelDeployment {
    /// Kills and reaps the sentinel synchronously (the servers do the same in their own
    /// `Drop`).
    fn drop(&mut self) {
        let _ = self.sentinel.start_kill();
        let deadline = Instant::now() + Duration::from_secs(1);
        while matches!(self.sentinel.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
