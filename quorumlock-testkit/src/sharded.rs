//! [`ShardedCluster`]: a real Redis Cluster deployment on loopback (cluster-enabled
//! `redis-server` processes, the 16384 slots spread over the masters, optionally replicas),
//! with the faults and the resharding a lock must survive.
//!
//! Unlike [`RedisCluster`](crate::RedisCluster), whose nodes are independent servers, the
//! nodes here form one Redis Cluster: one member of a quorum, reached by the URL
//! [`ShardedCluster::url`] (`redis+cluster://...`).

use std::time::{Duration, Instant};

use redis::Value;

use crate::binary::ServerBinary;
use crate::direct::{query_with_timeout, HELPER_TIMEOUT};
use crate::error::{Result, TestkitError};
use crate::options::NodeOptions;
use crate::ports::free_cluster_port;
use crate::process::RedisProcess;

/// How many slots a Redis Cluster has.
pub const SLOTS: u16 = 16384;

/// How long the nodes may take to agree on the cluster, or to fail over.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// A local Redis Cluster: `masters` masters sharing the slots evenly, each with `replicas`
/// replicas. Nodes `0..masters` are the masters as started; the replicas of master `m`
/// follow, at `masters + m * replicas + r`. A failover changes which node is a master;
/// [`owner_of`](Self::owner_of) tells who serves a key now.
///
/// Dropping it kills every node and removes their directories.
#[derive(Debug)]
pub struct ShardedCluster {
    nodes: Vec<RedisProcess>,
    /// The cluster node id of each node (`CLUSTER MYID`), in node order.
    ids: Vec<String>,
    masters: usize,
}

impl ShardedCluster {
    /// Starts a cluster of `masters` masters with `replicas` replicas each, with default
    /// [`NodeOptions`], and returns once every node sees every slot served.
    pub async fn start(masters: usize, replicas: usize) -> Result<ShardedCluster> {
        Self::start_with(masters, replicas, NodeOptions::default()).await
    }

    /// [`start`](Self::start) with `options` for every node (cluster mode is added).
    pub async fn start_with(
        masters: usize,
        replicas: usize,
        options: NodeOptions,
    ) -> Result<ShardedCluster> {
        if masters == 0 {
            return Err(TestkitError::Unsupported("a cluster needs a master"));
        }
        let binary = ServerBinary::locate().await?;
        let options = NodeOptions {
            cluster_enabled: true,
            ..options
        };
        let count = masters * (1 + replicas);
        let ports = (0..count)
            .map(|_| free_cluster_port())
            .collect::<Result<Vec<u16>>>()?;
        let nodes = futures::future::try_join_all(
            ports
                .into_iter()
                .map(|port| RedisProcess::start(binary.clone(), options.clone(), port)),
        )
        .await?;
        let mut ids = Vec::with_capacity(count);
        for node in &nodes {
            ids.push(query::<String>(node, "CLUSTER MYID", &cluster(&["MYID"])).await?);
        }
        let cluster = ShardedCluster {
            nodes,
            ids,
            masters,
        };
        cluster.form(replicas).await?;
        Ok(cluster)
    }

    /// Assigns the slots, joins the nodes, attaches the replicas, and waits until every
    /// node sees a healthy cluster.
    async fn form(&self, replicas: usize) -> Result<()> {
        let share = usize::from(SLOTS) / self.masters;
        for (i, node) in self.nodes.iter().enumerate() {
            // Distinct epochs, as `redis-cli --cluster create` sets them, so that the
            // masters' slot claims never collide.
            let epoch = (i + 1).to_string();
            query::<()>(
                node,
                "SET-CONFIG-EPOCH",
                &cluster(&["SET-CONFIG-EPOCH", &epoch]),
            )
            .await?;
            if i < self.masters {
                let first = i * share;
                let last = if i + 1 == self.masters {
                    usize::from(SLOTS) - 1
                } else {
                    first + share - 1
                };
                let (first, last) = (first.to_string(), last.to_string());
                query::<()>(
                    node,
                    "ADDSLOTSRANGE",
                    &cluster(&["ADDSLOTSRANGE", &first, &last]),
                )
                .await?;
            }
        }
        let first = &self.nodes[0];
        for node in &self.nodes[1..] {
            let port = node.port().to_string();
            query::<()>(
                first,
                "CLUSTER MEET",
                &cluster(&["MEET", "127.0.0.1", &port]),
            )
            .await?;
        }
        self.settle(|info| {
            field(info, "cluster_known_nodes") == Some(self.nodes.len().to_string())
        })
        .await?;
        for r in 0..self.masters * replicas {
            let replica = &self.nodes[self.masters + r];
            let master = &self.ids[r / replicas];
            query::<()>(
                replica,
                "CLUSTER REPLICATE",
                &cluster(&["REPLICATE", master]),
            )
            .await?;
        }
        self.settle(|info| field(info, "cluster_state").as_deref() == Some("ok"))
            .await?;
        // Replicas must have synced before a failover test may rely on them, and must
        // acknowledge writes.
        for replica in &self.nodes[self.masters..] {
            wait_for_sync(replica).await?;
        }
        if replicas > 0 {
            for master in &self.nodes[..self.masters] {
                wait_for_acknowledgements(master, replicas).await?;
            }
        }
        Ok(())
    }

