//! [`RedisNode`]: a [`LockNode`] on a real Redis server, over one multiplexed connection.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisWrite, Script, ServerErrorKind, Value,
};
use tokio::time::Instant;

use super::identity::{Admission, Rejection};
use super::link::{Link, LinkSettings};
use super::releases::{ReleaseListener, RELEASE_CHANNEL_PREFIX};
use super::scripts::{self, DEADLINES_PREFIX, QUEUE_PREFIX, WATCHED_PREFIX};
use super::unawaited::{Awaited, Bounds, Keep, Request, Unawaited};
use super::{redact_url, LockNode, QueuePlace, ReleaseWatch};
use crate::config::LockConfig;
use crate::error::{LockError, NodeError};
use crate::fencing::RAISE_COUNTER_SCRIPT;
use crate::metrics::Counters;
use crate::token::LockToken;

/// A Redis server used as a lock node.
///
/// It keeps one long-lived multiplexed connection, so concurrent lock operations share it
/// without a mutex and without a new TCP connection per call. The connection is checked
/// when made (the server must be a standalone master, and no other node of the same lock
/// may reach the same server; see [`Redlock::connect`](crate::Redlock::connect)), re-made
/// in the background when it breaks or goes silent, and requests made while it is being
/// made reach the server in the order they were made. A node that is down counts as
/// failed on each operation until it comes back, which is what lets a quorum lock start
/// while a minority of its nodes is down.
///
/// Scripts run by `EVALSHA`, falling back to loading the script when the server answers
/// `NOSCRIPT` (after a restart or `SCRIPT FLUSH`). An unlock, an extension, a queue exit
/// and a counter raise are each driven to their end (a script reload and one reconnect
/// included) once started, whether or not anybody still awaits them.
///
/// Releases are announced by `PUBLISH`, only when somebody waits: on
/// `quorumlock:waiter:<client>` when the key was handed to a queued waiter of that client,
/// else on `quorumlock:released:<key>` while a racing waiter marked the key as watched.
/// Waiters subscribe over a second, pub/sub connection opened on the first wait; see
/// [`announce_releases`](Self::announce_releases).
///
/// URLs follow the redis crate: `redis://[[user]:password@]host[:port][/db]`, `rediss://`
/// for TLS (with the default `tls` feature), and `redis+unix:///path`.
#[derive(Clone)]
pub struct RedisNode {
    name: String,
    link: Arc<Link>,
    scripts: Arc<NodeScripts>,
    /// Whether the last request that ended had an answer from the node (see
    /// [`LockNode::sends_when_polled`]).
    answering: Arc<AtomicBool>,
    /// Takes requests sent and no longer awaited, so that they still go out.
    unawaited: Unawaited,
    releases: Arc<ReleaseListener>,
    announce_releases: bool,
    /// What a request that timed out on the link reports.
    request_timeout: Duration,
}

/// The timeouts a node runs with, from the lock's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeTimeouts {
    /// Bounds each attempt to (re)connect, the server check included.
    pub(crate) connect: Duration,
    /// How long one request may take (the lock's per-node timeout).
    pub(crate) request: Duration,
}

impl NodeTimeouts {
    /// How long a connection may leave requests unanswered, with no reply at all, before it
    /// is given up as silent: four request timeouts (a node that misses that many rounds in
    /// a row is not merely slow), and never under 100 ms (scheduling noise).
    fn silence_limit(self) -> Duration {
        self.request
            .saturating_mul(4)
            .max(Duration::from_millis(100))
    }

    /// How long a request nobody awaits is driven: room for one reconnect and a script
    /// reload after it.
    fn kept_for(self) -> Duration {
        self.connect.saturating_add(self.request.saturating_mul(2))
    }
}

/// How many requests nobody awaits one node may have in hand; see [`Bounds`].
const MOST_UNAWAITED: usize = 1024;

