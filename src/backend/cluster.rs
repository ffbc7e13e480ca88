//! [`ClusterLink`]: a Redis Cluster as one lock node, over redis-rs's async cluster client.
//!
//! The cluster client does the cluster's work: it learns the slot map from the seeds,
//! routes each command to the master of its key's slot (a script by its first key, which
//! is why every key of one lock shares a hash tag: see [`crate::resource`]), follows
//! `MOVED` and `ASK` redirects, refreshes the topology after a failover or a resharding,
//! and reconnects to the nodes it lost. This link adds what a lock needs on top: a first
//! connection made and checked before the node counts (what the cluster is, and that no
//! other member of the lock reaches one of its nodes), re-made with a backoff while the
//! cluster cannot be reached at all, and a failing request instead of a wait while it is.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::time::Instant;

use super::identity::{Admission, Rejection, ServerFacts, ServerId};

/// The longest wait between two attempts to reach an unreachable cluster.
const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// The first wait after a failed attempt; it doubles with each failure in a row.
const MIN_BACKOFF: Duration = Duration::from_millis(20);

enum State {
    Down {
        retry_at: Instant,
        why: Rejection,
        failures: u32,
    },
    Up(ClusterConnection),
}

/// The connection to one Redis Cluster.
pub(crate) struct ClusterLink {
    name: String,
    client: ClusterClient,
    connect_timeout: Duration,
    admission: Arc<Admission>,
    state: Mutex<State>,
    /// One attempt to connect at a time; requests during it wait for its outcome.
    connecting: tokio::sync::Mutex<()>,
}

impl ClusterLink {
    /// A link to the cluster `client` reaches, not connected yet.
    pub(crate) fn new(
        name: String,
        client: ClusterClient,
        connect_timeout: Duration,
        admission: Arc<Admission>,
    ) -> Self {
        ClusterLink {
            name,
            client,
            connect_timeout,
            admission,
            state: Mutex::new(State::Down {
                retry_at: Instant::now(),
                why: Rejection::Failed(not_connected("not connected yet")),
                failures: 0,
            }),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Connects now unless connected, and says why the cluster was not taken into use.
    /// Why the cluster counts as failed without being asked (refused, or abstaining), while
    /// it does.
    pub(crate) fn exclusion(&self) -> Option<String> {
        match &*self.lock_state() {
            State::Down { why, .. } => why.exclusion(),
            _ => None,
        }
    }

    pub(crate) async fn connect(&self) -> Result<(), Rejection> {
        self.connection(true).await.map(drop)
    }

    /// Sends `command` to the master of its key's slot (a script: of its first key).
    pub(crate) async fn send(&self, command: &Cmd) -> RedisResult<Value> {
        let mut connection = self.connection(false).await.map_err(|why| why.error())?;
        // The cluster client's own routing: by the first key, for a script too.
        let reply = redis::aio::ConnectionLike::req_packed_command(&mut connection, command).await;
        self.note_ended(&reply);
        reply
    }

    /// Sends `command` to the master that serves `key`'s slot now: for `WAIT`, which the
    /// cluster client would otherwise send to every master.
    pub(crate) async fn send_to_master_of(&self, key: &str, command: &Cmd) -> RedisResult<Value> {
        let mut connection = self.connection(false).await.map_err(|why| why.error())?;
        let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
        let reply = connection
            .route_command(command.clone(), RoutingInfo::SingleNode(route))
            .await;
        self.note_ended(&reply);
        reply
    }

    /// Gives the connection up when its background task is gone (it answers every request
    /// with a broken pipe then); lost nodes and moved slots are the cluster client's to mend.
    fn note_ended(&self, reply: &RedisResult<Value>) {
        if let Err(err) = reply {
            if err.is_io_error() && err.to_string().contains("redis_cluster: Unable to") {
                *self.lock_state() = State::Down {
                    retry_at: Instant::now(),
                    why: Rejection::Failed(err.clone()),
                    failures: 0,
                };
            }
        }
    }

    /// The open connection, or a new one: made now when `force` or when the backoff after
    /// the last failure is over, else the last failure.
    async fn connection(&self, force: bool) -> Result<ClusterConnection, Rejection> {
        if let Some(connection) = self.open(force)? {
            return Ok(connection);
        }
        let _turn = self.connecting.lock().await;
        // Somebody else may have connected (or failed) while this one waited its turn.
        if let State::Up(connection) = &*self.lock_state() {
            return Ok(connection.clone());
        }
        let outcome = self.establish().await;
        let mut state = self.lock_state();
        match outcome {
            Ok(connection) => {
                *state = State::Up(connection.clone());
                Ok(connection)
            }
            Err(why) => {
                let failures = match &*state {
                    State::Down { failures, .. } => failures.saturating_add(1),
                    State::Up(_) => 1,
                };
                let mut retry_at = Instant::now() + backoff(failures);
                match &why {
                    Rejection::Refused(refusal) => {
                        tracing::error!(node = %self.name, %refusal, "cluster refused; it counts as failed");
                    }
                    Rejection::Abstaining(abstention) => {
                        tracing::warn!(node = %self.name, %abstention, "a cluster master abstains after a restart; the member counts as failed until then");
                        retry_at = Instant::now() + abstention.remaining;
                    }
                    Rejection::Failed(_) => {}
                }
                *state = State::Down {
                    retry_at,
                    why: why.clone(),
                    failures,
                };
                Err(why)
            }
        }
    }

    /// `Some` open connection; `None` when a new one should be made now; `Err` while the
    /// backoff after a failure lasts.
    fn open(&self, force: bool) -> Result<Option<ClusterConnection>, Rejection> {
        match &*self.lock_state() {
            State::Up(connection) => Ok(Some(connection.clone())),
            State::Down { retry_at, why, .. } if !force && Instant::now() < *retry_at => {
                Err(why.clone())
            }
            State::Down { .. } => Ok(None),
        }
    }

    /// Connects to the cluster and checks it, within the connect timeout.
    async fn establish(&self) -> Result<ClusterConnection, Rejection> {
        let attempt = async {
            let mut connection = self
                .client
                .get_async_connection()
                .await
                .map_err(super::identity::rejection)?;
            let (ids, masters) = inspect(&mut connection).await?;
            self.admission
                .admit_cluster(&self.name, ids, masters.append_only)
                .map_err(Rejection::Refused)?;
            // The youngest master decides: a restart of any one may have lost the keys of
            // its slots.
            if let Some(abstention) = self.admission.abstention(&masters) {
                return Err(Rejection::Abstaining(abstention));
            }
            Ok(connection)
        };
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Rejection::Failed(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no cluster connection within the connect timeout of {:?}",
                    self.connect_timeout
                ),
            )))),
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the cluster is: the ids of all its nodes (`CLUSTER NODES`), and what its masters
/// say of themselves taken together (`INFO` and `CONFIG GET appendfsync` on each): an
/// append-only file only if every master keeps one (`None` when denied), fsynced on every
/// write only if every master's is, and the uptime of the youngest.
async fn inspect(
    connection: &mut ClusterConnection,
) -> Result<(Vec<ServerId>, ServerFacts), Rejection> {
    let mut nodes = redis::cmd("CLUSTER");
    nodes.arg("NODES");
    let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
    let reply = connection
        .route_command(nodes, random)
        .await
        .map_err(Rejection::Failed)?;
    let text: String = redis::from_redis_value(reply).map_err(|err| {
        Rejection::Failed(RedisError::from(std::io::Error::other(err.to_string())))
    })?;
    let ids = node_ids(&text);
    let masters = || {
        RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::Special),
        ))
    };
    let mut facts = ServerFacts::default();
    match connection
        .route_command(redis::cmd("INFO"), masters())
        .await
    {
        Ok(replies) => {
            let each: Vec<ServerFacts> = replies_of(&replies)
                .iter()
                .map(|info| ServerFacts::from_info(info.as_deref().unwrap_or("")))
                .collect();
            if !each.is_empty() {
                facts.append_only = Some(each.iter().all(|m| m.append_only == Some(true)));
                facts.uptime = each.iter().map(|m| m.uptime).min().flatten();
            }
        }
        Err(err) if err.code() == Some("NOPERM") => {}
        Err(err) => return Err(Rejection::Failed(err)),
    }
    if facts.append_only == Some(true) {
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("appendfsync");
        // Denied or renamed: not known to fsync every write.
        if let Ok(replies) = connection.route_command(get, masters()).await {
            let policies = fsync_policies(&replies);
            facts.fsync_always =
                Some(!policies.is_empty() && policies.iter().all(|p| p == "always"));
        }
    }
    Ok((ids, facts))
}

