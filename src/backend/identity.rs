//! Who answers at a node's address: what a server says about itself on each new
//! connection, and the checks that keep one server from casting two votes.
//!
//! Two URLs can reach the same server (`localhost` and `127.0.0.1`, another database
//! number, a DNS alias, a trailing `/0`), and a quorum that counts that server twice
//! survives the loss of fewer servers than it claims. So servers are told apart by what
//! they report, not by their URLs: the `run_id` of `INFO server`, which each server
//! process draws at random when it starts. Where an ACL denies `INFO`, the address the
//! server reports for the connection (`laddr` of `CLIENT INFO`) stands in for it.
//!
//! The same `INFO` reply shows what cannot serve as a lock node at all: a replica, whose
//! writes fail with `READONLY`; a Redis Cluster node, whose multi-key scripts fail with
//! `CROSSSLOT`; a server without an append-only file, where fencing counters must survive
//! restarts; and a reply that is not Redis's at all.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::abstention::{restart_abstention, Abstention, Durability};

use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

/// How a server identifies itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ServerId {
    /// The `run_id` of `INFO server`: random per server process.
    RunId(String),
    /// The address the server reports for our connection (`laddr` of `CLIENT INFO`), where
    /// `INFO` is denied.
    Address(String),
    /// The node id of one node of a Redis Cluster (`CLUSTER NODES`), fixed for the node's
    /// life: a cluster member claims every node of its cluster.
    ClusterNode(String),
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerId::RunId(run_id) => write!(f, "run_id {run_id}"),
            ServerId::Address(address) => write!(f, "address {address}"),
            ServerId::ClusterNode(id) => write!(f, "cluster node {id}"),
        }
    }
}

/// What a server reported about itself when a connection to it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerFacts {
    /// `None` when the server denied both `INFO` and `CLIENT INFO`.
    pub(crate) id: Option<ServerId>,
    /// `role` of `INFO replication`.
    pub(crate) role: Option<String>,
    /// `cluster_enabled:1` of `INFO cluster`.
    pub(crate) cluster: bool,
    /// `aof_enabled` of `INFO persistence`; `None` when `INFO` was denied.
    pub(crate) append_only: Option<bool>,
    /// `tcp_port` of `INFO server`, to name the server in messages.
    pub(crate) port: Option<String>,
    /// `uptime_in_seconds` of `INFO server`: how long ago the server process started.
    pub(crate) uptime: Option<Duration>,
    /// Whether the append-only file is fsynced on every write (`CONFIG GET appendfsync`
    /// answers `always`); `None` when the server keeps none, or would not say.
    pub(crate) fsync_always: Option<bool>,
    /// Whether `INFO` was denied, so that the fallback is reported once.
    pub(crate) info_denied: bool,
}