impl RedisNode {
    /// Prepares a node for `url`, without waiting for a connection.
    ///
    /// `timeout` bounds each attempt to (re)connect, and is taken as the time one request
    /// may take. Fails only when the URL is malformed. Must be called inside a tokio
    /// runtime, which the connection's background tasks run on.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, LockError> {
        let client = redis::Client::open(url).map_err(|err| LockError::InvalidNode {
            node: redact_url(url),
            reason: err.to_string(),
        })?;
        Ok(Self::from_client(client, timeout))
    }

    /// Prepares a node on a client made by the caller (its TLS settings, username,
    /// protocol, resolver), without waiting for a connection; see
    /// [`connect`](Self::connect). The node is named after the client's address, without
    /// credentials ([`client_name`]).
    pub fn from_client(client: redis::Client, timeout: Duration) -> Self {
        let timeouts = NodeTimeouts {
            connect: timeout,
            request: timeout,
        };
        let name = client_name(client.get_connection_info());
        Self::open(client, name, timeouts, Arc::default(), Arc::default())
    }

    /// A node on `client`, called `name` (which must hold no credentials), among the nodes
    /// sharing `admission`, counting into `counters`.
    pub(crate) fn open(
        client: redis::Client,
        name: String,
        timeouts: NodeTimeouts,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Self {
        #[cfg(feature = "tls")]
        if matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ) {
            crate::tls::install_crypto_provider();
        }
        let releases = Arc::new(ReleaseListener::new(
            client.clone(),
            timeouts.connect,
            timeouts.request,
        ));
        let config = AsyncConnectionConfig::new()
            // The link bounds the connection and the server check together.
            .set_connection_timeout(None)
            // No timer per request: the coordinator bounds every call to a node by the
            // per-node timeout (one deadline per round), and abandons it then; the link
            // notices a connection that stopped answering.
            .set_response_timeout(None)
            // Room for bursts: a request polled while the connection's queue is full waits
            // to go out, and a late lock request left unawaited would then never go out.
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let settings = LinkSettings {
            connect_timeout: timeouts.connect,
            silence_limit: timeouts.silence_limit(),
        };
        let link = Link::new(
            name.clone(),
            client,
            config,
            settings,
            admission,
            Arc::clone(&counters),
        );
        let bounds = Bounds {
            kept_for: timeouts.kept_for(),
            most: MOST_UNAWAITED,
        };
        RedisNode {
            name,
            link: Arc::new(link),
            scripts: Arc::new(NodeScripts::new()),
            answering: Arc::new(AtomicBool::new(false)),
            unawaited: Unawaited::start(timeouts.request, bounds, counters),
            releases,
            announce_releases: true,
            request_timeout: timeouts.request,
        }
    }

    /// Connects now and checks the server; `Err` says why the server was not taken into
    /// use (unreachable, or refused: see [`identity`](super::identity)).
    pub(crate) async fn check(&self) -> Result<(), Rejection> {
        self.link.connect().await
    }

    /// Whether releases are announced over pub/sub and waited for (on by default). Off,
    /// waiters retry after their jittered delay only, as with other Redlock clients.
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }

    /// Sends `command` and notes whether the node answered. Once sent, the command goes
    /// out even if this future is dropped (see [`Unawaited`]), while the node's patience
    /// lasts.
    async fn query<T: redis::FromRedisValue>(&self, command: Cmd) -> redis::RedisResult<T> {
        let link = Arc::clone(&self.link);
        let now = Instant::now();
        let request: Request = Box::pin(async move { link.send(&command, now).await });
        let result = self.await_request(request, now, Keep::WhilePatient).await;
        Ok(redis::from_redis_value(result?)?)
    }

    /// Awaits `request`, noting whether the node answered: any reply, even an error reply,
    /// shows the connection up; a failure to reach the node shows it down.
    async fn await_request(
        &self,
        request: Request,
        made: Instant,
        keep: Keep,
    ) -> redis::RedisResult<Value> {
        // An error reply comes as a value: made an error here, as `query_async` does.
        let result = Awaited::new(request, made, keep, &self.unawaited)
            .await
            .and_then(Value::extract_error);
        let answered = match &result {
            Ok(_) => true,
            Err(err) => !is_unreachable(err),
        };
        self.answering.store(answered, Ordering::Relaxed);
        result
    }

    /// Runs `call` and returns its integer reply, loading the script first when the node
    /// answers `NOSCRIPT` (after a restart or a `SCRIPT FLUSH`). For the lock scripts: a
    /// lock call dropped midway took nothing, and need not go on.
    async fn run_script(&self, call: &ScriptCall<'_>) -> Result<u64, NodeError> {
        let script = call.script;
        match self.query::<u64>(call.command()).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.cached.store(false, Ordering::Relaxed);
                self.query::<String>(script.load())
                    .await
                    .map_err(|err| self.node_error(err))?;
                let reply = self
                    .query(call.command())
                    .await
                    .map_err(|err| self.node_error(err));
                script.cached.store(reply.is_ok(), Ordering::Relaxed);
                reply
            }
            Err(err) => Err(self.node_error(err)),
            Ok(reply) => {
                script.cached.store(true, Ordering::Relaxed);
                Ok(reply)
            }
        }
    }

    /// Runs a script that is safe to repeat (compare-and-delete, compare-and-pexpire, leave
    /// a queue, raise a counter) to its end once started, whether or not this future is
    /// still awaited: with a script reload when the node answers `NOSCRIPT`, and once more
    /// when the connection broke (the first command after a reset fails while the
    /// connection is re-made). An unlock that never arrives would leave our key on that
    /// node for a whole TTL.
    async fn run_repeatable_script(&self, call: &ScriptCall<'_>) -> Result<u64, NodeError> {
        let command = call.command();
        let script = Arc::clone(call.script);
        let link = Arc::clone(&self.link);
        let made = Instant::now();
        let request: Request = Box::pin(async move {
            let mut reloaded = false;
            let mut reconnected = false;
            let mut at = made;
            loop {
                let reply = Arc::clone(&link)
                    .send(&command, at)
                    .await
                    .and_then(Value::extract_error);
                match reply {
                    Err(err)
                        if !reloaded
                            && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                    {
                        reloaded = true;
                        at = Instant::now();
                        script.cached.store(false, Ordering::Relaxed);
                        Arc::clone(&link)
                            .send(&script.load(), Instant::now())
                            .await
                            .and_then(Value::extract_error)?;
                    }
                    Err(err) if !reconnected && is_unreachable(&err) => {
                        reconnected = true;
                        at = Instant::now();
                    }
                    Ok(reply) => {
                        script.cached.store(true, Ordering::Relaxed);
                        return Ok(reply);
                    }
                    Err(err) => return Err(err),
                }
            }
        });
        let reply = self
            .await_request(request, made, Keep::Always)
            .await
            .map_err(|err| self.node_error(err))?;
        redis::from_redis_value(reply).map_err(|err| self.node_error(err.into()))
    }

    /// The channel prefix the scripts announce releases on; empty when they must not.
    fn channel_prefix(&self) -> &'static str {
        if self.announce_releases {
            RELEASE_CHANNEL_PREFIX
        } else {
            ""
        }
    }

    /// The values of `keys` (`GET` for one, `MGET` for several).
    async fn values(&self, keys: &[Arc<str>]) -> Result<Vec<Option<String>>, NodeError> {
        let mut command = redis::cmd(if keys.len() == 1 { "GET" } else { "MGET" });
        for key in keys {
            command.arg(&**key);
        }
        if keys.len() == 1 {
            let value: Option<String> = self
                .query(command)
                .await
                .map_err(|err| self.node_error(err))?;
            Ok(vec![value])
        } else {
            self.query(command)
                .await
                .map_err(|err| self.node_error(err))
        }
    }
}