    /// Waits until `CLUSTER INFO` passes `check` on every running node.
    async fn settle(&self, check: impl Fn(&str) -> bool) -> Result<()> {
        wait_for(SETTLE_TIMEOUT, "the cluster to settle", || async {
            for node in self.running() {
                let info: String = query(node, "CLUSTER INFO", &cluster(&["INFO"])).await?;
                if !check(&info) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }

    /// The member URL, `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`, with every node as
    /// a seed (and the password, if the nodes have one).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(RedisProcess::address).collect();
        let plain = self.nodes[0].url();
        let credentials = plain
            .strip_prefix("redis://")
            .and_then(|rest| rest.rsplit_once('@'))
            .map_or(String::new(), |(credentials, _)| format!("{credentials}@"));
        format!("redis+cluster://{credentials}{}", hosts.join(","))
    }

    /// Number of nodes, masters and replicas.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never: it has a master at least).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i` (see the type's documentation for the order).
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn node(&self, i: usize) -> &RedisProcess {
        &self.nodes[i]
    }

    /// Node `i`, to kill, freeze, thaw or restart it.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisProcess {
        &mut self.nodes[i]
    }

    /// Every node, in order.
    pub fn nodes(&self) -> &[RedisProcess] {
        &self.nodes
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub async fn slot_of(&self, key: &str) -> Result<u16> {
        let node = self.any_running()?;
        query(node, "CLUSTER KEYSLOT", &cluster(&["KEYSLOT", key])).await
    }

    /// The index of the node that serves `key`'s slot as master now, as a running node
    /// sees it.
    pub async fn owner_of(&self, key: &str) -> Result<usize> {
        let slot = self.slot_of(key).await?;
        self.owner_of_slot(slot).await
    }

    /// The index of the node that serves `slot` as master now.
    pub async fn owner_of_slot(&self, slot: u16) -> Result<usize> {
        let node = self.any_running()?;
        let slots: Value = query(node, "CLUSTER SLOTS", &cluster(&["SLOTS"])).await?;
        let port = master_port_of(&slots, slot).ok_or(TestkitError::Unsupported(
            "no master serves the slot (a failover under way?)",
        ))?;
        self.nodes
            .iter()
            .position(|node| node.port() == port)
            .ok_or(TestkitError::Unsupported(
                "the slot's master is not one of ours",
            ))
    }

    /// `GET key` on the master that serves it.
    pub async fn get(&self, key: &str) -> Result<Option<String>> {
        let owner = self.owner_of(key).await?;
        self.nodes[owner].get(key).await
    }

    /// `GET key` on node `i` itself, a replica too (`READONLY` first, so that a replica
    /// answers from its copy instead of redirecting).
    pub async fn get_on(&self, i: usize, key: &str) -> Result<Option<String>> {
        let node = &self.nodes[i];
        if node.state() != crate::NodeState::Running {
            return Err(TestkitError::NotRunning {
                node: node.address(),
                state: node.state(),
            });
        }
        let exchange = async {
            let mut connection = node.client()?.get_multiplexed_async_connection().await?;
            let (value,): (Option<String>,) = redis::pipe()
                .cmd("READONLY")
                .ignore()
                .cmd("GET")
                .arg(key)
                .query_async(&mut connection)
                .await?;
            Ok::<_, TestkitError>(value)
        };
        tokio::time::timeout(HELPER_TIMEOUT, exchange)
            .await
            .map_err(|_| TestkitError::Timeout {
                node: node.address(),
                operation: "READONLY + GET",
                timeout: HELPER_TIMEOUT,
            })?
    }

    /// `PTTL key` on the master that serves it.
    pub async fn pttl(&self, key: &str) -> Result<i64> {
        let owner = self.owner_of(key).await?;
        self.nodes[owner].pttl(key).await
    }

    /// Moves `slot` and its keys to the master `to`, as a resharding does: the target
    /// imports, the source migrates (clients get `ASK` for keys already moved), the keys go
    /// over with `MIGRATE`, and every master is told the slot's new owner. It pauses for
    /// `pause` after marking the slot migrating and again after moving the keys, so that
    /// clients meet both halves of the move.
    pub async fn migrate_slot(&self, slot: u16, to: usize, pause: Duration) -> Result<()> {
        let from = self.owner_of_slot(slot).await?;
        if from == to {
            return Ok(());
        }
        let (source, target) = (&self.nodes[from], &self.nodes[to]);
        let slot_arg = slot.to_string();
        let importing = cluster(&["SETSLOT", &slot_arg, "IMPORTING", &self.ids[from]]);
        query::<()>(target, "SETSLOT IMPORTING", &importing).await?;
        let migrating = cluster(&["SETSLOT", &slot_arg, "MIGRATING", &self.ids[to]]);
        query::<()>(source, "SETSLOT MIGRATING", &migrating).await?;
        tokio::time::sleep(pause).await;
        loop {
            let keys: Vec<String> = query(
                source,
                "GETKEYSINSLOT",
                &cluster(&["GETKEYSINSLOT", &slot_arg, "100"]),
            )
            .await?;
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(target.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            query::<()>(source, "MIGRATE", &migrate).await?;
        }
        tokio::time::sleep(pause).await;
        let assign = cluster(&["SETSLOT", &slot_arg, "NODE", &self.ids[to]]);
        query::<()>(target, "SETSLOT NODE", &assign).await?;
        query::<()>(source, "SETSLOT NODE", &assign).await?;
        for node in self.running() {
            // The others learn it from the target's higher epoch too; telling them makes it
            // immediate. A replica refuses SETSLOT, which is fine.
            let _ = query::<()>(node, "SETSLOT NODE", &assign).await;
        }
        Ok(())
    }

    /// Waits until a node other than `old` serves `key`'s slot: the replica's promotion
    /// after its master was killed or frozen.
    pub async fn wait_for_failover(&self, key: &str, old: usize) -> Result<usize> {
        let slot = self.slot_of(key).await?;
        wait_for(SETTLE_TIMEOUT, "the failover", || async {
            Ok(self.owner_of_slot(slot).await.is_ok_and(|now| now != old))
        })
        .await?;
        self.owner_of_slot(slot).await
    }

    fn running(&self) -> impl Iterator<Item = &RedisProcess> {
        self.nodes
            .iter()
            .filter(|node| node.state() == crate::NodeState::Running)
    }

    fn any_running(&self) -> Result<&RedisProcess> {
        self.running().next().ok_or(TestkitError::Unsupported(
            "no node of the cluster is running",
        ))
    }
}

/// `CLUSTER <args...>`.
fn cluster(args: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd("CLUSTER");
    for arg in args {
        command.arg(*arg);
    }
    command
}

/// Runs `command` on `node` with the helpers' budget.
pub(crate) async fn query<T: redis::FromRedisValue>(
    node: &RedisProcess,
    operation: &'static str,
    command: &redis::Cmd,
) -> Result<T> {
    query_with_timeout(
        &node.url(),
        &node.address(),
        node.state(),
        operation,
        command,
        HELPER_TIMEOUT,
    )
    .await
}

/// Waits until `replica` reports its link to its master up (`master_link_status:up`).
pub(crate) async fn wait_for_sync(replica: &RedisProcess) -> Result<()> {
    wait_for(SETTLE_TIMEOUT, "replica sync", || async {
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let text: String = query(replica, "INFO", &info).await?;
        Ok(field(&text, "master_link_status").as_deref() == Some("up"))
    })
    .await
}

/// Waits until `master`'s `WAIT` counts `replicas` replicas: a replica whose link is up
/// may not be acknowledged yet, and a grant that asks for replica acknowledgements would
/// then be refused.
pub(crate) async fn wait_for_acknowledgements(
    master: &RedisProcess,
    replicas: usize,
) -> Result<()> {
    let wanted = i64::try_from(replicas).unwrap_or(i64::MAX);
    wait_for(SETTLE_TIMEOUT, "replica acknowledgements", || async {
        let mut wait = redis::cmd("WAIT");
        wait.arg(wanted).arg(500);
        let acknowledged: i64 = query(master, "WAIT", &wait).await?;
        Ok(acknowledged >= wanted)
    })
    .await
}

/// The value of `name:` in an `INFO`-style reply.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|line| {
        let (key, value) = line.trim_end().split_once(':')?;
        (key == name).then(|| value.to_owned())
    })
}

