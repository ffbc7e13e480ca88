//! How a request reaches a [`SimNode`] and its reply comes back, as a Redis node's request
//! does: [`wire`] makes it the command or script call a Redis node sends; the script
//! cache's `EVALSHA` / `NOSCRIPT` / `SCRIPT LOAD` exchange runs through the client code a
//! Redis node uses ([`CachedScript::invoke`]); each command goes over the handle's
//! connection (made first when cold, delayed in order), runs on the node's [`ScriptHost`]
//! unless a fault says otherwise, and is answered (or not) as the faults dictate. A
//! request in flight lands even if its caller stopped waiting.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::log::{Applied, Op, OpRecord, Outcome, Reply, Stored};
use super::node::{stored, SimNode};
use super::server::{ScriptHost, ServerReply};
use crate::error::NodeError;
use crate::node::{NodeReply, NodeRequest};
use crate::protocol::keys::{release_channel, waiter_channel};
use crate::protocol::{is_unreachable, wire, CachedScript, Read, Resend, Wire};
use crate::token::LockToken;

/// What one command of a request is, for the log.
#[derive(Clone)]
enum Sending {
    /// The request's own command: its reply read with `read`; the log shows the values of
    /// `keys` (the fencing counters at `keys`, when `counters`) before and after.
    Request {
        read: Read,
        keys: Arc<[Arc<str>]>,
        counters: bool,
    },
    /// `SCRIPT LOAD` of the request's script, after a `NOSCRIPT`.
    Load,
}

/// What happened when a command reached the node.
enum Delivery {
    Failed(RedisError),
    Dropped,
    Answered {
        reply: Value,
        generation: u64,
        reply_delay: Duration,
        lose_reply: bool,
    },
}

impl SimNode {
    /// Carries out `request` as a Redis node does: the same command or script call, sent
    /// over this handle's connection, logged as one record.
    pub(super) async fn request(&self, request: NodeRequest<'_>) -> Result<NodeReply, NodeError> {
        let announce = self.lock().pubsub.announcing;
        let (command, script, resend, read) =
            match wire(request, &self.connection.scripts, announce)? {
                Wire::Command { command, read } => {
                    (Arc::new(command), None, Resend::AfterReload, read)
                }
                Wire::Script {
                    script,
                    command,
                    resend,
                    read,
                } => (command, Some(Arc::clone(script)), resend, read),
                Wire::WatchReleases(key) => {
                    let channel = release_channel(key);
                    return Ok(NodeReply::Watch(self.lock().pubsub.watch(&channel)));
                }
                Wire::WatchReservations(client) => {
                    let channel = waiter_channel(client);
                    return Ok(NodeReply::Watch(self.lock().pubsub.watch(&channel)));
                }
                Wire::Unsupported => return Ok(NodeReply::Unsupported),
            };
        let (op, keys, token, waiter) = Op::of(&request);
        let sending = Sending::Request {
            read: read.clone(),
            keys: keys.into(),
            counters: matches!(op, Op::ReadCounter | Op::RaiseCounter { .. }),
        };
        let index = self.open_record(op, keys, token, waiter);
        let broken_reloads = self.lock().broken_reloads;
        let reply = match script {
            None => self.send(index, &command, sending).await,
            Some(script) => {
                let run = run_script(
                    self.clone(),
                    script,
                    command,
                    resend,
                    index,
                    sending,
                    broken_reloads,
                );
                match tokio::runtime::Handle::try_current() {
                    // Safe to repeat, and leaves state behind if it never arrives: driven to
                    // its end whether or not the caller still waits, as a Redis node does.
                    Ok(runtime) if resend == Resend::AlsoAfterReconnect => {
                        let (sender, receiver) = oneshot::channel();
                        drop(runtime.spawn(async move {
                            let _ = sender.send(run.await);
                        }));
                        match receiver.await {
                            Ok(reply) => reply,
                            // The runtime is shutting down: nothing will ever answer.
                            Err(_) => std::future::pending().await,
                        }
                    }
                    _ => run.await,
                }
            }
        };
        read.reply(reply.map_err(node_error)?)
    }

    /// Logs a request as sent now, in flight.
    fn open_record(
        &self,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
        waiter: Option<&LockToken>,
    ) -> usize {
        let mut state = self.lock();
        state.log.push(OpRecord {
            client: self.client.clone(),
            op,
            keys: keys.iter().map(|key| key.to_string()).collect(),
            token: token.cloned(),
            waiter: waiter.cloned(),
            sent_at: Instant::now(),
            outcome: Outcome::InFlight,
            earlier: Vec::new(),
            script_loads: 0,
        });
        state.log.len() - 1
    }

