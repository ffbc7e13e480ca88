//! What each request does on one node: the scripts of `src/node/scripts.rs` (and the
//! fencing counter's), on the model's node.

use crate::protocol::{Answer, Client, Fate, Key, Node, Request, NODES};

/// Reserves a freed key for the first waiter in the node's line.
pub(crate) fn pass_on(node: &mut Node) {
    if !node.queue.is_empty() {
        let waiter = node.queue.remove(0);
        node.key = Some(Key::Reserved { waiter });
    }
}

pub(crate) fn leave_queue(node: &mut Node, client: u8) {
    node.queue.retain(|&waiter| waiter != client);
    if node.key == Some(Key::Reserved { waiter: client }) {
        node.key = None;
        pass_on(node);
    }
}

/// The lock script (`SET NX PX` / `LOCK`, or `LOCK_QUEUED` for a queued waiter) on one
/// node: takes a free key, or one reserved for this waiter; a refused waiter joins the line.
/// Returns whether it took the key.
pub(crate) fn lock(node: &mut Node, client: u8, attempt: u8, queued: bool) -> bool {
    let free = match node.key {
        None => true,
        Some(Key::Reserved { waiter }) => queued && waiter == client,
        Some(Key::Held { .. }) => false,
    };
    if free && node.key.is_some() {
        node.claimed = true;
    }
    if free {
        node.key = Some(Key::Held {
            client,
            attempt,
            generation: 0,
        });
        node.queue.retain(|&waiter| waiter != client);
    } else if queued && !node.queue.contains(&client) {
        let at = node.queue.partition_point(|&waiter| waiter < client);
        node.queue.insert(at, client);
    }
    free
}

/// One request of `client` applied on `node`; returns whether the node said yes.
pub(crate) fn apply(node: &mut Node, client: u8, c: &mut Client, request: Request) -> bool {
    let ours = |key: Option<Key>| {
        matches!(key, Some(Key::Held { client: holder, attempt, .. })
            if holder == client && attempt == c.attempt)
    };
    match request {
        Request::Lock => lock(node, client, c.attempt, c.queued),
        Request::ReadCounter => {
            c.highest = c.highest.max(node.counter);
            true
        }
        Request::RaiseCounter(token) => {
            node.counter = node.counter.max(token);
            true
        }
        Request::Extend => {
            let extended = ours(node.key);
            if extended {
                let generation = c.generation + 1;
                node.key = Some(Key::Held {
                    client,
                    attempt: c.attempt,
                    generation,
                });
            }
            extended
        }
        Request::Rollback | Request::Release => {
            let took = ours(node.key);
            if took {
                node.key = None;
                pass_on(node);
            }
            took
        }
        Request::LeaveQueue => {
            leave_queue(node, client);
            true
        }
    }
}

/// What may become of a request: a lost reply differs from an answer only where the answer
/// counts and the request changed something, and from a lost request only where it did.
pub(crate) fn fates(request: Request) -> &'static [Fate] {
    match request {
        Request::Lock | Request::RaiseCounter(_) | Request::Extend => {
            &[Fate::Answered, Fate::ReplyLost, Fate::Dropped]
        }
        // A read changes nothing; every node is heard out before a rollback, a release or
        // a queue exit is done with, whatever it answered.
        Request::ReadCounter | Request::Rollback | Request::Release | Request::LeaveQueue => {
            &[Fate::Answered, Fate::Dropped]
        }
    }
}

pub(crate) fn count(answers: &[Answer; NODES], wanted: Answer) -> usize {
    answers.iter().filter(|&&answer| answer == wanted).count()
}