/// The port of the master serving `slot` in a `CLUSTER SLOTS` reply.
fn master_port_of(slots: &Value, slot: u16) -> Option<u16> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        let int = |value: &Value| match value {
            Value::Int(n) => u16::try_from(*n).ok(),
            _ => None,
        };
        let (first, last) = (int(fields.first()?)?, int(fields.get(1)?)?);
        if !(first..=last).contains(&slot) {
            return None;
        }
        let Value::Array(master) = fields.get(2)? else {
            return None;
        };
        int(master.get(1)?)
    })
}

/// Polls `done` every 50 ms until it says yes, for `timeout` at most.
async fn wait_for<F, Fut>(timeout: Duration, what: &'static str, mut done: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        // A node that does not answer yet (busy loading, or just killed) is not an error.
        if let Ok(true) = done().await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestkitError::Timeout {
                node: "cluster".to_owned(),
                operation: what,
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_of_a_slot_comes_from_cluster_slots() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::SimpleString("127.0.0.1".into()),
                Value::Int(port),
            ])
        };
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node(7001),
                node(7004),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7002)]),
        ]);
        assert_eq!(master_port_of(&slots, 0), Some(7001));
        assert_eq!(master_port_of(&slots, 5461), Some(7002));
        assert_eq!(master_port_of(&Value::Nil, 1), None);
        assert_eq!(
            field("a:1\r\ncluster_state:ok\r\n", "cluster_state").as_deref(),
            Some("ok")
        );
    }
}
