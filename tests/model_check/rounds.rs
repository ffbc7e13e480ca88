//! How a client's rounds are started and decided, as `src/quorum/` decides them.

use crate::protocol::{
    Answer, Client, GrantMutation, Protocol, Request, Restarts, State, Straggler, NODES, QUORUM,
};
use crate::requests::count;

impl Protocol {
    /// A round of `request` to every node; a rollback skips the nodes that refused.
    pub(crate) fn start_round(client: &mut Client, request: Request, skip: &[Answer; NODES]) {
        let answers = std::array::from_fn(|n| match (request, skip[n]) {
            (Request::Rollback, Answer::No) => Answer::Skipped,
            _ => Answer::Pending,
        });
        client.round = Some((request, answers));
    }

    /// The attempt failed: roll it back, then retry (queued, if fair and refused) or stop.
    /// The rollback skips the nodes that refused, as the coordinator's does, a queued
    /// attempt of the direct grant's too (`src/quorum/acquire.rs`, `roll_back`): a grant
    /// that landed on one of them since, unheard, is the waiter's next refresh's to take
    /// (`granted_before` in `requests::lock`), or its leave's to give back. A grant heard
    /// of counts as a yes, and is rolled back.
    pub(crate) fn fail(&self, client: &mut Client, answers: &[Answer; NODES], refused: bool) {
        client.valid = false;
        client.lease = None;
        client.awaiting = false;
        if refused && self.fair {
            client.queued = true;
        }
        Self::start_round(client, Request::Rollback, answers);
    }

    /// Acts on the client's rounds as soon as each is decided, as the coordinator does: the
    /// decision is local, so it commutes with every other step and needs no step of its
    /// own (it reads the validity, and a validity that ends just before is the same run).
    pub(crate) fn settle(&self, state: &mut State, index: usize) {
        while self.decide(state, index).is_some() {}
    }

    /// Acts on a decided round; `None` while it is not decided (or there is none).
    fn decide(&self, state: &mut State, index: usize) -> Option<()> {
        let client = &mut state.clients[index];
        let (request, answers) = client.round?;
        let yes = count(&answers, Answer::Yes);
        let pending = count(&answers, Answer::Pending);
        let won = yes >= QUORUM;
        if !won && yes + pending >= QUORUM {
            return None;
        }
        let everyone = pending == 0;
        let mut grant = None;
        match request {
            Request::Lock if won => {
                for (n, answer) in answers.iter().enumerate() {
                    client.stragglers[n] = match answer {
                        Answer::Pending => Straggler::Lock,
                        Answer::No | Answer::Failed if client.queued => Straggler::Leave,
                        _ => Straggler::None,
                    };
                }
                let heard = std::mem::take(&mut client.heard);
                client.awaiting = false;
                if heard && self.grant_mutation == Some(GrantMutation::ValidityFromArrival) {
                    // The lease's validity counted from the last grant's arrival: it runs
                    // now, and none of the keys' TTLs began inside it.
                    client.valid = true;
                    client.generation = 1;
                }
                if !client.valid {
                    // Validity exhausted: no lease, and the late requests are never sent.
                    client.stragglers = [Straggler::None; NODES];
                    self.fail(client, &answers, false);
                } else if self.fencing {
                    client.highest = 0;
                    Self::start_round(client, Request::ReadCounter, &answers);
                } else {
                    state.held_by_grant |= heard;
                    grant = Some(None);
                }
            }
            // Refused by some node as a queued waiter of the direct grant: wait for the
            // refusing nodes' grants (Hear) or give up (GiveUp), as long as the validity
            // runs.
            Request::Lock if everyone && client.grants && client.queued && client.valid => {
                let refused = count(&answers, Answer::No) > 0;
                if !refused {
                    self.fail(client, &answers, false);
                } else {
                    client.awaiting = true;
                    return None;
                }
            }
            // No quorum: the coordinator hears every node out before rolling back.
            Request::Lock if everyone => {
                let refused = count(&answers, Answer::No) > 0;
                self.fail(client, &answers, refused);
            }
            Request::ReadCounter if won => {
                let token = client.highest + 1;
                Self::start_round(client, Request::RaiseCounter(token), &answers);
            }
            Request::RaiseCounter(token) if won && client.valid => grant = Some(Some(token)),
            // A mint without a quorum, or past the validity: the attempt fails.
            Request::ReadCounter | Request::RaiseCounter(_) => {
                client.stragglers = [Straggler::None; NODES];
                self.fail(client, &[Answer::Pending; NODES], false)
            }
            Request::Extend => {
                client.round = None;
                if won && client.valid {
                    client.generation += 1;
                }
            }
            Request::Rollback | Request::Release | Request::LeaveQueue if everyone => {
                client.round = None;
                let gave_up = request == Request::Rollback && client.attempts_left == 0;
                if gave_up && client.queued {
                    // A blocking acquisition that ends without the lock gives its place back.
                    Self::start_round(client, Request::LeaveQueue, &[Answer::Pending; NODES]);
                } else if request == Request::Release && self.reacquire {
                    // A worker that takes the lock again: its next acquisition begins
                    // while it has attempts left.
                    client.done = client.attempts_left == 0;
                } else if request != Request::Rollback || gave_up {
                    client.done = true;
                }
            }
            Request::Lock | Request::Rollback | Request::Release | Request::LeaveQueue => {
                return None
            }
        }
        if let Some(token) = grant {
            self.grant(state, index, token);
        }
        Some(())
    }

    fn grant(&self, state: &mut State, index: usize, token: Option<u8>) {
        let client = &mut state.clients[index];
        client.round = None;
        client.lease = Some(token);
        state.grants += 1;
        if let Some(token) = token {
            state.tokens_decreased |= state.grants > 1 && token <= state.last_token;
            state.last_token = token;
        }
    }

    pub(crate) fn restart_may_lose_data(&self, state: &State, node: usize) -> bool {
        match self.restarts {
            Restarts::KeepData => false,
            Restarts::EmptyAfterTtl => {
                let node = &state.nodes[node];
                !node.key.is_some_and(|key| state.protected(key))
                    && !node.holders.iter().any(|(key, _)| state.protected(*key))
            }
            Restarts::EmptyAnytime | Restarts::EmptyAbstaining => true,
        }
    }
}
