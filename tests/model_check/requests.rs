//! What each request does on one node: the scripts of `src/node/scripts.rs` (and the
//! fencing counter's), on the model's node.

use crate::protocol::{Answer, Client, Fate, Key, Mode, Node, Place, Request, NODES};

/// Hands a freed key to the first waiter in the node's line. The script of a client that
/// speaks the direct grant (`grants`) grants it to a waiter whose place says it takes
/// grants: the key is set to that waiter's token, the one its place was last refreshed
/// with, with a fresh TTL (a lease of that refresh's attempt). Any other pair reserves
/// it (`quorumlock:reserved:<waiter>`), for the waiter to claim in a round of its own.
pub(crate) fn pass_on(node: &mut Node, grants: bool) {
    if !node.queue.is_empty() {
        let head = node.queue.remove(0);
        node.key = Some(if grants && head.grants {
            node.granted = true;
            Key::Held {
                client: head.waiter,
                attempt: head.attempt,
                generation: 0,
            }
        } else {
            Key::Reserved {
                waiter: head.waiter,
            }
        });
    }
}

/// A waiter leaves the line, giving back what it was handed: a reservation, and (in the
/// direct grant's script) a grant to any of its places, whatever refresh it was made on.
pub(crate) fn leave_queue(node: &mut Node, client: u8, grants: bool) {
    node.queue.retain(|place| place.waiter != client);
    let handed = match node.key {
        Some(Key::Reserved { waiter }) => waiter == client,
        Some(Key::Held { client: holder, .. }) => grants && holder == client,
        None => false,
    };
    if handed {
        node.key = None;
        pass_on(node, grants);
    }
}

/// The lock script of the client's mode on one node. A mutex (`LOCK`, or `LOCK_QUEUED`
/// for a queued waiter) takes a free key, or one reserved for this waiter, while no shared
/// holder is live (unless it `ignores_holders`, the old rule); a refused waiter joins the
/// line. A reader (`LOCK_SHARED`) or a permit (`LOCK_PERMIT`) is listed beside a free key
/// while every live holder is compatible with it. Returns whether it took the key or entry.
pub(crate) fn lock(node: &mut Node, client: u8, c: &Client) -> bool {
    let (attempt, queued) = (c.attempt, c.queued);
    if c.mode != Mode::Mutex {
        let free = node.key.is_none()
            && node
                .holders
                .iter()
                .all(|(_, mode)| c.mode.compatible(*mode));
        if free {
            let key = Key::Held {
                client,
                attempt,
                generation: 0,
            };
            node.holders.push((key, c.mode));
            node.holders.sort();
        }
        return free;
    }
    let shared = !c.ignores_holders && !node.holders.is_empty();
    // A key granted to this waiter on one of its earlier places (a grant that landed after
    // it gave that attempt up): its refresh takes it as a grant.
    let granted_before = queued
        && c.grants
        && matches!(node.key, Some(Key::Held { client: holder, attempt: was, generation: 0 })
            if holder == client && was != attempt);
    let free = !shared
        && match node.key {
            None => true,
            Some(Key::Reserved { waiter }) => queued && waiter == client,
            Some(Key::Held { .. }) => granted_before,
        };
    if free && node.key.is_some() && !granted_before {
        node.claimed = true;
    }
    if free {
        // Taken, or (a grant made earlier) its TTL restarted by this request, which
        // arrives after it was sent: the attempt's validity covers it. The mutation keeps
        // the grant's older TTL and still says yes.
        if !(granted_before && c.keeps_earlier_grants) {
            node.key = Some(Key::Held {
                client,
                attempt,
                generation: 0,
            });
        }
        node.queue.retain(|place| place.waiter != client);
    } else if queued {
        // Joining the line, or refreshing its place: the place records the attempt (the
        // token) of this refresh, the one a grant on it will be of. A place of a client
        // that takes no grants needs no attempt (kept at 0, so that such states stay one).
        let place = Place {
            waiter: client,
            attempt: if c.grants { attempt } else { 0 },
            grants: c.grants,
        };
        match node.queue.iter_mut().find(|place| place.waiter == client) {
            Some(standing) => *standing = place,
            None => {
                let at = node.queue.partition_point(|place| place.waiter < client);
                node.queue.insert(at, place);
            }
        }
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
        Request::Lock => lock(node, client, c),
        Request::Extend if c.mode != Mode::Mutex => {
            let generation = c.generation + 1;
            let entry = node.holders.iter_mut().find(|(key, _)| ours(Some(*key)));
            let extended = entry.is_some();
            if let Some((key, _)) = entry {
                *key = Key::Held {
                    client,
                    attempt: c.attempt,
                    generation,
                };
            }
            node.holders.sort();
            extended
        }
        Request::Rollback | Request::Release if c.mode != Mode::Mutex => {
            let before = node.holders.len();
            node.holders.retain(|(key, _)| !ours(Some(*key)));
            node.holders.len() < before
        }
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
                pass_on(node, c.grants);
            }
            took
        }
        Request::LeaveQueue => {
            leave_queue(node, client, c.grants);
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