/// The `appendfsync` value of each master's `CONFIG GET appendfsync` reply.
fn fsync_policies(replies: &Value) -> Vec<String> {
    let each: Vec<&Value> = match replies {
        Value::Map(pairs) => pairs.iter().map(|(_, reply)| reply).collect(),
        other => vec![other],
    };
    each.into_iter()
        .filter_map(super::identity::appendfsync_of)
        .collect()
}

/// The node ids of a `CLUSTER NODES` reply: the first field of each line.
fn node_ids(cluster_nodes: &str) -> Vec<ServerId> {
    cluster_nodes
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(|id| ServerId::ClusterNode(id.to_owned()))
        .collect()
}

/// The text of each `INFO` reply in `replies` (one per master, keyed by address).
fn replies_of(replies: &Value) -> Vec<Option<String>> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    match replies {
        Value::Map(pairs) => pairs.iter().map(|(_, reply)| text(reply)).collect(),
        Value::Array(replies) => replies.iter().map(text).collect(),
        other => vec![text(other)],
    }
}

/// The wait before the next attempt after `failures` failed ones in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

fn not_connected(reason: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        reason.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_the_first_field_of_each_line() {
        let nodes = "07c3 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460\n\
                     67ed 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922\n";
        assert_eq!(
            node_ids(nodes),
            [
                ServerId::ClusterNode("07c3".into()),
                ServerId::ClusterNode("67ed".into())
            ]
        );
    }

    #[test]
    fn every_masters_reply_is_read() {
        let info = |aof: &str| Value::BulkString(format!("aof_enabled:{aof}\r\n").into_bytes());
        let replies = |values: Vec<Value>| {
            Value::Map(
                values
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (Value::SimpleString(i.to_string()), v))
                    .collect(),
            )
        };
        let texts = replies_of(&replies(vec![info("1"), info("0")]));
        assert_eq!(texts.len(), 2);
        assert_eq!(
            ServerFacts::from_info(texts[1].as_deref().unwrap()).append_only,
            Some(false)
        );
        let policy = |p: &str| {
            Value::Array(vec![
                Value::BulkString(b"appendfsync".to_vec()),
                Value::BulkString(p.as_bytes().to_vec()),
            ])
        };
        assert_eq!(
            fsync_policies(&replies(vec![policy("always"), policy("everysec")])),
            ["always", "everysec"]
        );
    }
}