/// The clients for `urls`, each with its name (the URL without credentials): with `tls`
/// for `rediss://` URLs when given. A malformed URL is an
/// [`InvalidNode`](LockError::InvalidNode) error.
pub(crate) fn clients_for_urls<S: AsRef<str>>(
    urls: impl IntoIterator<Item = S>,
    #[cfg(feature = "tls")] tls: Option<&crate::tls::TlsOptions>,
) -> Result<Vec<(String, redis::Client)>, LockError> {
    urls.into_iter()
        .map(|url| {
            let url = url.as_ref();
            #[cfg(feature = "tls")]
            if let Some(tls) = tls {
                return tls.client(url).map(|client| (redact_url(url), client));
            }
            redis::Client::open(url)
                .map(|client| (redact_url(url), client))
                .map_err(|err| LockError::InvalidNode {
                    node: redact_url(url),
                    reason: err.to_string(),
                })
        })
        .collect()
}

/// The clients given by the caller, each named after its address ([`client_name`]).
pub(crate) fn named_clients(
    clients: impl IntoIterator<Item = redis::Client>,
) -> Vec<(String, redis::Client)> {
    clients
        .into_iter()
        .map(|client| (client_name(client.get_connection_info()), client))
        .collect()
}

/// A node's name for a client's address, as a URL without credentials:
/// `redis://host:port[/db]`, `rediss://host:port[/db]` (TLS) or `redis+unix:///path`.
pub fn client_name(info: &redis::ConnectionInfo) -> String {
    use redis::ConnectionAddr;
    let db = info.redis_settings().db();
    let db = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{}:{port}{db}", bracketed(host)),
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{}:{port}{db}", bracketed(host))
        }
        ConnectionAddr::Unix(path) => format!("redis+unix://{}{db}", path.display()),
        other => format!("{other}"),
    }
}

