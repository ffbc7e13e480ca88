//! [`SimNode`]: an in-memory lock node with a clock of its own and injectable faults.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::clock::NodeClock;
use crate::error::NodeError;
use crate::node::LockNode;
use crate::token::LockToken;

/// An in-memory lock node for tests: a key store whose TTLs run on the node's own clock,
/// with faults that can be switched on and off at any moment.
///
/// It implements [`LockNode`] with the semantics of the Redis scripts the locks use (`SET
/// NX PX`, compare-and-delete, compare-and-pexpire and `GET` equal, each atomic over all
/// the keys of a request, and the fencing counters as never-expiring max-registers), so
/// [`Redlock::from_nodes`](crate::Redlock::from_nodes) and
/// [`RedisLock::from_node`](crate::RedisLock::from_node) run on it unchanged.
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
/// | [`restart`](Self::restart) | back up, with its keys (persistence) or empty (none) |
/// | [`flush`](Self::flush), [`evict`](Self::evict) | keys lost without a restart (`FLUSHALL`, eviction) |
/// | [`set_request_delay`](Self::set_request_delay) | requests reach the node later (in order: one connection is FIFO) |
/// | [`set_reply_delay`](Self::set_reply_delay) | replies come back later |
/// | [`lose_replies`](Self::lose_replies) | requests vanish: not applied, never answered (a blackholed or frozen node) |
/// | [`apply_but_lose_reply`](Self::apply_but_lose_reply) | requests are applied, but their replies never come |
///
/// A lost reply never resolves: the lock's per-node timeout ends the wait, as with a real
/// node. A request in flight is delivered even if the caller stopped waiting for it.
///
/// # Inspection
///
/// [`get`](Self::get), [`ttl`](Self::ttl) and [`keys`](Self::keys) read the store;
/// [`log`](Self::log) returns every request the node was sent, with what it did and
/// the key's state before and after, for checking invariants.
///
/// `SimNode` is a cheap handle: clones share the same node.
/// [`for_client`](Self::for_client) makes a handle whose requests are logged under a
/// client's name.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use quorumlock::node::LockNode;
/// use quorumlock::sim::SimNode;
/// use quorumlock::LockToken;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
/// #     .build().unwrap().block_on(async {
/// let node = SimNode::new("node-a");
/// let token = LockToken::generate();
/// let keys: [Arc<str>; 1] = ["k".into()];
/// assert_eq!(node.try_lock(&keys, &token, Duration::from_secs(1)).await, Ok(true));
/// assert_eq!(node.get("k"), Some(token.clone()));
///
/// // The node's clock runs twice as fast: the key lives half a second of real time.
/// node.set_clock_rate(2.0);
/// tokio::time::sleep(Duration::from_millis(500)).await;
/// assert_eq!(node.get("k"), None);
/// assert_eq!(node.extend(&keys, &token, Duration::from_secs(1)).await, Ok(false)); // never recreated
/// # });
/// ```
#[derive(Clone)]
pub struct SimNode {
    name: Arc<str>,
    client: Option<Arc<str>>,
    state: Arc<Mutex<State>>,
}

/// What the node holds and how it misbehaves; behind a mutex that is never held across
/// an await.
#[derive(Debug)]
struct State {
    clock: NodeClock,
    keys: BTreeMap<String, Stored>,
    /// Fencing counters: never expire; lost with the data.
    counters: BTreeMap<String, u64>,
    up: bool,
    /// Bumped on every crash and restart: replies of requests applied before are reset.
    generation: u64,
    request_delay: Duration,
    reply_delay: Duration,
    lose_replies: bool,
    apply_but_lose_reply: bool,
    /// When the last delayed request arrives: requests are delivered in order.
    last_arrival: Option<Instant>,
    log: Vec<OpRecord>,
}

/// A request as the node logged it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpRecord {
    /// The client the request came through ([`SimNode::for_client`]), if any.
    pub client: Option<Arc<str>>,
    /// The command.
    pub op: Op,
    /// The keys it names, in the order sent.
    pub keys: Vec<String>,
    /// The token it carries (none for the counter commands).
    pub token: Option<LockToken>,
    /// When the client sent it, on tokio's clock.
    pub sent_at: Instant,
    /// What became of it.
    pub outcome: Outcome,
}