    /// Sends one command of the request logged at `index` over this handle's connection,
    /// and answers as the node's faults dictate.
    async fn send(&self, index: usize, command: &Cmd, sending: Sending) -> RedisResult<Value> {
        let sent_at = Instant::now();
        let arrival = {
            let mut state = self.lock();
            let state = &mut *state;
            if let Some(record) = state.log.get_mut(index) {
                // A sending after the first: the last one's fate becomes history.
                if record.outcome != Outcome::InFlight {
                    let last = std::mem::replace(&mut record.outcome, Outcome::InFlight);
                    record.earlier.push(last);
                }
            }
            if !state.up {
                // Nothing listens: the connection is refused at once.
                set_outcome(&mut state.log, index, failed(sent_at, &refused()));
                return Err(refused());
            }
            let mut order = self
                .connection
                .order
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // A connection made before a crash or restart is broken: made again.
            let up_at = match order.made {
                Some((generation, at)) if generation == state.generation => at,
                _ => {
                    let at = sent_at + state.connect_delay;
                    order.made = Some((state.generation, at));
                    at
                }
            };
            let earliest = (sent_at + state.request_delay).max(up_at);
            let arrival = order
                .last_arrival
                .map_or(earliest, |last| last.max(earliest));
            order.last_arrival = Some(arrival);
            arrival
        };

        let delivery = if arrival <= sent_at {
            self.deliver(index, command, &sending)
        } else {
            self.deliver_later(index, command.clone(), sending, arrival)
                .await
        };

        match delivery {
            Delivery::Failed(error) => Err(error),
            Delivery::Dropped => std::future::pending().await,
            Delivery::Answered {
                reply,
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
                if let Some(record) = state.log.get_mut(index) {
                    match &mut record.outcome {
                        Outcome::Applied(applied) => {
                            applied.reply = if reset {
                                Reply::Reset { at: now }
                            } else {
                                Reply::Sent { at: now }
                            };
                        }
                        Outcome::Failed { at, error } => {
                            *at = now;
                            if reset {
                                *error = node_error(self::reset());
                            }
                        }
                        // A script loaded: the call goes again next.
                        outcome @ Outcome::InFlight if reset => {
                            *outcome = failed(now, &self::reset())
                        }
                        _ => {}
                    }
                }
                if reset {
                    Err(self::reset())
                } else {
                    reply.extract_error()
                }
            }
        }
    }

    /// Delivers the command at `arrival` from a task of its own, so that it lands even if
    /// the caller stops waiting.
    async fn deliver_later(
        &self,
        index: usize,
        command: Cmd,
        sending: Sending,
        arrival: Instant,
    ) -> Delivery {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Delivery::Failed(not_connected(
                "a simulated request delay needs a tokio runtime",
            ));
        };
        let (sender, receiver) = oneshot::channel();
        let node = self.clone();
        drop(runtime.spawn(async move {
            tokio::time::sleep_until(arrival).await;
            let delivery = node.deliver(index, &command, &sending);
            // The caller may have stopped waiting; the command landed all the same.
            let _ = sender.send(delivery);
        }));
        match receiver.await {
            Ok(delivery) => delivery,
            // The runtime is shutting down: nothing will ever answer.
            Err(_) => Delivery::Dropped,
        }
    }

    /// The command reaches the node now: runs it unless a fault says otherwise, and logs
    /// what happened.
    fn deliver(&self, index: usize, command: &Cmd, sending: &Sending) -> Delivery {
        let args: Vec<&[u8]> = command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes,
                _ => &[],
            })
            .collect();
        let args = args.as_slice();
        let at = Instant::now();
        let mut state = self.lock();
        let state = &mut *state;
        if !state.up {
            set_outcome(&mut state.log, index, failed(at, &refused()));
            return Delivery::Failed(refused());
        }
        if state.lose_replies {
            set_outcome(&mut state.log, index, Outcome::Dropped { at });
            return Delivery::Dropped;
        }
        let node_time = state.clock.read(at);
        let lose_reply = state.apply_but_lose_reply;
        let reply = match sending {
            Sending::Load => {
                let reply = state.server.execute(node_time, args).to_value();
                if let Some(record) = state.log.get_mut(index) {
                    record.script_loads += 1;
                }
                if lose_reply {
                    // The call waits for the load's answer, which never comes.
                    set_outcome(&mut state.log, index, Outcome::Dropped { at });
                }
                reply
            }
            Sending::Request {
                read,
                keys,
                counters,
            } => {
                let (before, counters_before) = snapshot(&state.server, keys, *counters, node_time);
                let reply = state.server.execute(node_time, args);
                let published = state.server.keyspace_mut().take_published();
                state.pubsub.publish(at, published, state.reply_delay);
                let (after, counters_after) = snapshot(&state.server, keys, *counters, node_time);
                let value = reply.to_value();
                let outcome = match &reply {
                    ServerReply::Error(message) => Outcome::Failed {
                        at,
                        error: NodeError::Redis(message.clone()),
                    },
                    _ => {
                        let (result, count) = match read.reply(value.clone()) {
                            Ok(NodeReply::Done(done)) => (done, None),
                            Ok(NodeReply::Counter(count)) => (true, Some(count)),
                            // Refused for another mode: nothing was taken.
                            Ok(NodeReply::HeldAs(_)) => (false, None),
                            _ => (true, None),
                        };
                        state.applied += 1;
                        Outcome::Applied(Applied {
                            seq: state.applied,
                            at,
                            node_time,
                            result,
                            count,
                            before,
                            after,
                            counters_before,
                            counters_after,
                            reply: if lose_reply {
                                Reply::Lost
                            } else {
                                Reply::Pending
                            },
                        })
                    }
                };
                set_outcome(&mut state.log, index, outcome);
                value
            }
        };
        Delivery::Answered {
            reply,
            generation: state.generation,
            reply_delay: state.reply_delay,
            lose_reply,
        }
    }
}