/// An IPv6 address in brackets, as URLs write it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Nodes on `clients` (each with its name), connected and checked at once: a server that
/// cannot serve the lock (see [`identity`](super::identity)), or that another client of the
/// list reaches too, is an [`InvalidNode`](LockError::InvalidNode) error. A node that
/// cannot be reached now is kept: it counts as failed until it comes back, and is checked
/// then.
pub(crate) async fn connect_checked(
    clients: Vec<(String, redis::Client)>,
    config: &LockConfig,
    counters: &Arc<Counters>,
) -> Result<Vec<RedisNode>, LockError> {
    let timeouts = NodeTimeouts {
        connect: config.connect_timeout(),
        request: config.node_timeout(),
    };
    let admission = Arc::new(Admission::new(
        config.fencing() && !config.fencing_on_volatile_nodes(),
    ));
    let nodes: Vec<RedisNode> = clients
        .into_iter()
        .map(|(name, client)| {
            RedisNode::open(
                client,
                name,
                timeouts,
                Arc::clone(&admission),
                Arc::clone(counters),
            )
            .announce_releases(config.notify_releases())
        })
        .collect();
    let checks = futures::future::join_all(nodes.iter().map(RedisNode::check)).await;
    for (node, check) in nodes.iter().zip(checks) {
        match check {
            Ok(()) => {}
            Err(Rejection::Refused(refusal)) => {
                return Err(LockError::InvalidNode {
                    node: node.name.clone(),
                    reason: refusal.to_string(),
                })
            }
            Err(Rejection::Failed(reason)) => {
                tracing::warn!(node = %node.name, %reason, "node unreachable; it counts as failed until it answers");
            }
        }
    }
    Ok(nodes)
}