impl ServerFacts {
    /// The facts in an `INFO` reply: `field:value` lines, grouped under `# Section` lines.
    pub(crate) fn from_info(info: &str) -> Self {
        let mut facts = ServerFacts::default();
        for line in info.lines() {
            let Some((field, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            match field {
                "run_id" => facts.id = Some(ServerId::RunId(value.to_owned())),
                "role" => facts.role = Some(value.to_owned()),
                "cluster_enabled" => facts.cluster = value == "1",
                "aof_enabled" => facts.append_only = Some(value == "1"),
                "tcp_port" => facts.port = Some(value.to_owned()),
                "uptime_in_seconds" => {
                    facts.uptime = value.parse().ok().map(Duration::from_secs);
                }
                _ => {}
            }
        }
        facts
    }

    fn describe(&self) -> String {
        match (&self.id, &self.port) {
            (Some(id), Some(port)) => format!("{id}, port {port}"),
            (Some(id), None) => id.to_string(),
            (None, _) => "unknown identity".to_owned(),
        }
    }
}

/// Why a server cannot be one of a lock's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The reply to `INFO` was not a Redis reply.
    NotRedis(String),
    /// `role:slave`.
    Replica,
    /// `cluster_enabled:1`.
    ClusterNode,
    /// Fencing is on and the server keeps no append-only file (or would not say).
    Volatile { known: bool },
    /// Another node of the same lock reached this very server.
    SameServer { other: String, server: String },
    /// The server has no database of the URL's number (`SELECT` answered `DB index is
    /// out of range`); the number, where known.
    NoDatabase { db: Option<i64> },
    /// A `redis+cluster://` member whose server is not in cluster mode.
    NotCluster,
    /// A `redis+sentinel://` member whose server is not a sentinel.
    NotSentinel,
    /// A `rediss://` member whose server speaks plain Redis and no TLS.
    NotTls,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotRedis(reply) => write!(
                f,
                "not a Redis server (its reply to INFO could not be read: {reply}); \
                 check the host and port"
            ),
            Refusal::Replica => f.write_str(
                "a replica (role:slave): lock writes would fail with READONLY; \
                 list the masters only, each an independent server",
            ),
            Refusal::ClusterNode => f.write_str(
                "a Redis Cluster node (cluster_enabled:1): a lock's keys may live in other \
                 slots, and its release would fail with CROSSSLOT, leaving the key for a \
                 whole TTL; write the cluster as one member, `redis+cluster://host:port`",
            ),
            Refusal::Volatile { known: true } => f.write_str(
                "keeps no append-only file (aof_enabled:0), so a restart loses its fencing \
                 counters and a later holder could be given an old token; run it with \
                 `appendonly yes`, or opt out with Nodes::fencing_on_volatile_nodes",
            ),
            Refusal::Volatile { known: false } => f.write_str(
                "would not say whether it keeps an append-only file (INFO denied), which \
                 fencing needs to survive restarts; allow `info` for the lock's user, or \
                 opt out with Nodes::fencing_on_volatile_nodes",
            ),
            Refusal::SameServer { other, server } => write!(
                f,
                "the same server as node {other} ({server}): one server must not vote \
                 twice in a quorum; list each server once"
            ),
            Refusal::NoDatabase { db } => {
                match db {
                    Some(db) => write!(f, "database {db} does not exist on this server")?,
                    None => f.write_str("the URL's database does not exist on this server")?,
                }
                f.write_str(
                    " (SELECT: DB index is out of range); a server has databases 0 to its \
                     `databases` setting minus one, 0 to 15 by default",
                )
            }
            Refusal::NotCluster => f.write_str(
                "not a Redis Cluster node (cluster support disabled); write a standalone \
                 server as `redis://host:port`",
            ),
            Refusal::NotSentinel => f.write_str(
                "not a Redis Sentinel (the address does not point to a sentinel node); give \
                 a sentinel's address and the master's name, \
                 `redis+sentinel://sentinel:26379/name`, or the server as `redis://`",
            ),
            Refusal::NotTls => f.write_str(
                "the server does not speak TLS (it answered plain Redis on that port); use \
                 `redis://` for it, or its TLS port (`tls-port`)",
            ),
        }
    }
}

/// What every node of one lock must be, and which servers its nodes reached: shared by
/// the nodes of one lock, so that two of them never count the same server.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// Whether each server must keep an append-only file (fencing on, not opted out).
    pub(crate) needs_persistence: bool,
    /// What each server's clock must do, if it is watched.
    pub(crate) clock: Option<super::clock::ClockRules>,
    /// How long after it started a server without a durable append-only file abstains:
    /// the longest lease plus its drift allowance; `None` when restarts are trusted.
    pub(crate) restart_window: Option<Duration>,
    /// The servers each node reached last, by node name: one, or every node of a cluster.
    servers: Mutex<HashMap<String, Vec<ServerId>>>,
}

impl Admission {
    /// Admission for nodes that must (or need not) persist their data.
    pub(crate) fn new(needs_persistence: bool) -> Self {
        Admission {
            needs_persistence,
            clock: None,
            restart_window: None,
            servers: Mutex::default(),
        }
    }

    /// This admission, with each server's clock watched by `rules` (`None`: not watched).
    pub(crate) fn clock_rules(mut self, rules: Option<super::clock::ClockRules>) -> Self {
        self.clock = rules;
        self
    }

    /// This admission, with servers younger than `window` that keep no durable
    /// append-only file abstaining until they are that old (`None`: never).
    pub(crate) fn restart_window(mut self, window: Option<Duration>) -> Self {
        self.restart_window = window;
        self
    }

