//! The cluster as Docker containers (feature `testcontainers`).
//!
//! [`start_containers`] runs `n` independent `redis:7-alpine` containers via
//! the `testcontainers` crate and exposes the same kind of API as
//! [`RedisCluster`](crate::RedisCluster). Failure injection maps to container
//! operations: [`stop`](ContainerCluster::stop) / [`start`](ContainerCluster::start)
//! (node down, then back on the same host port with its data directory) and
//! [`pause`](ContainerCluster::pause) / [`unpause`](ContainerCluster::unpause)
//! (frozen node, through the cgroup freezer).
//!
//! Each container's port 6379 is mapped to a host port chosen free on this
//! machine, so a node's URL stays the same across stop and start. That
//! assumes the Docker engine runs on this machine (or at least has the same
//! port free). Containers are removed when the cluster is dropped.
//!
//! ```no_run
//! # async fn demo() -> Result<(), quorumlock_testkit::TestkitError> {
//! let mut cluster = quorumlock_testkit::start_containers(3).await?;
//! let urls = cluster.urls();
//! cluster.pause(1).await?;
//! cluster.unpause(1).await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::direct::{self, DirectNode};
use crate::error::TestkitError;
use crate::options::NodeOptions;
use crate::ports::{free_port, free_ports};
use crate::state::NodeState;

/// Image name of the nodes.
const IMAGE: &str = "redis";
/// Image tag of the nodes.
const TAG: &str = "7-alpine";
/// The port redis listens on inside the container.
const REDIS_PORT: u16 = 6379;
/// How long Docker may take to pull and start one container.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `n` independent `redis:7-alpine` containers with default options.
pub async fn start_containers(n: usize) -> Result<ContainerCluster, TestkitError> {
    start_containers_with(n, NodeOptions::default()).await
}

/// Starts `n` independent `redis:7-alpine` containers with `options`.
pub async fn start_containers_with(
    n: usize,
    options: NodeOptions,
) -> Result<ContainerCluster, TestkitError> {
    // Distinct host ports for the nodes, free until the containers start.
    let ports = free_ports(n)?;
    let nodes = futures::future::try_join_all(
        ports
            .into_iter()
            .map(|port| RedisContainer::start_new(options.clone(), port)),
    )
    .await?;
    Ok(ContainerCluster { nodes })
}

/// One `redis:7-alpine` container.
pub struct RedisContainer {
    container: ContainerAsync<GenericImage>,
    options: NodeOptions,
    host: String,
    port: u16,
    state: NodeState,
}