/// One of the commands of [`LockNode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`LockNode::try_lock`]: `SET key token NX PX ttl` on every key, all or none.
    Lock {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`LockNode::unlock`]: compare-and-delete on each key.
    Unlock,
    /// [`LockNode::extend`]: compare-and-pexpire on every key, all or none.
    Extend {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// [`LockNode::holds`]: whether every key holds the token.
    Holds,
    /// [`LockNode::read_counter`]: the highest of the fencing counters.
    ReadCounter,
    /// [`LockNode::raise_counter`]: raise each fencing counter to at least `value`.
    RaiseCounter {
        /// The value asked for.
        value: u64,
    },
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// Sent, and not yet at the node (a request delay).
    InFlight,
    /// Not applied: the node was down, or refused the command; the client got `error`.
    Failed {
        /// When the node refused it, on tokio's clock.
        at: Instant,
        /// What the client was told.
        error: NodeError,
    },
    /// Not applied and never answered: lost on the way ([`SimNode::lose_replies`]).
    Dropped {
        /// When it would have reached the node, on tokio's clock.
        at: Instant,
    },
    /// The node ran the command.
    Applied(Applied),
}

/// A command the node ran.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Applied {
    /// When it ran, on tokio's clock.
    pub at: Instant,
    /// When it ran, on the node's clock.
    pub node_time: Duration,
    /// The answer of a lock command: `true` when it took, deleted, extended or matched.
    /// Always `true` for the counter commands, which cannot refuse.
    pub result: bool,
    /// The answer of a counter command: the highest counter read, or the lowest counter
    /// after a raise.
    pub count: Option<u64>,
    /// The live lock value under each key just before (lock commands; empty otherwise).
    pub before: Vec<Option<Stored>>,
    /// The live lock value under each key just after (lock commands; empty otherwise).
    pub after: Vec<Option<Stored>>,
    /// Each counter just before (counter commands; empty otherwise; 0 when absent).
    pub counters_before: Vec<u64>,
    /// Each counter just after (counter commands; empty otherwise).
    pub counters_after: Vec<u64>,
    /// What became of the answer.
    pub reply: Reply,
}

/// A live value: the token stored under a key and when it expires on the node's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The token.
    pub token: LockToken,
    /// The node-clock reading at which the key expires.
    pub expires_at: Duration,
}

/// What became of the answer to an applied command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Not sent: the reply delay has not passed, or the client stopped waiting first.
    Pending,
    /// Sent to the client.
    Sent {
        /// When, on tokio's clock.
        at: Instant,
    },
    /// Never sent ([`SimNode::apply_but_lose_reply`]).
    Lost,
    /// The connection was reset before it could be sent (the node crashed or restarted);
    /// the client got a connection error.
    Reset {
        /// When the client got the error, on tokio's clock.
        at: Instant,
    },
}

/// What a command answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Flag(bool),
    Count(u64),
}