    /// Whether a server that reported `facts` must abstain after a restart, and for how
    /// much longer (see [`restart_abstention`]).
    pub(crate) fn abstention(&self, facts: &ServerFacts) -> Option<Abstention> {
        let durability = Durability {
            uptime: facts.uptime,
            append_only: facts.append_only,
            fsync_always: facts.fsync_always,
        };
        restart_abstention(self.restart_window?, &durability)
    }

    /// Whether `node`, having reached a server that reported `facts`, may serve the lock;
    /// if so, the server is now `node`'s, and no other node may count it.
    pub(crate) fn admit(&self, node: &str, facts: &ServerFacts) -> Result<(), Refusal> {
        if facts.role.as_deref() == Some("slave") {
            return Err(Refusal::Replica);
        }
        if facts.cluster {
            return Err(Refusal::ClusterNode);
        }
        if self.needs_persistence && facts.append_only != Some(true) {
            return Err(Refusal::Volatile {
                known: facts.append_only.is_some(),
            });
        }
        let ids: Vec<ServerId> = facts.id.iter().cloned().collect();
        self.claim(node, ids, || facts.describe())
    }

    /// Whether `node`, a Redis Cluster whose nodes are `ids` and whose masters do (or do
    /// not, or would not say whether they) keep an append-only file, may serve the lock;
    /// if so, every node of that cluster is now `node`'s, and no other member may count
    /// any of them (two seeds of one cluster are one member).
    pub(crate) fn admit_cluster(
        &self,
        node: &str,
        ids: Vec<ServerId>,
        append_only: Option<bool>,
    ) -> Result<(), Refusal> {
        if self.needs_persistence && append_only != Some(true) {
            return Err(Refusal::Volatile {
                known: append_only.is_some(),
            });
        }
        self.claim(node, ids, || "the same Redis Cluster".to_owned())
    }

    /// Claims `ids` for `node`, unless another node claimed one of them.
    fn claim(
        &self,
        node: &str,
        ids: Vec<ServerId>,
        describe: impl FnOnce() -> String,
    ) -> Result<(), Refusal> {
        let mut servers = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.is_empty() {
            // Nothing to compare: the node keeps no claim, and only its URL tells it apart.
            servers.remove(node);
            return Ok(());
        }
        if let Some((other, _)) = servers.iter().find(|(other, claimed)| {
            other.as_str() != node && claimed.iter().any(|id| ids.contains(id))
        }) {
            return Err(Refusal::SameServer {
                other: other.clone(),
                server: describe(),
            });
        }
        servers.insert(node.to_owned(), ids);
        Ok(())
    }
}

/// Why a new connection was not taken into use.
#[derive(Debug, Clone)]
pub(crate) enum Rejection {
    /// No connection, no answer in time, or an error from the server while the connection
    /// was set up (a wrong password): the error each request gets until a connection is
    /// made.
    Failed(RedisError),
    /// The server answered, but cannot serve the lock.
    Refused(Refusal),
    /// The server may serve the lock, but not before some time has passed.
    Abstaining(Abstention),
}

impl Rejection {
    /// Why the node counts as failed without being asked, said as its
    /// [`excluded`](crate::NodeMetrics::excluded) reason: refused or abstaining, not merely
    /// not reached.
    pub(crate) fn exclusion(&self) -> Option<String> {
        match self {
            Rejection::Refused(refusal) => Some(refusal.to_string()),
            Rejection::Abstaining(abstention) => Some(abstention.to_string()),
            Rejection::Failed(_) => None,
        }
    }

    /// The error a request gets while the node is in this state.
    pub(crate) fn error(&self) -> RedisError {
        match self {
            Rejection::Failed(err) => err.clone(),
            Rejection::Refused(refusal) => RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("refused: {refusal}"),
            )),
            Rejection::Abstaining(abstention) => RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                abstention.to_string(),
            )),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Failed(err) => err.fmt(f),
            Rejection::Refused(refusal) => refusal.fmt(f),
            Rejection::Abstaining(abstention) => abstention.fmt(f),
        }
    }
}

