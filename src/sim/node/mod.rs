//! [`SimNode`]: an in-memory lock node with a clock of its own and injectable faults.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::clock::NodeClock;
use super::log::{OpRecord, Stored};
use super::pubsub::PubSub;
use super::server::{Data, Published, ScriptHost};
use crate::error::NodeError;
use crate::node::{LockNode, NodeHints, NodeReply, NodeRequest};
use crate::protocol::{NodeScript, NodeScripts};
use crate::token::LockToken;

/// An in-memory lock node for tests: a key store whose TTLs run on the node's own clock,
/// with faults that can be switched on and off at any moment.
///
/// It implements [`LockNode`] by running what a [`RedisNode`](crate::backend::RedisNode)
/// sends: each request becomes the same command or Lua script call, with the same KEYS and
/// ARGV (one mapping builds both), run by a [`ScriptHost`] (the scripts themselves, in an
/// embedded Lua 5.1, over an in-memory keyspace) on the node's clock. So the lock, the fair
/// queue and its reservations, the fencing counters, and the `EVALSHA` / `NOSCRIPT` /
/// `SCRIPT LOAD` exchange behave as on Redis, and
/// [`Redlock::from_nodes`](crate::Redlock::from_nodes) runs on it unchanged, on one node
/// or several. Release announcements are delivered once
/// [`announce_releases`](Self::announce_releases) turns them on (after the node's reply
/// delay, as a pub/sub connection delivers them); off, waiters learn what a release did
/// from their next attempt, on their retry delay.
///
/// # Time
///
/// The node's clock is derived from tokio's clock, so under a paused runtime
/// (`#[tokio::test(start_paused = true)]`) it is virtual and deterministic. It starts at
/// zero when the node is created and runs at [`clock_rate`](Self::clock_rate) times the
/// speed of tokio's clock ([`set_clock_rate`](Self::set_clock_rate)); it can
/// [jump](Self::jump_clock). A key set with a TTL expires when the *node's* clock has
/// advanced by the TTL, as Redis expires keys by its own clock. Create nodes inside the
/// runtime that uses them.
///
/// # Faults
///
/// | call | what the clients see |
/// |---|---|
/// | [`crash`](Self::crash) | every request fails at once with [`NodeError::Connection`]; replies still on their way are lost as a connection reset |
/// | [`restart`](Self::restart) | back up, with its keys (persistence) or empty (none), and without its cached scripts either way (the next script call is answered `NOSCRIPT`) |
/// | [`flush`](Self::flush), [`evict`](Self::evict) | keys lost without a restart (`FLUSHALL`, eviction) |
/// | [`flush_scripts`](Self::flush_scripts) | the script cache lost without a restart (`SCRIPT FLUSH`) |
/// | [`set_request_delay`](Self::set_request_delay) | requests reach the node later (in order: each connection is FIFO) |
/// | [`set_connect_delay`](Self::set_connect_delay) | a connection takes this long to be made, on first use and after each crash; requests made meanwhile wait for it, in order |
/// | [`set_reply_delay`](Self::set_reply_delay) | replies come back later |
/// | [`lose_replies`](Self::lose_replies) | requests vanish: not applied, never answered (a blackholed or frozen node) |
/// | [`apply_but_lose_reply`](Self::apply_but_lose_reply) | requests are applied, but their replies never come |
///
/// A lost reply never resolves: the lock's per-node timeout ends the wait, as with a real
/// node. A request in flight is delivered even if the caller stopped waiting for it; an
/// unlock, extension, queue exit or counter raise is driven to its end (script reload and
/// one resend after a broken connection included) as a Redis node drives it.
///
/// # Inspection
///
/// [`get`](Self::get), [`ttl`](Self::ttl) and [`keys`](Self::keys) read the store;
/// [`log`](Self::log) returns every request the node was sent, with what it did and
/// the key's state before and after, for checking invariants.
///
/// `SimNode` is a cheap handle: clones share the same node and the same connection to it.
/// [`for_client`](Self::for_client) makes a handle with a connection of its own (its own
/// request order and script cache, as a separate client process has) whose requests are
/// logged under a client's name.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use quorumlock::sim::SimNode;
/// use quorumlock::LockToken;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let node = SimNode::new("node-a");
/// let lock_node = node.to_lock_node(); // the node as a lock sees it
/// let token = LockToken::generate();
/// let keys: [Arc<str>; 1] = ["k".into()];
/// assert_eq!(lock_node.try_lock(&keys, &token, Duration::from_secs(1)).await, Ok(true));
/// assert_eq!(node.get("k"), Some(token.clone()));
///
/// // The node's clock runs twice as fast: the key lives half a second of real time (and
/// // the millisecond Redis keeps it past its expiry time).
/// node.set_clock_rate(2.0);
/// tokio::time::sleep(Duration::from_millis(501)).await;
/// assert_eq!(node.get("k"), None);
/// let extended = lock_node.extend(&keys, &token, Duration::from_secs(1)).await;
/// assert_eq!(extended, Ok(false)); // never recreated
/// # });
/// ```
#[derive(Clone)]
pub struct SimNode {
    name: Arc<str>,
    pub(super) client: Option<Arc<str>>,
    state: Arc<Mutex<State>>,
    /// This handle's connection to the node.
    pub(super) connection: Arc<Connection>,
}