/// What happened when a request reached the node.
enum Delivery {
    Failed(NodeError),
    Dropped,
    Applied {
        answer: Answer,
        generation: u64,
        reply_delay: Duration,
        lose_reply: bool,
    },
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
                keys: BTreeMap::new(),
                counters: BTreeMap::new(),
                up: true,
                generation: 0,
                request_delay: Duration::ZERO,
                reply_delay: Duration::ZERO,
                lose_replies: false,
                apply_but_lose_reply: false,
                last_arrival: None,
                log: Vec::new(),
            })),
        }
    }

    /// A handle to the same node whose requests are logged under `client`
    /// ([`OpRecord::client`]), to tell apart the requests of several lock clients.
    pub fn for_client(&self, client: impl Into<String>) -> SimNode {
        let client: String = client.into();
        SimNode {
            name: Arc::clone(&self.name),
            client: Some(client.into()),
            state: Arc::clone(&self.state),
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
    /// persistence). Replies of requests applied before the restart are lost.
    pub fn restart(&self, keep_data: bool) {
        let mut state = self.lock();
        if !keep_data {
            state.keys.clear();
            state.counters.clear();
        }
        state.up = true;
        state.generation += 1;
    }

    /// Whether the node is up.
    pub fn is_up(&self) -> bool {
        self.lock().up
    }

    /// Deletes every key, fencing counters included, without a restart (`FLUSHALL`).
    pub fn flush(&self) {
        let mut state = self.lock();
        state.keys.clear();
        state.counters.clear();
    }

    /// Deletes `key` (a lock key or a fencing counter) as an eviction would; returns
    /// whether it was there.
    pub fn evict(&self, key: &str) -> bool {
        let mut state = self.lock();
        let lock = state.keys.remove(key).is_some();
        state.counters.remove(key).is_some() || lock
    }

    /// Stores `token` under `key` with `ttl` on the node's clock, unconditionally and
    /// without logging, as another program writing to the node would. Useful to make a
    /// lock look held by someone else.
    pub fn insert(&self, key: &str, token: &LockToken, ttl: Duration) {
        let mut state = self.lock();
        let now = state.clock.read(Instant::now());
        state.keys.insert(
            key.to_owned(),
            Stored {
                token: token.clone(),
                expires_at: now.saturating_add(ttl),
            },
        );
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

    // --- inspection ---

    /// The token live under `key`, if any.
    pub fn get(&self, key: &str) -> Option<LockToken> {
        let state = self.lock();
        state.live(key).map(|stored| stored.token.clone())
    }

    /// The time `key` has left on the node's clock, if it is live.
    pub fn ttl(&self, key: &str) -> Option<Duration> {
        let state = self.lock();
        let now = state.clock.read(Instant::now());
        state
            .live(key)
            .map(|stored| stored.expires_at.saturating_sub(now))
    }

    /// The fencing counter at `key`, if it exists.
    pub fn counter(&self, key: &str) -> Option<u64> {
        self.lock().counters.get(key).copied()
    }

    /// The live lock keys and the fencing counters, in order.
    pub fn keys(&self) -> Vec<String> {
        let state = self.lock();
        let now = state.clock.read(Instant::now());
        let mut keys: Vec<String> = state
            .keys
            .iter()
            .filter(|(_, stored)| now < stored.expires_at)
            .map(|(key, _)| key.clone())
            .chain(state.counters.keys().cloned())
            .collect();
        keys.sort();
        keys
    }

    /// Every request sent to this node through any handle, in the order sent.
    pub fn log(&self) -> Vec<OpRecord> {
        self.lock().log.clone()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-changed in a way
        // that matters for a test double; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends one command: logs it, delivers it (now or after the request delay), and
    /// answers as the node's faults dictate.
    async fn request(
        &self,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
    ) -> Result<Answer, NodeError> {
        let sent_at = Instant::now();
        let (index, arrival) = {
            let mut state = self.lock();
            let index = state.log.len();
            let outcome = if state.up {
                Outcome::InFlight
            } else {
                Outcome::Failed {
                    at: sent_at,
                    error: refused(),
                }
            };
            let down = !state.up;
            state.log.push(OpRecord {
                client: self.client.clone(),
                op,
                keys: keys.iter().map(|key| key.to_string()).collect(),
                token: token.cloned(),
                sent_at,
                outcome,
            });
            if down {
                // Nothing listens: the connection is refused at once.
                return Err(refused());
            }
            let earliest = sent_at + state.request_delay;
            let arrival = state
                .last_arrival
                .map_or(earliest, |last| last.max(earliest));
            state.last_arrival = Some(arrival);
            (index, arrival)
        };

        let delivery = if arrival <= sent_at {
            self.deliver(index, op, keys, token)
        } else {
            self.deliver_later(index, op, keys, token, arrival).await
        };

        match delivery {
            Delivery::Failed(error) => Err(error),
            Delivery::Dropped => std::future::pending().await,
            Delivery::Applied {
                answer,
                generation,
                reply_delay,
                lose_reply,
            } => {
                if lose_reply {
                    return std::future::pending().await;
                }
                if !reply_delay.is_zero() {
                    tokio::time::sleep(reply_delay).await;
                }
                let now = Instant::now();
                let mut state = self.lock();
                let reset = state.generation != generation;
                if let Some(Outcome::Applied(applied)) =
                    state.log.get_mut(index).map(|record| &mut record.outcome)
                {
                    applied.reply = if reset {
                        Reply::Reset { at: now }
                    } else {
                        Reply::Sent { at: now }
                    };
                }
                if reset {
                    Err(NodeError::Connection(
                        "connection reset: the node restarted".to_owned(),
                    ))
                } else {
                    Ok(answer)
                }
            }
        }
    }

    /// Delivers the request at `arrival` from a task of its own, so that it lands even if
    /// the caller stops waiting.
    async fn deliver_later(
        &self,
        index: usize,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
        arrival: Instant,
    ) -> Delivery {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Delivery::Failed(NodeError::Connection(
                "a simulated request delay needs a tokio runtime".to_owned(),
            ));
        };
        let (sender, receiver) = oneshot::channel();
        let node = self.clone();
        let keys = keys.to_vec();
        let token = token.cloned();
        drop(runtime.spawn(async move {
            tokio::time::sleep_until(arrival).await;
            let delivery = node.deliver(index, op, &keys, token.as_ref());
            // The caller may have stopped waiting; the request landed all the same.
            let _ = sender.send(delivery);
        }));
        match receiver.await {
            Ok(delivery) => delivery,
            // The runtime is shutting down: nothing will ever answer.
            Err(_) => Delivery::Dropped,
        }
    }

    /// The request reaches the node now: applies it unless a fault says otherwise, and
    /// logs what happened.
    fn deliver(
        &self,
        index: usize,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
    ) -> Delivery {
        let at = Instant::now();
        let mut state = self.lock();
        let (outcome, delivery) = if !state.up {
            let error = refused();
            (
                Outcome::Failed {
                    at,
                    error: error.clone(),
                },
                Delivery::Failed(error),
            )
        } else if state.lose_replies {
            (Outcome::Dropped { at }, Delivery::Dropped)
        } else {
            match state.apply(at, op, keys, token) {
                Ok(mut applied) => {
                    let lose_reply = state.apply_but_lose_reply;
                    if lose_reply {
                        applied.reply = Reply::Lost;
                    }
                    let answer = match applied.count {
                        Some(count) => Answer::Count(count),
                        None => Answer::Flag(applied.result),
                    };
                    (
                        Outcome::Applied(applied),
                        Delivery::Applied {
                            answer,
                            generation: state.generation,
                            reply_delay: state.reply_delay,
                            lose_reply,
                        },
                    )
                }
                Err(error) => (
                    Outcome::Failed {
                        at,
                        error: error.clone(),
                    },
                    Delivery::Failed(error),
                ),
            }
        };
        if let Some(record) = state.log.get_mut(index) {
            record.outcome = outcome;
        }
        delivery
    }
}

/// What a client sees when it sends to a node that is down.
fn refused() -> NodeError {
    NodeError::Connection("connection refused: the node is down".to_owned())
}

impl State {
    /// The value under `key` if it has not expired on the node's clock.
    fn live(&self, key: &str) -> Option<&Stored> {
        let now = self.clock.read(Instant::now());
        self.keys.get(key).filter(|stored| now < stored.expires_at)
    }

    /// Runs one command on the store, as the Redis scripts would: atomically.
    fn apply(
        &mut self,
        at: Instant,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
    ) -> Result<Applied, NodeError> {
        let node_time = self.clock.read(at);
        let mut applied = Applied {
            at,
            node_time,
            result: true,
            count: None,
            before: Vec::new(),
            after: Vec::new(),
            counters_before: Vec::new(),
            counters_after: Vec::new(),
            reply: Reply::Pending,
        };
        match op {
            Op::ReadCounter => {
                applied.counters_before = self.counter_values(keys);
                applied.count = Some(applied.counters_before.iter().copied().max().unwrap_or(0));
                applied.counters_after = applied.counters_before.clone();
                return Ok(applied);
            }
            Op::RaiseCounter { value } => {
                applied.counters_before = self.counter_values(keys);
                for key in keys {
                    let counter = self.counters.entry(key.to_string()).or_insert(0);
                    *counter = (*counter).max(value);
                }
                applied.counters_after = self.counter_values(keys);
                applied.count = Some(
                    applied
                        .counters_after
                        .iter()
                        .copied()
                        .min()
                        .unwrap_or(value),
                );
                return Ok(applied);
            }
            Op::Lock { ttl } | Op::Extend { ttl } if ttl.is_zero() => {
                return Err(NodeError::Redis("invalid expire time".to_owned()));
            }
            _ => {}
        }
        let Some(token) = token else {
            return Err(NodeError::Redis(
                "a lock command without a token".to_owned(),
            ));
        };
        for key in keys {
            if matches!(self.keys.get(&**key), Some(stored) if node_time >= stored.expires_at) {
                self.keys.remove(&**key);
            }
        }
        applied.before = keys
            .iter()
            .map(|key| self.keys.get(&**key).cloned())
            .collect();
        let ours = |stored: &Option<Stored>| stored.as_ref().is_some_and(|s| &s.token == token);
        let all_ours = applied.before.iter().all(ours);
        applied.result = match op {
            Op::Lock { ttl } => {
                let free = applied.before.iter().all(Option::is_none);
                if free {
                    for key in keys {
                        self.keys.insert(
                            key.to_string(),
                            Stored {
                                token: token.clone(),
                                expires_at: node_time.saturating_add(ttl),
                            },
                        );
                    }
                }
                free
            }
            Op::Unlock => {
                for (key, before) in keys.iter().zip(&applied.before) {
                    if ours(before) {
                        self.keys.remove(&**key);
                    }
                }
                all_ours
            }
            Op::Extend { ttl } => {
                if all_ours {
                    for key in keys {
                        if let Some(stored) = self.keys.get_mut(&**key) {
                            stored.expires_at = node_time.saturating_add(ttl);
                        }
                    }
                }
                all_ours
            }
            Op::Holds | Op::ReadCounter | Op::RaiseCounter { .. } => all_ours,
        };
        applied.after = keys
            .iter()
            .map(|key| self.keys.get(&**key).cloned())
            .collect();
        Ok(applied)
    }

    /// The counters at `keys`, 0 where absent.
    fn counter_values(&self, keys: &[Arc<str>]) -> Vec<u64> {
        keys.iter()
            .map(|key| self.counters.get(&**key).copied().unwrap_or(0))
            .collect()
    }
}

/// A lock command's answer as the trait wants it.
async fn flag(answer: impl Future<Output = Result<Answer, NodeError>>) -> Result<bool, NodeError> {
    match answer.await? {
        Answer::Flag(flag) => Ok(flag),
        Answer::Count(_) => Err(NodeError::Redis("a count where a flag was due".to_owned())),
    }
}

/// A counter command's answer as the trait wants it.
async fn count(answer: impl Future<Output = Result<Answer, NodeError>>) -> Result<u64, NodeError> {
    match answer.await? {
        Answer::Count(count) => Ok(count),
        Answer::Flag(_) => Err(NodeError::Redis("a flag where a count was due".to_owned())),
    }
}

impl LockNode for SimNode {
    fn name(&self) -> &str {
        &self.name
    }

    fn try_lock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        flag(self.request(Op::Lock { ttl }, keys, Some(token))).boxed()
    }

    fn unlock<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        flag(self.request(Op::Unlock, keys, Some(token))).boxed()
    }

    fn extend<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        flag(self.request(Op::Extend { ttl }, keys, Some(token))).boxed()
    }

    fn holds<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        token: &'a LockToken,
    ) -> BoxFuture<'a, Result<bool, NodeError>> {
        flag(self.request(Op::Holds, keys, Some(token))).boxed()
    }

    fn read_counter<'a>(&'a self, keys: &'a [Arc<str>]) -> BoxFuture<'a, Result<u64, NodeError>> {
        count(self.request(Op::ReadCounter, keys, None)).boxed()
    }

    fn raise_counter<'a>(
        &'a self,
        keys: &'a [Arc<str>],
        value: u64,
    ) -> BoxFuture<'a, Result<u64, NodeError>> {
        count(self.request(Op::RaiseCounter { value }, keys, None)).boxed()
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
            .field("keys", &state.keys.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|name| Arc::from(*name)).collect()
    }

    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn commands_are_atomic_over_their_keys_and_conditional_on_the_token() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let (a, b) = (LockToken::generate(), LockToken::generate());
            let ab = keys(&["x", "y"]);
            assert_eq!(node.try_lock(&keys(&["y"]), &b, SECOND).await, Ok(true));
            // All or none: y is taken, so x is not set either.
            assert_eq!(node.try_lock(&ab, &a, SECOND).await, Ok(false));
            assert_eq!(node.get("x"), None);
            // Extend needs every key: refused, nothing created, y untouched.
            assert_eq!(node.extend(&ab, &b, 2 * SECOND).await, Ok(false));
            assert_eq!(node.get("x"), None);
            assert_eq!(node.ttl("y"), Some(SECOND));
            // Unlock deletes only what holds the token.
            assert_eq!(node.unlock(&ab, &a).await, Ok(false));
            assert_eq!(node.get("y"), Some(b.clone()));
            assert_eq!(node.unlock(&ab, &b).await, Ok(false)); // x did not hold it
            assert_eq!(node.get("y"), None);
            assert_eq!(node.try_lock(&ab, &a, SECOND).await, Ok(true));
            assert_eq!(node.holds(&ab, &a).await, Ok(true));
            assert_eq!(node.keys(), vec!["x".to_owned(), "y".to_owned()]);
            let log = node.log();
            assert_eq!(log.len(), 7);
            let Outcome::Applied(applied) = &log[1].outcome else {
                panic!("{:?}", log[1]);
            };
            assert_eq!(applied.before, applied.after);
            assert!(!applied.result);
        });
    }

    #[test]
    fn crashes_restarts_and_counters() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let token = LockToken::generate();
            let k = keys(&["k"]);
            let c = keys(&["c"]);
            assert_eq!(node.raise_counter(&c, 5).await, Ok(5));
            assert_eq!(node.raise_counter(&c, 3).await, Ok(5)); // never lowered
            assert_eq!(node.read_counter(&keys(&["c", "none"])).await, Ok(5));
            assert_eq!(node.try_lock(&k, &token, SECOND).await, Ok(true));
            node.crash();
            assert!(matches!(
                node.holds(&k, &token).await,
                Err(NodeError::Connection(_))
            ));
            node.restart(true);
            assert_eq!(node.get("k"), Some(token.clone()));
            assert_eq!(node.counter("c"), Some(5));
            node.crash();
            node.restart(false);
            assert_eq!(node.get("k"), None);
            assert_eq!(node.counter("c"), None);
            assert!(matches!(node.log()[4].outcome, Outcome::Failed { .. }));
        });
    }

    #[test]
    fn lost_requests_and_replies_never_answer() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let token = LockToken::generate();
            let k = keys(&["k"]);
            let wait = |future| tokio::time::timeout(SECOND, future);
            node.lose_replies(true);
            assert!(wait(node.try_lock(&k, &token, SECOND)).await.is_err());
            assert_eq!(node.get("k"), None);
            node.lose_replies(false);
            node.apply_but_lose_reply(true);
            assert!(wait(node.try_lock(&k, &token, 10 * SECOND)).await.is_err());
            assert_eq!(node.get("k"), Some(token.clone()));
            let log = node.log();
            assert!(matches!(log[0].outcome, Outcome::Dropped { .. }));
            assert!(matches!(&log[1].outcome, Outcome::Applied(a) if a.reply == Reply::Lost));
        });
    }

    #[test]
    fn delayed_requests_land_in_order_even_when_abandoned() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let token = LockToken::generate();
            let k = keys(&["k"]);
            node.set_request_delay(Duration::from_millis(100));
            let abandoned =
                tokio::time::timeout(Duration::from_millis(10), node.try_lock(&k, &token, SECOND))
                    .await;
            assert!(abandoned.is_err());
            // Sent later with no delay, the unlock still arrives after the SET.
            node.set_request_delay(Duration::ZERO);
            assert_eq!(node.unlock(&k, &token).await, Ok(true));
            assert_eq!(node.get("k"), None);
        });
    }

    #[test]
    fn replies_in_flight_are_reset_by_a_crash() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let token = LockToken::generate();
            let k = keys(&["k"]);
            node.set_reply_delay(Duration::from_millis(50));
            let crasher = node.clone();
            let crash = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                crasher.crash();
                crasher.restart(true);
            });
            let reply = node.try_lock(&k, &token, SECOND).await;
            crash.await.unwrap();
            assert!(matches!(reply, Err(NodeError::Connection(_))), "{reply:?}");
            assert_eq!(node.get("k"), Some(token)); // applied all the same
        });
    }

    #[test]
    fn ttls_run_on_the_node_clock() {
        paused().block_on(async {
            let node = SimNode::new("n");
            let token = LockToken::generate();
            let k = keys(&["k"]);
            assert_eq!(node.try_lock(&k, &token, SECOND).await, Ok(true));
            node.jump_clock(Duration::from_millis(999));
            assert!(node.get("k").is_some());
            node.jump_clock(Duration::from_millis(1));
            assert_eq!(node.get("k"), None);
            assert_eq!(node.try_lock(&k, &token, SECOND).await, Ok(true));
            node.set_clock_rate(0.5);
            tokio::time::sleep(Duration::from_millis(1_999)).await;
            assert!(node.get("k").is_some());
            node.jump_clock_back(SECOND);
            assert_eq!(node.ttl("k"), Some(Duration::from_micros(1_000_500)));
        });
    }
}
