//! How a request reaches a [`SimNode`] and its reply comes back: logged when sent, delayed
//! in order, applied to the store unless a fault says otherwise, and answered (or not) as
//! the faults dictate. A request in flight lands even if its caller stopped waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::log::{Op, OpRecord, Outcome, Reply};
use super::node::SimNode;
use crate::error::NodeError;
use crate::node::NodeReply;
use crate::token::LockToken;

/// What happened when a request reached the node.
enum Delivery {
    Failed(NodeError),
    Dropped,
    Applied {
        answer: NodeReply,
        generation: u64,
        reply_delay: Duration,
        lose_reply: bool,
    },
}

impl SimNode {
    /// Sends one command: logs it, delivers it (now or after the request delay), and
    /// answers as the node's faults dictate.
    pub(super) async fn request(
        &self,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
    ) -> Result<NodeReply, NodeError> {
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
            let node_time = state.clock.read(at);
            match state.store.apply(at, node_time, op, keys, token) {
                Ok(mut applied) => {
                    let lose_reply = state.apply_but_lose_reply;
                    if lose_reply {
                        applied.reply = Reply::Lost;
                    }
                    let answer = match applied.count {
                        Some(count) => NodeReply::Counter(count),
                        None => NodeReply::Done(applied.result),
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