/// What the node holds and how it misbehaves; behind a mutex that is never held across
/// an await.
#[derive(Debug)]
pub(super) struct State {
    pub(super) clock: NodeClock,
    /// The server: its keyspace and its script cache.
    pub(super) server: ScriptHost,
    pub(super) up: bool,
    /// Bumped on every crash and restart: replies of requests applied before are reset,
    /// and connections made before are broken.
    pub(super) generation: u64,
    pub(super) request_delay: Duration,
    pub(super) reply_delay: Duration,
    pub(super) connect_delay: Duration,
    pub(super) lose_replies: bool,
    pub(super) apply_but_lose_reply: bool,
    /// The clients send each script call once, without the `NOSCRIPT` reload.
    pub(super) broken_reloads: bool,
    /// How many commands of requests the node ran.
    pub(super) applied: u64,
    /// The watched channels and what the scripts published on them.
    pub(super) pubsub: PubSub,
    pub(super) log: Vec<OpRecord>,
}

/// One client's connection to the node: the order its requests arrive in, and the client's
/// knowledge of which scripts the node has.
pub(super) struct Connection {
    /// Which scripts the node answered, as a Redis node's connection keeps it.
    pub(super) scripts: NodeScripts,
    pub(super) order: Mutex<Order>,
}

/// When a connection's requests arrive.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// The node generation the connection was made (or is being made) in, and when it is
    /// up; none before the first request.
    pub(super) made: Option<(u64, Instant)>,
    /// When its last request arrives: requests are delivered in order.
    pub(super) last_arrival: Option<Instant>,
}

impl Connection {
    fn new() -> Arc<Self> {
        Arc::new(Connection {
            scripts: NodeScripts::new(),
            order: Mutex::new(Order::default()),
        })
    }
}