/// Asks the server on `connection` what it is: `INFO` (one command, every default
/// section), or `CLIENT INFO` where an ACL denies `INFO`.
pub(crate) async fn inspect(
    connection: &mut MultiplexedConnection,
) -> Result<ServerFacts, Rejection> {
    let mut facts = match query(connection, redis::cmd("INFO")).await {
        Ok(Value::BulkString(bytes)) => ServerFacts::from_info(&String::from_utf8_lossy(&bytes)),
        Ok(Value::VerbatimString { text, .. }) => ServerFacts::from_info(&text),
        Ok(other) => {
            return Err(Rejection::Refused(Refusal::NotRedis(format!(
                "unexpected reply {other:?}"
            ))))
        }
        Err(err) if is_denied(&err) => return without_info(connection).await,
        Err(err) => return Err(rejection(err)),
    };
    if facts.append_only == Some(true) {
        facts.fsync_always = fsync_policy(connection)
            .await
            .map(|policy| policy == "always");
    }
    Ok(facts)
}

/// What a server that denies `INFO` still says: the address it reports for the
/// connection (`laddr` of `CLIENT INFO`), where allowed.
async fn without_info(connection: &mut MultiplexedConnection) -> Result<ServerFacts, Rejection> {
    let mut facts = ServerFacts {
        info_denied: true,
        ..ServerFacts::default()
    };
    let mut client_info = redis::cmd("CLIENT");
    client_info.arg("INFO");
    match query(connection, client_info).await {
        Ok(Value::BulkString(bytes)) => {
            facts.id = local_address(&String::from_utf8_lossy(&bytes)).map(ServerId::Address);
        }
        Ok(Value::VerbatimString { text, .. }) => {
            facts.id = local_address(&text).map(ServerId::Address);
        }
        Ok(_) => {}
        Err(err) if is_denied(&err) || is_unknown_command(&err) => {}
        Err(err) => return Err(rejection(err)),
    }
    Ok(facts)
}

/// The append-only file's fsync policy (`CONFIG GET appendfsync`), or `None` where
/// `CONFIG` is denied or renamed (managed services often do): the server is then not
/// known to fsync every write.
async fn fsync_policy(connection: &mut MultiplexedConnection) -> Option<String> {
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg("appendfsync");
    appendfsync_of(&query(connection, get).await.ok()?)
}

/// The value of a `CONFIG GET appendfsync` reply: `[name, value]` in RESP2, `{name:
/// value}` in RESP3.
pub(crate) fn appendfsync_of(reply: &Value) -> Option<String> {
    let value = match reply {
        Value::Array(fields) => fields.get(1)?,
        Value::Map(pairs) => &pairs.first()?.1,
        _ => return None,
    };
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// What a failed connection attempt or handshake means: a refusal where the server's
/// answer shows the address cannot be right whatever the network does (not Redis, no
/// such database, not the kind of server the URL's scheme says), else a failure that a
/// retry may mend.
pub(crate) fn rejection(err: RedisError) -> Rejection {
    if err.kind() == ErrorKind::Parse {
        return Rejection::Refused(Refusal::NotRedis(err.to_string()));
    }
    let message = err.to_string();
    let refusal = if message.contains("DB index is out of range") {
        Refusal::NoDatabase { db: None }
    } else if message.contains("cluster support disabled") {
        Refusal::NotCluster
    } else if message.contains("does not point to a sentinel") {
        Refusal::NotSentinel
    } else {
        return Rejection::Failed(err);
    };
    Rejection::Refused(refusal)
}

/// Whether the server at `host:port` answers a plain-text `PING` within `budget`, as a
/// Redis server without TLS does (`+PONG`, or an error such as `-NOAUTH`): asked when a
/// TLS connection to it failed, to say why.
pub(crate) async fn speaks_plain_redis(host: &str, port: u16, budget: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 8];
        let read = stream.read(&mut reply).await.ok()?;
        Some(matches!(reply.get(..read.min(1)), Some([b'+' | b'-'])))
    };
    matches!(tokio::time::timeout(budget, probe).await, Ok(Some(true)))
}

async fn query(
    connection: &mut MultiplexedConnection,
    command: redis::Cmd,
) -> redis::RedisResult<Value> {
    connection
        .send_packed_command(&command)
        .await
        .and_then(Value::extract_error)
}

fn is_denied(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) || err.code() == Some("NOPERM")
}

fn is_unknown_command(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.to_string().contains("unknown")
}

/// `laddr=` of a `CLIENT INFO` line.
fn local_address(client_info: &str) -> Option<String> {
    client_info
        .split_whitespace()
        .find_map(|field| field.strip_prefix("laddr="))
        .map(str::to_owned)
}

