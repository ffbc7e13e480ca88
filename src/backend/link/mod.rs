//! [`Link`]: the connection to one node's server, made, checked and re-made in the
//! background.
//!
//! Three things a plain reconnecting connection does not give a lock:
//!
//! - **Order while connecting.** An undo must never overtake the request it undoes (the
//!   unlock of a `SET` dropped mid-flight). On an open connection, requests reach the node
//!   in the order they are first polled, since each is queued on the connection's pipeline
//!   at once. While a connection is being made, they wait here instead, in a first-come
//!   first-served line (a fair `tokio::sync::Mutex`), and each is queued on the new
//!   connection before the next; while anybody waits in that line, newcomers queue behind.
//! - **A check of who answers.** Each new connection first asks the server what it is (see
//!   [`identity`]), and is taken into use only if the lock may count it.
//! - **Healing.** A connection that goes silent without closing (a black-holed route, a
//!   dead NAT entry, a frozen server) is probed once requests have waited on it with no
//!   reply for the silence limit, given up if the probe gets no reply either, and a new one
//!   is made in the background. Requests made meanwhile fail at once (the node counts as
//!   failed), so no backlog builds up for a node that may never answer.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisResult, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

mod attempt;
mod clock_watch;

use super::clock::{ClockAnomaly, ClockWatch};
use super::connector::Connector;
use super::identity::{Admission, Once, Rejection};
use super::silence::Silence;
use crate::metrics::Counters;

/// How many requests may wait for a connection being made; past that they fail at once.
const MAX_WAITING: usize = 1024;

/// The first wait after a failed attempt to connect; it doubles with each failure in a
/// row, up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(20);

/// The longest wait between two attempts to connect: short enough that a node whose
/// network healed serves locks again within about a second.
const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// How a link connects and when it gives up on a silent connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkSettings {
    /// Bounds each attempt to connect, the server check included.
    pub(crate) connect_timeout: Duration,
    /// How long a connection may leave a request unanswered, with no other reply, before
    /// it is given up as silent.
    pub(crate) silence_limit: Duration,
}

/// The state of the connection.
enum State {
    /// None; the next request after `retry_at` starts an attempt.
    Down {
        retry_at: Instant,
        why: Rejection,
        failures: u32,
        /// Whether requests wait for the next attempt: the first one, and one after the
        /// connection broke (a restart or a reset, usually quickly mended).
        queue_next: bool,
    },
    /// An attempt is under way; requests wait for it in the line if `queue`, else fail at
    /// once with the last failure (an attempt after silence or after a failed one may take
    /// the whole connect timeout, and nobody should wait on it).
    Connecting { queue: bool, last: Rejection },
    /// Open and checked.
    Up {
        connection: MultiplexedConnection,
        generation: u64,
    },
}

/// The connection to one node's server.
pub(crate) struct Link {
    name: String,
    client: Connector,
    config: AsyncConnectionConfig,
    settings: LinkSettings,
    admission: Arc<Admission>,
    state: Mutex<State>,
    /// Told of every change of state, for requests waiting in the line.
    changed: Notify,
    /// The line of requests waiting for a connection.
    line: tokio::sync::Mutex<()>,
    /// How many requests are in the line (or about to join it).
    in_line: AtomicUsize,
    generations: AtomicU64,
    /// Whether the state is `Up`, readable without the lock, for the hot path's hint.
    open: AtomicBool,
    silence: Silence,
    counters: Arc<Counters>,
    said_info_denied: Once,
    said_refused: Mutex<Option<String>>,
    /// The server's clock, sampled while connected, if watched.
    clock: Option<ClockWatch>,
    /// Until when the node abstains for what its clock did, and why.
    clock_abstention: Mutex<Option<(Instant, ClockAnomaly)>>,
}