/// Runs a script call through the client code of a Redis node: `NOSCRIPT` loads the
/// script and sends the call again; with [`Resend::AlsoAfterReconnect`], a broken
/// connection sends it once more. With `broken_reloads` (the deliberate defect of
/// [`SimNode::break_script_reloads`]) the load fails without being sent, so the call ends
/// with the `NOSCRIPT` it met.
#[allow(clippy::too_many_arguments)]
async fn run_script(
    node: SimNode,
    script: Arc<CachedScript>,
    command: Arc<Cmd>,
    resend: Resend,
    index: usize,
    sending: Sending,
    broken_reloads: bool,
) -> RedisResult<Value> {
    script
        .invoke(&command, resend, |command| {
            let load = command
                .args_iter()
                .next()
                .is_some_and(|name| matches!(name, redis::Arg::Simple(b"SCRIPT")));
            let sending = if load { Sending::Load } else { sending.clone() };
            let node = node.clone();
            let command = command.clone();
            async move {
                if load && broken_reloads {
                    return Err(RedisError::from((
                        redis::ErrorKind::Client,
                        "the script reload is broken on purpose",
                    )));
                }
                node.send(index, &command, sending).await
            }
        })
        .await
}

/// The lock values under `keys`, or (`counters`) the fencing counters at them, 0 where
/// absent.
fn snapshot(
    server: &ScriptHost,
    keys: &[Arc<str>],
    counters: bool,
    now: Duration,
) -> (Vec<Option<Stored>>, Vec<u64>) {
    if counters {
        let values = keys
            .iter()
            .map(|key| {
                stored(server, key, now)
                    .and_then(|value| value.token.as_str().parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        (Vec::new(), values)
    } else {
        let values = keys.iter().map(|key| stored(server, key, now)).collect();
        (values, Vec::new())
    }
}

fn set_outcome(log: &mut [OpRecord], index: usize, outcome: Outcome) {
    if let Some(record) = log.get_mut(index) {
        record.outcome = outcome;
    }
}

fn failed(at: Instant, error: &RedisError) -> Outcome {
    Outcome::Failed {
        at,
        error: node_error(error.clone()),
    }
}

/// A Redis client's error as the lock sees it.
fn node_error(error: RedisError) -> NodeError {
    if is_unreachable(&error) {
        NodeError::Connection(error.to_string())
    } else {
        NodeError::Redis(error.to_string())
    }
}

/// What a client sees when it sends to a node that is down.
fn refused() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused: the node is down",
    ))
}

/// What a client waiting for a reply sees when the node crashed or restarted meanwhile.
fn reset() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "connection reset: the node restarted",
    ))
}

fn not_connected(reason: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        reason.to_owned(),
    ))
}