/// Says a thing once per node: a fallback or a refusal that would otherwise repeat with
/// every reconnect.
#[derive(Debug, Default)]
pub(crate) struct Once(AtomicBool);

impl Once {
    /// True the first time only.
    pub(crate) fn first(&self) -> bool {
        !self.0.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:7001\r\n\
        # Persistence\r\naof_enabled:0\r\n# Replication\r\nrole:master\r\n\
        # Cluster\r\ncluster_enabled:0\r\n";

    fn facts(info: &str) -> ServerFacts {
        ServerFacts::from_info(info)
    }

    #[test]
    fn info_gives_identity_role_cluster_and_persistence() {
        let facts = facts(INFO);
        assert_eq!(facts.id, Some(ServerId::RunId("abc123".into())));
        assert_eq!(facts.role.as_deref(), Some("master"));
        assert!(!facts.cluster);
        assert_eq!(facts.append_only, Some(false));
        assert_eq!(facts.port.as_deref(), Some("7001"));
    }

    #[test]
    fn one_server_is_admitted_for_one_node_only() {
        let admission = Admission::default();
        let server = facts(INFO);
        assert_eq!(admission.admit("redis://a:1", &server), Ok(()));
        // The same node reconnecting to the same server is fine.
        assert_eq!(admission.admit("redis://a:1", &server), Ok(()));
        let refusal = admission.admit("redis://a:1/1", &server).unwrap_err();
        assert!(
            matches!(&refusal, Refusal::SameServer { other, .. } if other == "redis://a:1"),
            "{refusal:?}"
        );
        assert!(refusal.to_string().contains("redis://a:1"), "{refusal}");
        // A restarted server has a new run_id; whichever node reaches it first keeps it.
        let restarted = facts(&INFO.replace("abc123", "def456"));
        assert_eq!(admission.admit("redis://a:1/1", &restarted), Ok(()));
        assert!(admission.admit("redis://a:1", &restarted).is_err());
    }

    #[test]
    fn replicas_cluster_nodes_and_volatile_fencing_nodes_are_refused() {
        let admission = Admission::new(true);
        let replica = facts(&INFO.replace("role:master", "role:slave"));
        assert_eq!(admission.admit("n", &replica), Err(Refusal::Replica));
        let cluster = facts(&INFO.replace("cluster_enabled:0", "cluster_enabled:1"));
        assert_eq!(admission.admit("n", &cluster), Err(Refusal::ClusterNode));
        assert_eq!(
            admission.admit("n", &facts(INFO)),
            Err(Refusal::Volatile { known: true })
        );
        let durable = facts(&INFO.replace("aof_enabled:0", "aof_enabled:1"));
        assert_eq!(admission.admit("n", &durable), Ok(()));
        // Without fencing, persistence is not asked for.
        assert_eq!(Admission::new(false).admit("n", &facts(INFO)), Ok(()));
    }

    #[test]
    fn two_members_on_one_cluster_are_refused() {
        let admission = Admission::default();
        let ids = |names: &[&str]| -> Vec<ServerId> {
            names
                .iter()
                .map(|id| ServerId::ClusterNode((*id).to_owned()))
                .collect()
        };
        assert_eq!(
            admission.admit_cluster("redis+cluster://a:1", ids(&["x", "y"]), None),
            Ok(())
        );
        assert_eq!(
            admission.admit_cluster("redis+cluster://b:1", ids(&["z"]), None),
            Ok(())
        );
        // Another seed of the first cluster: one node in common is enough.
        let refusal = admission
            .admit_cluster("redis+cluster://a:2", ids(&["y", "w"]), None)
            .unwrap_err();
        assert!(
            matches!(refusal, Refusal::SameServer { ref other, .. } if other == "redis+cluster://a:1")
        );
        assert_eq!(
            Admission::new(true).admit_cluster("c", ids(&["q"]), Some(false)),
            Err(Refusal::Volatile { known: true })
        );
    }

    #[test]
    fn client_info_gives_the_local_address() {
        let line = "id=7 addr=127.0.0.1:50000 laddr=127.0.0.1:7001 fd=8 name= db=0";
        assert_eq!(local_address(line).as_deref(), Some("127.0.0.1:7001"));
        assert_eq!(local_address("id=7 addr=x"), None);
    }
}