impl fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisNode")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LockNode for RedisNode {
    fn name(&self) -> &str {
        &self.name
    }

    /// While the node answers: each request is one command (a script goes whole until the
    /// node has it), queued on the open connection when first polled.
    fn sends_when_polled(&self) -> bool {
        self.answering.load(Ordering::Relaxed) && self.link.is_open()
    }

    fn try_lock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let ttl = millis(ttl);
            let [key] = keys else {
                let args = [token.as_str(), &ttl.to_string()];
                let call = ScriptCall::new(&self.scripts.lock, keys, &args);
                let taken = self.run_script(&call).await?;
                return Ok(taken == 1);
            };
            // The common case: one plain command, no script.
            let mut set = Cmd::with_capacity(6, key.len() + token.as_str().len() + 32);
            set.arg("SET")
                .arg(&**key)
                .arg(token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(ttl);
            let reply: Value = self.query(set).await.map_err(|err| self.node_error(err))?;
            match reply {
                Value::Okay => Ok(true),
                Value::Nil => Ok(false),
                other => Err(NodeError::Redis(format!(
                    "unexpected reply to SET NX: {other:?}"
                ))),
            }
        }
        .boxed()
    }

    fn unlock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            if keys.is_empty() {
                return Err(no_keys());
            }
            let args = [token.as_str(), self.channel_prefix()];
            let call = ScriptCall::new(&self.scripts.unlock, keys, &args)
                .with_queues_of(keys)
                .with_markers_of(keys);
            let all = self.run_repeatable_script(&call).await?;
            Ok(all == 1)
        }
        .boxed()
    }

    fn extend<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let ttl = millis(ttl).to_string();
            let args = [token.as_str(), &ttl];
            let call = ScriptCall::new(&self.scripts.extend, keys, &args);
            let extended = self.run_repeatable_script(&call).await?;
            Ok(extended == 1)
        }
        .boxed()
    }

    fn holds<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let values = self.values(keys).await?;
            Ok(values
                .iter()
                .all(|value| value.as_deref() == Some(token.as_str())))
        }
        .boxed()
    }

    fn read_counter<'a>(&'a self, keys: &'a [Arc<str>]) -> BoxFuture<'a, Result<u64, NodeError>> {
        async move {
            let mut highest = 0;
            for value in self.values(keys).await?.into_iter().flatten() {
                let counter = value.parse::<u64>().map_err(|_| {
                    NodeError::Redis(format!("a fencing counter holds {value:?}, not a number"))
                })?;
                highest = highest.max(counter);
            }
            Ok(highest)
        }
        .boxed()
    }

    fn raise_counter<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        value: u64,
    ) -> BoxFuture<'a, Result<u64, NodeError>> {
        async move {
            let value = value.to_string();
            let args = [value.as_str()];
            let call = ScriptCall::new(&self.scripts.raise_counter, keys, &args);
            self.run_repeatable_script(&call).await
        }
        .boxed()
    }

    fn try_lock_queued<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        place: &'a QueuePlace,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        async move {
            let ttl = millis(ttl).to_string();
            let ticket = place.ticket.to_string();
            let lifetime = millis(place.lifetime).max(1).to_string();
            let args = [
                token.as_str(),
                &ttl,
                place.waiter.as_str(),
                &ticket,
                &lifetime,
                self.channel_prefix(),
            ];
            // A waiter for several keys may move between their queues and pass on a key
            // reserved for it, so it needs every key's queue and marker, and the channel
            // prefix to announce what it passes on.
            let call = match keys {
                [] => return Err(no_keys()),
                [_] => ScriptCall::new(&self.scripts.lock_queued, keys, &args[..5])
                    .with_queues_of(keys),
                _ => ScriptCall::new(&self.scripts.lock_queued_many, keys, &args)
                    .with_queues_of(keys)
                    .with_markers_of(keys),
            };
            let taken = self.run_script(&call).await?;
            Ok(taken == 1)
        }
        .boxed()
    }

    fn try_lock_watching<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
        interest: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        if !self.announce_releases {
            return self.try_lock(keys, token, ttl);
        }
        async move {
            let first = &keys[..1.min(keys.len())];
            let args = [
                token.as_str(),
                &millis(ttl).to_string(),
                &millis(interest).max(1).to_string(),
            ];
            let call =
                ScriptCall::new(&self.scripts.lock_watching, keys, &args).with_markers_of(first);
            let taken = self.run_script(&call).await?;
            Ok(taken == 1)
        }
        .boxed()
    }

    fn leave_queue<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        waiter: &'a LockToken,
    ) -> BoxFuture<'a, Result<(), NodeError>> {
        async move {
            if keys.is_empty() {
                return Err(no_keys());
            }
            // A waiter for several keys may be queued under any of them.
            let args = [waiter.as_str(), self.channel_prefix()];
            let call = ScriptCall::new(&self.scripts.leave_queue, keys, &args)
                .with_queues_of(keys)
                .with_markers_of(keys);
            self.run_repeatable_script(&call).await.map(drop)
        }
        .boxed()
    }

    fn watch_reservations<'a>(&'a self, client: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        async move {
            if self.announce_releases {
                Some(self.releases.watch_waiters(client).await)
            } else {
                None
            }
        }
        .boxed()
    }

    fn watch_releases<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<ReleaseWatch>> {
        async move {
            if self.announce_releases {
                Some(self.releases.watch_key(key).await)
            } else {
                None
            }
        }
        .boxed()
    }
}