impl fmt::Debug for RedisContainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisContainer")
            .field("id", &self.container.id())
            .field("host", &self.host)
            .field("port", &self.port)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl RedisContainer {
    async fn start_new(options: NodeOptions, first_port: u16) -> Result<Self, TestkitError> {
        let mut port = first_port;
        let mut attempt = 1;
        loop {
            match Self::try_start(&options, port).await {
                Ok(node) => return Ok(node),
                // The host port may have been taken since it was probed; a new
                // one is the only fix. Other failures (no Docker, pull error)
                // would fail again, but are cheap to retry a couple of times.
                Err(_) if attempt < 3 => {
                    attempt += 1;
                    port = free_port()?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_start(options: &NodeOptions, port: u16) -> Result<Self, TestkitError> {
        let mut args = vec![
            "redis-server".to_owned(),
            "--protected-mode".into(),
            "no".into(),
        ];
        args.extend(options.server_args());
        let container = GenericImage::new(IMAGE, TAG)
            .with_exposed_port(REDIS_PORT.tcp())
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_cmd(args)
            .with_mapped_port(port, REDIS_PORT.tcp())
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .await?;
        let host = container.get_host().await?.to_string();
        let node = RedisContainer {
            container,
            options: options.clone(),
            host,
            port,
            state: NodeState::Running,
        };
        // The log line comes slightly before the port mapping is usable.
        direct::wait_until_answers(&node.url(), &node.address()).await?;
        Ok(node)
    }

    /// The node's URL (`redis://[:PASSWORD@]HOST:PORT`).
    pub fn url(&self) -> String {
        self.options.url(&self.host, self.port)
    }

    /// The host the container is reached on.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host port mapped to the container's 6379 (stable across stop and start).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `HOST:PORT`, as used in error messages.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The Docker container id.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// What the harness last did to the node.
    pub fn state(&self) -> NodeState {
        self.state
    }

    /// Stops the container immediately (no grace period). No-op when stopped.
    /// A paused container is unpaused first, as Docker cannot stop it otherwise.
    pub async fn stop(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Stopped => return Ok(()),
            NodeState::Frozen => self.container.unpause().await?,
            NodeState::Running => {}
        }
        // Timeout 0: SIGKILL right away, like a crash.
        self.container.stop_with_timeout(Some(0)).await?;
        self.state = NodeState::Stopped;
        Ok(())
    }

    /// Starts a stopped container again and waits until it answers. No-op when
    /// running; unpauses a paused container.
    pub async fn start(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Running => return Ok(()),
            NodeState::Frozen => return self.unpause().await,
            NodeState::Stopped => {}
        }
        self.container.start().await?;
        self.state = NodeState::Running;
        direct::wait_until_answers(&self.url(), &self.address()).await
    }

    /// Pauses the container (frozen node). No-op when paused; an error when stopped.
    pub async fn pause(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Frozen => Ok(()),
            NodeState::Stopped => Err(self.not_running()),
            NodeState::Running => {
                self.container.pause().await?;
                self.state = NodeState::Frozen;
                Ok(())
            }
        }
    }

    /// Unpauses the container. No-op when running; an error when stopped.
    pub async fn unpause(&mut self) -> Result<(), TestkitError> {
        match self.state {
            NodeState::Running => Ok(()),
            NodeState::Stopped => Err(self.not_running()),
            NodeState::Frozen => {
                self.container.unpause().await?;
                self.state = NodeState::Running;
                Ok(())
            }
        }
    }

    /// `GET key` on a fresh connection (2 s budget).
    pub async fn get(&self, key: &str) -> Result<Option<String>, TestkitError> {
        direct::get(self, key).await
    }

    /// `PTTL key` on a fresh connection (2 s budget).
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
}

impl DirectNode for RedisContainer {
    fn url(&self) -> String {
        RedisContainer::url(self)
    }

    fn address(&self) -> String {
        RedisContainer::address(self)
    }

    fn state(&self) -> NodeState {
        self.state
    }
}

/// `n` independent Redis containers. Dropping it removes the containers.
#[derive(Debug)]
pub struct ContainerCluster {
    nodes: Vec<RedisContainer>,
}

impl ContainerCluster {
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
        self.nodes.iter().map(RedisContainer::url).collect()
    }

    /// Node `i`.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node(&self, i: usize) -> &RedisContainer {
        &self.nodes[i]
    }

    /// Node `i`, mutably.
    ///
    /// # Panics
    /// When `i >= self.len()`, like slice indexing.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisContainer {
        &mut self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[RedisContainer] {
        &self.nodes
    }

    /// Stops node `i` (see [`RedisContainer::stop`]).
    pub async fn stop(&mut self, i: usize) -> Result<(), TestkitError> {
        self.checked_mut(i)?.stop().await
    }

    /// Starts node `i` again (see [`RedisContainer::start`]).
    pub async fn start(&mut self, i: usize) -> Result<(), TestkitError> {
        self.checked_mut(i)?.start().await
    }

    /// Pauses node `i` (see [`RedisContainer::pause`]).
    pub async fn pause(&mut self, i: usize) -> Result<(), TestkitError> {
        self.checked_mut(i)?.pause().await
    }

    /// Unpauses node `i` (see [`RedisContainer::unpause`]).
    pub async fn unpause(&mut self, i: usize) -> Result<(), TestkitError> {
        self.checked_mut(i)?.unpause().await
    }

    /// Every key matching `pattern` on every node, indexed by node. Fails if
    /// any node is paused or stopped.
    pub async fn keys(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        direct::keys_on_all(&self.nodes, pattern).await
    }

    /// Like [`keys`](Self::keys), but paused and stopped nodes yield an empty list.
    pub async fn keys_on_running(&self, pattern: &str) -> Result<Vec<Vec<String>>, TestkitError> {
        direct::keys_on_running(&self.nodes, pattern).await
    }

    /// `FLUSHALL` on every node. Fails if any node is paused or stopped.
    pub async fn flush_all(&self) -> Result<(), TestkitError> {
        direct::flush_all(&self.nodes).await
    }

    fn checked_mut(&mut self, index: usize) -> Result<&mut RedisContainer, TestkitError> {
        let len = self.nodes.len();
        self.nodes
            .get_mut(index)
            .ok_or(TestkitError::NoSuchNode { index, len })
    }
}