impl SimNode {
    /// A node named `name`, up and empty, its clock at zero running at the real rate.
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        SimNode {
            name: name.into(),
            client: None,
            state: Arc::new(Mutex::new(State {
                clock: NodeClock::new(Instant::now()),
                server: ScriptHost::new(),
                up: true,
                generation: 0,
                request_delay: Duration::ZERO,
                reply_delay: Duration::ZERO,
                connect_delay: Duration::ZERO,
                lose_replies: false,
                apply_but_lose_reply: false,
                broken_reloads: false,
                applied: 0,
                pubsub: PubSub::default(),
                log: Vec::new(),
            })),
            connection: Connection::new(),
        }
    }

    /// A handle to the same node whose requests are logged under `client`
    /// ([`OpRecord::client`]), to tell apart the requests of several lock clients. It has a
    /// connection of its own: its requests keep their order among themselves only, and it
    /// learns on its own which scripts the node has.
    pub fn for_client(&self, client: impl Into<String>) -> SimNode {
        let client: String = client.into();
        SimNode {
            name: Arc::clone(&self.name),
            client: Some(client.into()),
            state: Arc::clone(&self.state),
            connection: Connection::new(),
        }
    }

    /// The client this handle logs its requests under, if any.
    pub fn client(&self) -> Option<&str> {
        self.client.as_deref()
    }

    /// This handle as a [`LockNode`], ready for
    /// [`Redlock::from_nodes`](crate::Redlock::from_nodes).
    pub fn to_lock_node(&self) -> Arc<dyn LockNode> {
        Arc::new(self.clone())
    }

    // --- the clock ---

    /// The node's clock reading: zero when the node was created.
    pub fn now(&self) -> Duration {
        let state = self.lock();
        state.clock.read(Instant::now())
    }

    /// How fast the node's clock runs: node seconds per second of tokio's clock.
    pub fn clock_rate(&self) -> f64 {
        self.lock().clock.rate()
    }

    /// Makes the node's clock run at `rate` times the speed of tokio's clock from now on
    /// (`1.01` is 1 % fast, `0` stops it). The reading does not move.
    ///
    /// # Panics
    ///
    /// If `rate` is negative, infinite or NaN.
    pub fn set_clock_rate(&self, rate: f64) {
        assert!(
            rate.is_finite() && rate >= 0.0,
            "a clock rate must be finite and non-negative, got {rate}"
        );
        self.lock().clock.set_rate(Instant::now(), rate);
    }

    /// Moves the node's clock forward by `by` at once (an NTP step, an operator's
    /// mistake). Keys whose expiry the jump passes expire now.
    pub fn jump_clock(&self, by: Duration) {
        self.lock().clock.jump_forward(Instant::now(), by);
    }

    /// Moves the node's clock back by `by` at once (not below zero): keys live longer.
    pub fn jump_clock_back(&self, by: Duration) {
        self.lock().clock.jump_back(Instant::now(), by);
    }

    // --- faults ---

    /// Stops the node: every request fails at once with [`NodeError::Connection`], and
    /// replies still on their way are lost (the client sees a connection error). The
    /// keys stay in memory until [`restart`](Self::restart) decides their fate; the
    /// clock keeps running.
    pub fn crash(&self) {
        let mut state = self.lock();
        state.up = false;
        state.generation += 1;
    }

    /// Starts the node again. With `keep_data` it keeps its keys (with their expiry on
    /// its clock, as with `appendfsync always`); without, it comes back empty (no
    /// persistence). Either way its script cache is empty, as a restarted Redis's is.
    /// Replies of requests applied before the restart are lost, and every connection is
    /// made again.
    pub fn restart(&self, keep_data: bool) {
        let mut state = self.lock();
        if !keep_data {
            state.server.keyspace_mut().clear();
        }
        state.server.flush_scripts();
        state.up = true;
        state.generation += 1;
    }

    /// Whether the node is up.
    pub fn is_up(&self) -> bool {
        self.lock().up
    }

    /// Deletes every key, fencing counters included, without a restart (`FLUSHALL`).
    pub fn flush(&self) {
        self.lock().server.keyspace_mut().clear();
    }

    /// Forgets every cached script without a restart (`SCRIPT FLUSH`): the next call of
    /// each script is answered `NOSCRIPT`, and the client loads it again.
    pub fn flush_scripts(&self) {
        self.lock().server.flush_scripts();
    }

    /// Deletes `key` (a lock key, a queue, or a fencing counter) as an eviction would;
    /// returns whether it was there.
    pub fn evict(&self, key: &str) -> bool {
        let mut state = self.lock();
        let now = state.clock.read(Instant::now());
        let reply = state.server.execute(now, &["DEL", key]);
        reply == super::ServerReply::Integer(1)
    }

    /// Stores `token` under `key` with `ttl` on the node's clock (in whole milliseconds, at
    /// least one), unconditionally and without logging, as another program writing to the
    /// node would. Useful to make a lock look held by someone else.
    pub fn insert(&self, key: &str, token: &LockToken, ttl: Duration) {
        let mut state = self.lock();
        let now = state.clock.read(Instant::now());
        let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let ttl = ttl.to_string();
        state
            .server
            .execute(now, &["SET", key, token.as_str(), "PX", &ttl]);
    }

    /// Makes each connection to the node take `delay` to be made, from the first request
    /// on it (and the first after each crash or restart): requests made meanwhile wait, and
    /// go out in order once it is up, as with a node still connecting.
    pub fn set_connect_delay(&self, delay: Duration) {
        self.lock().connect_delay = delay;
    }

    /// Delays every request sent from now on by `delay` before it reaches the node.
    /// Requests still arrive in the order they were sent.
    pub fn set_request_delay(&self, delay: Duration) {
        self.lock().request_delay = delay;
    }

    /// Delays every reply by `delay` after the node ran the command.
    pub fn set_reply_delay(&self, delay: Duration) {
        self.lock().reply_delay = delay;
    }

    /// While on, requests reaching the node vanish: they are not applied and never
    /// answered, so the client's timeout ends the wait.
    pub fn lose_replies(&self, lose: bool) {
        self.lock().lose_replies = lose;
    }

    /// While on, requests reaching the node are applied, but their replies never come.
    pub fn apply_but_lose_reply(&self, lose: bool) {
        self.lock().apply_but_lose_reply = lose;
    }

    // --- release announcements ---

    /// Makes the node's scripts announce releases from now on (`on`), as a Redis node of a
    /// lock with [`notify_releases`](crate::LockConfigBuilder::notify_releases) on does, or
    /// stop (the default: waiters then fall back to their retry delay). The coordinator's
    /// waiters watch the node's announcements only while they are on.
    pub fn announce_releases(&self, on: bool) {
        self.lock().pubsub.announcing = on;
    }

    /// While on, the messages the scripts publish reach no watch: a pub/sub connection
    /// that lost them (waiters fall back to their retry delay). They are still recorded in
    /// [`published`](Self::published).
    pub fn lose_announcements(&self, lose: bool) {
        self.lock().pubsub.losing = lose;
    }

    /// Every message the node's scripts published while announcing, with when, oldest
    /// first: the release announcements a Redis node would have sent.
    pub fn published(&self) -> Vec<(Instant, Published)> {
        self.lock().pubsub.published()
    }

    // --- deliberate defects, to show that a check can fail ---

    /// Makes this node run `source` wherever the clients call the node script `name`
    /// (by `EVAL` of its text or `EVALSHA` of its hash), for example a copy of the script
    /// with one deliberate change, to show that a property catches that change. The
    /// node's script cache and the clients' `NOSCRIPT` handling are unchanged.
    pub fn substitute_script(&self, name: NodeScript, source: &str) {
        self.lock().server.substitute(name.sha1(), source);
    }

    /// While on, the clients of this node take a `NOSCRIPT` answer as the request's
    /// failure (their script load fails), instead of loading the script and sending the
    /// call again as a Redis node does: a deliberate defect of the client, to show that a
    /// property notices requests lost to a flushed script cache.
    pub fn break_script_reloads(&self, broken: bool) {
        self.lock().broken_reloads = broken;
    }

    // --- inspection ---

    /// The string live under `key`, if any: a holder's token, or
    /// `quorumlock:reserved:<waiter>` for a key released to a queued waiter.
    pub fn get(&self, key: &str) -> Option<LockToken> {
        self.stored(key).map(|stored| stored.token)
    }

    /// The time `key` has left on the node's clock, if it is live (`PTTL`, to the
    /// millisecond).
    pub fn ttl(&self, key: &str) -> Option<Duration> {
        let state = self.lock();
        let now = state.clock.read(Instant::now());
        let live = state.server.keyspace().live(key.as_bytes(), now)?;
        let expires_at = live.expires_at?;
        Some(Duration::from_millis(expires_at).saturating_sub(truncated_to_millis(now)))
    }

    /// The string live under `key`, with its expiry, if any.
    pub(super) fn stored(&self, key: &str) -> Option<Stored> {
        let state = self.lock();
        let now = state.clock.read(Instant::now());
        stored(&state.server, key, now)
    }

    /// The fencing counter at `key`, if it exists.
    pub fn counter(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|value| value.as_str().parse().ok())
    }

    /// Every live key, in order: lock keys and reservations, queues and their deadlines,
    /// watch markers, fencing counters.
    pub fn keys(&self) -> Vec<String> {
        let state = self.lock();
        let now = state.clock.read(Instant::now());
        state
            .server
            .keyspace()
            .live_keys(now)
            .into_keys()
            .map(|key| String::from_utf8_lossy(&key).into_owned())
            .collect()
    }

    /// Every request sent to this node through any handle, in the order sent.
    pub fn log(&self) -> Vec<OpRecord> {
        self.lock().log.clone()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-changed in a way
        // that matters for a test double; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LockNode for SimNode {
    fn name(&self) -> &str {
        &self.name
    }

    /// A handle's requests travel in order over its one connection, as to a Redis server.
    fn hints(&self) -> NodeHints {
        NodeHints::new().applies_in_order(true)
    }

    /// What a Redis node sends for `request`, run on the simulated server.
    fn call<'a>(&'a self, request: NodeRequest<'a>) -> BoxFuture<'a, Result<NodeReply, NodeError>> {
        self.request(request).boxed()
    }
}

impl fmt::Debug for SimNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("SimNode")
            .field("name", &self.name)
            .field("client", &self.client)
            .field("up", &state.up)
            .field("clock", &state.clock.read(Instant::now()))
            .field("clock_rate", &state.clock.rate())
            .field("server", &state.server)
            .finish()
    }
}

/// The string under `key` live at `now` on `server`, with its expiry.
pub(super) fn stored(server: &ScriptHost, key: &str, now: Duration) -> Option<Stored> {
    let live = server.keyspace().live(key.as_bytes(), now)?;
    let Data::String(value) = live.data else {
        return None;
    };
    Some(Stored {
        token: LockToken::from_string(String::from_utf8_lossy(value)),
        expires_at: live.expires_at.map_or(Duration::MAX, Duration::from_millis),
    })
}

/// `now` in whole milliseconds, the resolution of the node's expiry.
pub(super) fn truncated_to_millis(now: Duration) -> Duration {
    Duration::from_millis(u64::try_from(now.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