/// The error for a script call without keys, which a lock never makes.
fn no_keys() -> NodeError {
    NodeError::Redis("a lock needs at least one key".to_owned())
}

/// The node's scripts, each with whether the node is known to have it cached.
struct NodeScripts {
    lock: Arc<NodeScript>,
    lock_watching: Arc<NodeScript>,
    lock_queued: Arc<NodeScript>,
    lock_queued_many: Arc<NodeScript>,
    unlock: Arc<NodeScript>,
    leave_queue: Arc<NodeScript>,
    extend: Arc<NodeScript>,
    raise_counter: Arc<NodeScript>,
}

impl NodeScripts {
    fn new() -> Self {
        let script = |code| Arc::new(NodeScript::new(code));
        NodeScripts {
            lock: script(scripts::LOCK),
            lock_watching: script(scripts::LOCK_WATCHING),
            lock_queued: script(scripts::LOCK_QUEUED),
            lock_queued_many: script(scripts::LOCK_QUEUED_MANY),
            unlock: script(scripts::UNLOCK),
            leave_queue: script(scripts::LEAVE_QUEUE),
            extend: script(scripts::EXTEND),
            raise_counter: script(RAISE_COUNTER_SCRIPT),
        }
    }
}

/// A script, sent by its hash (`EVALSHA`) once the node ran it, and whole (`EVAL`, which
/// caches it on the node) until then.
///
/// Either way a call is one command: a request that nobody awaits any more (a lock request
/// still in flight when a quorum already granted the lock) runs to its end once sent,
/// instead of stopping at a `NOSCRIPT` answer that nobody is there to act on.
struct NodeScript {
    script: Script,
    code: &'static str,
    /// Whether the node answered a call of this script (and so has it cached).
    cached: AtomicBool,
}

impl NodeScript {
    fn new(code: &'static str) -> Self {
        NodeScript {
            script: Script::new(code),
            code,
            cached: AtomicBool::new(false),
        }
    }

    /// `SCRIPT LOAD` of the script, for a node that lost it.
    fn load(&self) -> Cmd {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(self.code);
        load
    }
}

/// One call of a node script: the script, the lock keys, the extra keys the script takes
/// for them, and the arguments.
struct ScriptCall<'a> {
    script: &'a Arc<NodeScript>,
    keys: &'a [Arc<str>],
    /// The lock keys whose queue keys (waiters and deadlines of each) follow `keys`.
    queues_of: &'a [Arc<str>],
    /// The lock keys whose watch markers follow the queue keys.
    markers_of: &'a [Arc<str>],
    args: &'a [&'a str],
}

impl<'a> ScriptCall<'a> {
    fn new(script: &'a Arc<NodeScript>, keys: &'a [Arc<str>], args: &'a [&'a str]) -> Self {
        ScriptCall {
            script,
            keys,
            queues_of: &[],
            markers_of: &[],
            args,
        }
    }

    fn with_queues_of(mut self, keys: &'a [Arc<str>]) -> Self {
        self.queues_of = keys;
        self
    }

    fn with_markers_of(mut self, keys: &'a [Arc<str>]) -> Self {
        self.markers_of = keys;
        self
    }

    /// The call as one pre-sized command: `EVALSHA` and the hash (or, until the node is
    /// known to have the script, `EVAL` and its code), the key count, the lock keys, the
    /// queue keys, the watch markers, then the arguments. It saves the script invocation's
    /// intermediate vectors and strings on every call.
    fn command(&self) -> Cmd {
        let ScriptCall {
            script,
            keys,
            queues_of,
            markers_of,
            args,
        } = *self;
        let key_count = keys.len() + 2 * queues_of.len() + markers_of.len();
        let key_bytes = |keys: &[Arc<str>]| keys.iter().map(|key| key.len()).sum::<usize>();
        let cached = script.cached.load(Ordering::Relaxed);
        let bytes = 64
            + if cached { 0 } else { script.code.len() }
            + key_bytes(keys)
            + 2 * key_bytes(queues_of)
            + queues_of.len() * (QUEUE_PREFIX.len() + DEADLINES_PREFIX.len())
            + key_bytes(markers_of)
            + markers_of.len() * WATCHED_PREFIX.len()
            + args.iter().map(|arg| arg.len()).sum::<usize>();
        let mut call = Cmd::with_capacity(3 + key_count + args.len(), bytes);
        if cached {
            call.arg("EVALSHA").arg(script.script.get_hash());
        } else {
            call.arg("EVAL").arg(script.code);
        }
        call.arg(key_count);
        for key in keys {
            call.arg(&**key);
        }
        for key in queues_of {
            write_prefixed_arg(&mut call, QUEUE_PREFIX, key);
            write_prefixed_arg(&mut call, DEADLINES_PREFIX, key);
        }
        for key in markers_of {
            write_prefixed_arg(&mut call, WATCHED_PREFIX, key);
        }
        for arg in args {
            call.arg(*arg);
        }
        call
    }
}