impl Link {
    /// A link to `client`'s server, not connected yet.
    pub(crate) fn new(
        name: String,
        client: Connector,
        config: AsyncConnectionConfig,
        settings: LinkSettings,
        admission: Arc<Admission>,
        counters: Arc<Counters>,
    ) -> Self {
        let clock = admission.clock.map(ClockWatch::new);
        Link {
            name,
            client,
            config,
            settings,
            admission,
            state: Mutex::new(State::Down {
                retry_at: Instant::now(),
                why: Rejection::Failed(not_connected("not connected yet")),
                failures: 0,
                queue_next: true,
            }),
            changed: Notify::new(),
            line: tokio::sync::Mutex::new(()),
            in_line: AtomicUsize::new(0),
            generations: AtomicU64::new(0),
            open: AtomicBool::new(false),
            silence: Silence::new(),
            counters,
            said_info_denied: Once::default(),
            said_refused: Mutex::new(None),
            clock,
            clock_abstention: Mutex::new(None),
        }
    }

    /// Whether a request now goes straight onto an open connection.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed) && self.in_line.load(Ordering::SeqCst) == 0
    }

    /// Why the link counts as failed without being asked (refused, or abstaining), while
    /// it does.
    pub(crate) fn exclusion(&self) -> Option<String> {
        match &*self.lock_state() {
            State::Down { why, .. } => why.exclusion(),
            _ => None,
        }
    }

    /// Connects now unless connected or connecting, and waits for the outcome: `Err` with
    /// why the connection was not taken into use.
    pub(crate) async fn connect(self: &Arc<Self>) -> Result<(), Rejection> {
        let mut asked = false;
        self.when(|state| match state {
            State::Up { .. } => Some(Ok(())),
            State::Connecting { .. } => None,
            State::Down { why, .. } if asked => Some(Err(why.clone())),
            State::Down { .. } => {
                asked = true;
                self.start_connecting(state, true);
                None
            }
        })
        .await
    }

    /// Waits for a change of state until `decide` decides: `decide` sees every state from
    /// now on (the current one first) and may change it.
    async fn when<T>(&self, mut decide: impl FnMut(&mut State) -> Option<T>) -> T {
        loop {
            // Registered before the state is read, so that no change in between is missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(decided) = decide(&mut self.lock_state()) {
                return decided;
            }
            changed.await;
        }
    }

    /// Sends `command` and returns the reply, connecting first if needed. Once polled,
    /// the command keeps its place: it reaches the server after every command polled
    /// before it on this link, and before every command polled after it.
    /// `now` is the time the request is made, for the silence check.
    pub(crate) async fn send(self: Arc<Self>, command: &Cmd, now: Instant) -> RedisResult<Value> {
        if self.in_line.load(Ordering::SeqCst) == 0 {
            if let Some((mut connection, generation)) = self.open_connection(now) {
                let reply = connection.send_packed_command(command);
                tokio::pin!(reply);
                match futures::poll!(reply.as_mut()) {
                    // Refused on its first poll: the connection's task had already ended
                    // (the server restarted, or reset the connection), so the command was
                    // never written and cannot have run. It gets one prompt reconnect: it
                    // joins the line in this same poll, ahead of every request made after
                    // it, so nothing it should precede can overtake it.
                    Poll::Ready(Err(err)) if is_broken(&err) => {
                        let _ = self.finish(Err(err), generation);
                    }
                    Poll::Ready(reply) => return self.finish(reply, generation),
                    Poll::Pending => return self.finish(reply.await, generation),
                }
            }
        }
        let place = InLine::join(&self.in_line);
        let turn = self.line.lock().await;
        let (mut connection, generation) = self.wait_for_connection().await?;
        let reply = connection.send_packed_command(command);
        tokio::pin!(reply);
        // The first poll queues the command on the fresh connection's pipeline, which has
        // room for every request the line can hold; only then may the next one go.
        let first = futures::poll!(reply.as_mut());
        drop(turn);
        drop(place);
        let reply = match first {
            Poll::Ready(reply) => reply,
            Poll::Pending => reply.await,
        };
        self.finish(reply, generation)
    }

    /// The open connection. When requests have waited on it with no reply for the silence
    /// limit, it is probed: a request's reply may just have gone unseen (redis-rs drops the
    /// replies of requests nobody awaits), so a `PING` decides, in the background.
    fn open_connection(self: &Arc<Self>, now: Instant) -> Option<(MultiplexedConnection, u64)> {
        let state = self.lock_state();
        let State::Up {
            connection,
            generation,
        } = &*state
        else {
            return None;
        };
        let generation = *generation;
        if self
            .silence
            .silent_for(now, self.settings.silence_limit)
            .is_some()
            && self.silence.start_probe()
        {
            self.probe(connection.clone(), generation);
        }
        self.silence.sent(now);
        Some((connection.clone(), generation))
    }

    /// Gives connection `generation` up unless it answers a `PING` within the silence
    /// limit.
    fn probe(self: &Arc<Self>, mut connection: MultiplexedConnection, generation: u64) {
        let link = Arc::clone(self);
        let limit = self.settings.silence_limit;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.silence.end_probe();
            return;
        };
        drop(runtime.spawn(async move {
            let ping = redis::cmd("PING");
            match tokio::time::timeout(limit, connection.send_packed_command(&ping)).await {
                Ok(Ok(_)) => link.silence.answered(),
                Ok(Err(err)) => {
                    let _ = link.finish(Err(err), generation);
                }
                Err(_) => {
                    tracing::warn!(
                        node = %link.name,
                        "node connection silent; reconnecting in the background"
                    );
                    let silent = RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no reply for over {:?}; reconnecting", 2 * limit),
                    ));
                    let mut state = link.lock_state();
                    link.give_up(&mut state, generation, silent, false);
                }
            }
            link.silence.end_probe();
        }));
    }

    /// Waits in the line for a connection: the open one, or the one being made.
    async fn wait_for_connection(self: &Arc<Self>) -> RedisResult<(MultiplexedConnection, u64)> {
        self.when(|state| match state {
            State::Up {
                connection,
                generation,
            } => {
                self.silence.sent(Instant::now());
                Some(Ok((connection.clone(), *generation)))
            }
            State::Connecting { queue: false, last } => Some(Err(last.error())),
            State::Connecting { queue: true, .. } => (self.in_line.load(Ordering::SeqCst)
                > MAX_WAITING)
                .then(|| Err(not_connected("too many requests waiting to connect"))),
            State::Down {
                retry_at,
                why,
                queue_next,
                ..
            } => {
                let error = why.error();
                if Instant::now() < *retry_at {
                    return Some(Err(error));
                }
                let queue = *queue_next;
                self.start_connecting(state, queue);
                (!queue).then_some(Err(error))
            }
        })
        .await
    }

    /// Notes how a request on connection `generation` ended.
    fn finish(&self, reply: RedisResult<Value>, generation: u64) -> RedisResult<Value> {
        match &reply {
            Err(err) if is_broken(err) => {
                let mut state = self.lock_state();
                self.give_up(&mut state, generation, err.clone(), true);
            }
            _ => self.silence.answered(),
        }
        reply
    }

    /// Gives up connection `generation` if it is still the open one; the next request
    /// makes a new one (and waits for it if `queue_next`).
    fn give_up(&self, state: &mut State, generation: u64, reason: RedisError, queue_next: bool) {
        if matches!(state, State::Up { generation: open, .. } if *open == generation) {
            tracing::debug!(node = %self.name, %reason, "node connection lost");
            Counters::bump(&self.counters.reconnects);
            self.open.store(false, Ordering::Relaxed);
            *state = State::Down {
                retry_at: Instant::now(),
                why: Rejection::Failed(reason),
                failures: 0,
                queue_next,
            };
            self.changed.notify_waiters();
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The wait before the next attempt after `failures` failed ones in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// Whether `err` means the connection is gone and a new one is needed.
fn is_broken(err: &RedisError) -> bool {
    err.is_connection_dropped() || err.is_io_error() || err.kind() == ErrorKind::Io
}

/// The error a request gets when no connection can take it.
fn not_connected(reason: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        reason.to_owned(),
    ))
}

/// A place in the line, counted while held.
struct InLine<'a>(&'a AtomicUsize);

impl<'a> InLine<'a> {
    fn join(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        InLine(count)
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