/// Appends the argument `prefix` + `key` to `call`, byte by byte: the formatting machinery
/// of `write_arg_fmt` cost about as much as the rest of the command.
fn write_prefixed_arg(call: &mut Cmd, prefix: &str, key: &str) {
    use std::io::Write;
    let mut arg = call.writer_for_next_arg();
    // Writing to the command's own buffer cannot fail.
    let _ = arg.write_all(prefix.as_bytes());
    let _ = arg.write_all(key.as_bytes());
}

/// The TTL in whole milliseconds, as Redis `PX` takes it. Configuration validation keeps
/// TTLs whole and far below `u64::MAX` milliseconds, so nothing is lost here.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// How many commands may wait to go out on one node's connection.
const PIPELINE_BUFFER: usize = 4096;

/// Whether `err` means the node could not be reached (rather than that it answered).
fn is_unreachable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
}

impl RedisNode {
    /// Separates "did not answer in time" and "could not talk to the node" from "the node
    /// said no".
    fn node_error(&self, err: RedisError) -> NodeError {
        if err.is_timeout() {
            NodeError::Timeout(self.request_timeout)
        } else if is_unreachable(&err) {
            NodeError::Connection(err.to_string())
        } else {
            NodeError::Redis(err.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(call: &Cmd) -> Vec<String> {
        call.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_script_call_lists_the_keys_then_the_queue_and_markers_then_the_args() {
        let script = Arc::new(NodeScript::new(scripts::UNLOCK));
        script.cached.store(true, Ordering::Relaxed);
        let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
        let call = ScriptCall::new(&script, &keys, &["token", "channel:"])
            .with_queues_of(&keys)
            .with_markers_of(&keys)
            .command();
        let expected = [
            "EVALSHA",
            script.script.get_hash(),
            "8",
            "a",
            "b",
            "quorumlock:waiters:a",
            "quorumlock:waiter-deadlines:a",
            "quorumlock:waiters:b",
            "quorumlock:waiter-deadlines:b",
            "quorumlock:watched:a",
            "quorumlock:watched:b",
            "token",
            "channel:",
        ];
        assert_eq!(args(&call), expected);
    }

    #[test]
    fn a_plain_script_call_has_only_the_lock_keys() {
        let script = Arc::new(NodeScript::new(scripts::EXTEND));
        script.cached.store(true, Ordering::Relaxed);
        let keys: Vec<Arc<str>> = vec!["only".into()];
        let call = ScriptCall::new(&script, &keys, &["token", "30000"]).command();
        let expected = [
            "EVALSHA",
            script.script.get_hash(),
            "1",
            "only",
            "token",
            "30000",
        ];
        assert_eq!(args(&call), expected);
    }

    #[test]
    fn a_script_the_node_may_not_have_is_sent_whole() {
        let script = Arc::new(NodeScript::new(scripts::EXTEND));
        let keys: Vec<Arc<str>> = vec!["only".into()];
        let call = ScriptCall::new(&script, &keys, &["token", "30000"]).command();
        let expected = ["EVAL", scripts::EXTEND, "1", "only", "token", "30000"];
        assert_eq!(args(&call), expected);
    }
}
