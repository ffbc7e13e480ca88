//! The lock protocol as a `stateright` model: N = 3 nodes and a few clients contending for
//! one resource, with every interleaving of their requests, lost replies, node crashes,
//! restarts, clock steps, and the abstentions that the library's checks of them impose.
//! `docs/testing-properties.md` ("The model check") states the abstraction; in
//! short, time is a set of events: a validity ends (the holder's lease, or an attempt's, is
//! over) and only then may the keys it protects expire.
//!
//! What each node request does mirrors `src/node/scripts.rs`, and what a
//! client does mirrors `src/quorum/`: a round sends the same request to every node,
//! counts answers to a quorum of N/2+1, rolls back a failed attempt on every node that may
//! hold its keys, mints a fencing token as read-majority maximum then raise-on-majority,
//! and a fair waiter queues on its retry and claims only a key reserved for itself, or
//! (with the direct grant, [`Protocol::grant`]) holds on the keys granted to it.

use stateright::{Model, Property};

use crate::requests::{apply, fates, leave_queue, lock};

/// The nodes of the lock.
pub const NODES: usize = 3;
/// A majority of them: the model's own statement of the rule, independent of the code.
pub const QUORUM: usize = NODES / 2 + 1;

/// What a node may lose when it restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restarts {
    /// Every restart keeps the data (an append-only file synced on every write).
    KeepData,
    /// A restart may lose the data, but only once the node's keys would have expired (the
    /// node stayed down for a TTL), which is what the safety argument assumes.
    EmptyAfterTtl,
    /// A restart may lose the data at any moment: outside the assumptions.
    EmptyAnytime,
    /// A restart may lose the data at any moment, and a node that lost it abstains (grants
    /// nothing) for a lease after the restart: the library's restart abstention.
    EmptyAbstaining,
}

/// What a node's clock may do, and what the clients check of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The clocks keep the assumption A1: no steps.
    Steady,
    /// A node's clock may step forward (once a run), and nothing checks it.
    StepsUnchecked,
    /// A step is detected at a later sample (a `Detect` step, at any moment after it),
    /// from which the node abstains for a lease: the node grants in between.
    StepsDetectedLater,
    /// A step is detected by the first reply after it, which carries the server's time:
    /// the node abstains for a lease from the step on.
    StepsDetectedAtOnce,
}

/// The sizes and assumptions of one check.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// How many clients contend for the resource.
    pub clients: usize,
    /// How many acquisition attempts each client makes at most.
    pub attempts: u8,
    /// How many node crashes may happen in a run.
    pub crashes: u8,
    /// What restarts may lose.
    pub restarts: Restarts,
    /// What the clocks may do.
    pub clock: Clock,
    /// The mutation that the checker must catch: an abstention (after a restart or a
    /// detected clock step) shorter than a lease, which may end at any moment.
    pub short_abstention: bool,
    /// Whether grants mint fencing tokens.
    pub fencing: bool,
    /// Whether a refused client retries as a queued (fair) waiter.
    pub fair: bool,
    /// Whether requests and replies can be lost.
    pub lossy: bool,
    /// How each client takes the name (by index; a client past the end takes it as a
    /// mutex): the modes of one name must never overlap.
    pub modes: Vec<Mode>,
    /// The mutation that the checker must catch: the mutex's old rule, which took the key
    /// without looking at the name's live readers and permits.
    pub mutex_ignores_holders: bool,
    /// Whether clients speak the direct grant: a release hands the key to the head waiter
    /// (its token, a fresh TTL), and a queued waiter that was refused holds once its own
    /// grants and those announced to it make a quorum.
    pub grant: bool,
    /// How many clients (the last ones) speak the previous protocol on the same name:
    /// their places take no grants, and their releases reserve.
    pub old_clients: usize,
    /// A mutation of the direct grant that the checker must catch.
    pub grant_mutation: Option<GrantMutation>,
    /// Whether a fair client queues from its first attempt (it expects to wait: the
    /// library does so once a recent attempt found the key held).
    pub queue_at_once: bool,
    /// Whether a client that released begins another acquisition while it has attempts
    /// left (a worker taking the lock in a loop), so that a releaser contends again.
    pub reacquire: bool,
    /// Whether a holder may extend its lease (once).
    pub extensions: bool,
}

/// The broken variants of the direct grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantMutation {
    /// The waiter counts its lease's validity from the moment the announced grants reach
    /// it, not from the sending of the refresh they were granted on: a validity that begins
    /// after the keys' TTLs began.
    ValidityFromArrival,
    /// A waiter's refresh that finds the key granted to a place it left (an earlier
    /// attempt it gave up) says yes, but leaves the grant's TTL as it was.
    KeepsEarlierGrants,
}

/// How a client takes the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// The lock key itself: a mutex, or a read-write lock's writer.
    Mutex,
    /// A reader's entry, listed with score 0.
    Read,
    /// The slot `slot` of a semaphore of `permits`, listed with score `permits`.
    Permit { permits: u8, slot: u8 },
}

impl Mode {
    /// Whether holders in these two modes may hold the name at once: readers together,
    /// and permits of one semaphore (the same K) in different slots; nothing else.
    pub fn compatible(self, other: Mode) -> bool {
        match (self, other) {
            (Mode::Read, Mode::Read) => true,
            (
                Mode::Permit { permits, slot },
                Mode::Permit {
                    permits: theirs,
                    slot: their_slot,
                },
            ) => permits == theirs && slot != their_slot,
            _ => false,
        }
    }
}

/// What a node's lock key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A token: of `client`'s attempt `attempt`, set or last extended by the lease's
    /// `generation`-th round (0: the acquisition).
    Held {
        client: u8,
        attempt: u8,
        generation: u8,
    },
    /// Released to the first waiter in line (`quorumlock:reserved:<waiter>`).
    Reserved { waiter: u8 },
}

/// A waiter's place in a node's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// Its ticket and id (a client's ticket is its index).
    pub waiter: u8,
    /// The attempt (the token) of the refresh that last wrote the place, which a grant on
    /// it is of; 0 for a waiter that takes no grants.
    pub attempt: u8,
    /// Whether the waiter takes grants (speaks the direct grant).
    pub grants: bool,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    pub up: bool,
    pub key: Option<Key>,
    /// The waiters in line, by ticket.
    pub queue: Vec<Place>,
    /// The fencing counter.
    pub counter: u8,
    /// The live shared holders listed beside the key (readers and permit slots), each
    /// with its mode, sorted.
    pub holders: Vec<(Key, Mode)>,
    /// Whether a waiter ever claimed a key reserved for it here (for reachability only).
    pub claimed: bool,
    /// Whether a release ever granted the key to a waiter here (for reachability only).
    pub granted: bool,
    /// While the node abstains: the validities that ran when the abstention began, which
    /// must all end before it does (it lasts a lease and each is shorter).
    pub abstains: Option<Vec<Validity>>,
    /// Its clock stepped and no sample has detected it yet.
    pub stepped: bool,
}

/// One validity that ran when a node began to abstain: the client's attempt, and whether
/// its extension had begun by then (an extension begun later is a validity of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Validity {
    pub client: u8,
    pub attempt: u8,
    pub extended: bool,
}

/// The requests a round sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    Lock,
    ReadCounter,
    RaiseCounter(u8),
    Extend,
    /// The rollback of a failed attempt.
    Rollback,
    Release,
    LeaveQueue,
}

/// What a node answered to one request of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Not delivered yet.
    Pending,
    Yes,
    No,
    /// Down, lost on the way, or its reply lost: it may or may not have been applied.
    Failed,
    /// Not sent to this node (a rollback skips nodes that refused).
    Skipped,
}

/// What happens to a request on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    Answered,
    /// Applied, and the reply lost.
    ReplyLost,
    /// Lost before the node: not applied.
    Dropped,
}

/// A lock request still in flight after its round was decided, or a queue exit due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Straggler {
    None,
    Lock,
    /// A queued winner leaves the queue of a node that did not grant it the lock.
    Leave,
}

/// One client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    /// How it takes the name.
    pub mode: Mode,
    /// Whether a mutex takes the key beside live shared holders (the mutation).
    pub ignores_holders: bool,
    /// Whether it speaks the direct grant.
    pub grants: bool,
    /// The [`GrantMutation::KeepsEarlierGrants`] mutation, in its lock script.
    pub keeps_earlier_grants: bool,
    /// A queued attempt refused by some node, waiting for their grants (a lock round whose
    /// every node answered).
    pub awaiting: bool,
    /// Whether a grant announced to it counted in its current round.
    pub heard: bool,
    /// Its current attempt (the token of its lock requests).
    pub attempt: u8,
    pub attempts_left: u8,
    /// Whether its attempts go as a queued waiter.
    pub queued: bool,
    pub round: Option<(Request, [Answer; NODES])>,
    /// The highest counter read while minting.
    pub highest: u8,
    /// Granted: the lease, with its fencing token.
    pub lease: Option<Option<u8>>,
    /// Whether the current attempt's, then lease's, validity still runs.
    pub valid: bool,
    /// Successful extensions so far.
    pub generation: u8,
    pub extended: bool,
    pub stragglers: [Straggler; NODES],
    pub done: bool,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    pub nodes: [Node; NODES],
    pub clients: Vec<Client>,
    pub crashes_left: u8,
    pub steps_left: u8,
    /// The fencing token of the last grant, and whether some grant's token did not exceed
    /// the one before it.
    pub last_token: u8,
    pub tokens_decreased: bool,
    pub grants: u8,
    /// A waiter held on a quorum that counted a grant (for reachability only).
    pub held_by_grant: bool,
    /// A waiter that gave up waiting had a grant undone and passed on (reachability only).
    pub grant_given_back: bool,
}

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client starts an attempt.
    Begin(u8),
    /// A request of a client's round reaches a node.
    Deliver(u8, usize, Fate),
    /// A straggler of a client reaches a node.
    Straggle(u8, usize),
    /// The validity of a client's attempt or lease runs out.
    ValidityEnds(u8),
    Extend(u8),
    Release(u8),
    /// A key whose protecting validity is over expires.
    KeyExpires(usize),
    /// A shared holder's entry (by its place in the node's list) whose validity is over
    /// expires.
    EntryExpires(usize, usize),
    Crash(usize),
    Restart(usize, bool),
    /// A node's clock steps forward by more than the drift allowance: its keys expire.
    ClockStep(usize),
    /// A sample detects a node's step.
    Detect(usize),
    /// A node's abstention ends.
    AbstentionEnds(usize),
    /// The announcement of a node's grant reaches the waiter it was granted to (one may
    /// never arrive: lost, or the pub/sub connection down).
    Hear(u8, usize),
    /// A waiter stops waiting for grants (its wait is bounded by its retry delay): it
    /// rolls the attempt back where it may hold the key (the nodes that said yes, a grant
    /// it heard of among them, and those whose reply was lost), and retries or leaves; a
    /// grant it did not hear of is taken by its next refresh, or given back by its leave.
    GiveUp(u8),
}

impl Client {
    fn new(attempts: u8, mode: Mode, ignores_holders: bool, grants: bool) -> Self {
        Client {
            mode,
            ignores_holders,
            grants,
            keeps_earlier_grants: false,
            awaiting: false,
            heard: false,
            attempt: 0,
            attempts_left: attempts,
            queued: false,
            round: None,
            highest: 0,
            lease: None,
            valid: false,
            generation: 0,
            extended: false,
            stragglers: [Straggler::None; NODES],
            done: false,
        }
    }

    /// The key as a grant to its current attempt sets it.
    pub(crate) fn granted(&self, index: u8) -> Key {
        Key::Held {
            client: index,
            attempt: self.attempt,
            generation: 0,
        }
    }

    /// Whether its lease is granted and still valid: what exclusion is about.
    pub fn holds(&self) -> bool {
        self.lease.is_some() && self.valid
    }
}

impl State {
    /// Whether `key` on a node is still protected by a validity, so cannot have expired:
    /// keys of a live attempt, and a lease's keys from its latest successful round on.
    pub(crate) fn protected(&self, key: Key) -> bool {
        let Key::Held {
            client,
            attempt,
            generation,
        } = key
        else {
            return false;
        };
        let owner = &self.clients[usize::from(client)];
        owner.attempt == attempt && owner.valid && generation >= owner.generation
    }

    /// Whether `validity` still runs: the same attempt's, and not yet replaced by an
    /// extension begun after it was recorded.
    pub(crate) fn runs(&self, validity: Validity) -> bool {
        let owner = &self.clients[usize::from(validity.client)];
        owner.attempt == validity.attempt
            && owner.valid
            && (validity.extended || owner.generation == 0)
    }

    /// Node `n` begins to abstain: it waits out every validity running now (and those it
    /// already waited for).
    fn abstain(&mut self, n: usize) {
        let mut waits: Vec<Validity> = self
            .clients
            .iter()
            .enumerate()
            .filter(|(_, client)| client.valid)
            .map(|(c, client)| Validity {
                client: c as u8,
                attempt: client.attempt,
                extended: client.extended,
            })
            .collect();
        waits.extend(self.nodes[n].abstains.take().unwrap_or_default());
        waits.sort();
        waits.dedup();
        self.nodes[n].abstains = Some(waits);
    }
}

/// Every order of the nodes.
const PERMUTATIONS: [[usize; NODES]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

impl State {
    /// The state with its nodes in a canonical order: the nodes are interchangeable (the
    /// properties count holders and tokens, never which node), so states that differ only
    /// by the order of the nodes are one state to the checker.
    fn canonical(self) -> State {
        PERMUTATIONS
            .iter()
            .map(|order| {
                let mut permuted = self.clone();
                permuted.nodes = order.map(|n| self.nodes[n].clone());
                for client in &mut permuted.clients {
                    if let Some((_, answers)) = &mut client.round {
                        *answers = order.map(|n| answers[n]);
                    }
                    client.stragglers = order.map(|n| client.stragglers[n]);
                }
                permuted
            })
            .min()
            .expect("there are orders")
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            up: true,
            key: None,
            queue: Vec::new(),
            counter: 0,
            claimed: false,
            granted: false,
            holders: Vec::new(),
            abstains: None,
            stepped: false,
        };
        vec![State {
            nodes: std::array::from_fn(|_| node.clone()),
            clients: (0..self.clients)
                .map(|c| {
                    let mode = self.modes.get(c).copied().unwrap_or(Mode::Mutex);
                    let grants = self.grant && c + self.old_clients < self.clients;
                    let mut client =
                        Client::new(self.attempts, mode, self.mutex_ignores_holders, grants);
                    client.keeps_earlier_grants =
                        self.grant_mutation == Some(GrantMutation::KeepsEarlierGrants);
                    client
                })
                .collect(),
            crashes_left: self.crashes,
            steps_left: u8::from(self.clock != Clock::Steady),
            last_token: 0,
            tokens_decreased: false,
            grants: 0,
            held_by_grant: false,
            grant_given_back: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (index, client) in state.clients.iter().enumerate() {
            let c = index as u8;
            if client.done {
                continue;
            }
            match client.round {
                None if client.lease.is_none() && client.attempts_left > 0 => {
                    actions.push(Action::Begin(c))
                }
                None if client.lease.is_some() => {
                    if self.extensions && client.valid && !client.extended {
                        actions.push(Action::Extend(c));
                    }
                    actions.push(Action::Release(c));
                }
                None => {}
                Some((_, answers)) if client.awaiting => {
                    for (n, answer) in answers.iter().enumerate() {
                        // A node that queued it: it refused, or its reply was lost.
                        let queued = matches!(answer, Answer::No | Answer::Failed);
                        if queued && state.nodes[n].key == Some(client.granted(c)) {
                            actions.push(Action::Hear(c, n));
                        }
                    }
                    actions.push(Action::GiveUp(c));
                }
                Some((request, answers)) => {
                    for (n, answer) in answers.iter().enumerate() {
                        // One connection per node: a request waits for the earlier ones.
                        if *answer == Answer::Pending && client.stragglers[n] == Straggler::None {
                            let fates = if self.lossy {
                                fates(request)
                            } else {
                                &[Fate::Answered]
                            };
                            for fate in fates {
                                actions.push(Action::Deliver(c, n, *fate));
                            }
                        }
                    }
                }
            }
            for (n, straggler) in client.stragglers.iter().enumerate() {
                if *straggler != Straggler::None {
                    actions.push(Action::Straggle(c, n));
                }
            }
            if client.valid {
                actions.push(Action::ValidityEnds(c));
            }
        }
        for (n, node) in state.nodes.iter().enumerate() {
            if node.key.is_some_and(|key| !state.protected(key)) {
                actions.push(Action::KeyExpires(n));
            }
            for (i, (key, _)) in node.holders.iter().enumerate() {
                if !state.protected(*key) {
                    actions.push(Action::EntryExpires(n, i));
                }
            }
            if node.up && state.crashes_left > 0 {
                actions.push(Action::Crash(n));
            }
            if !node.up {
                actions.push(Action::Restart(n, true));
                if self.restart_may_lose_data(state, n) {
                    actions.push(Action::Restart(n, false));
                }
            }
            if node.up && state.steps_left > 0 {
                actions.push(Action::ClockStep(n));
            }
            if node.stepped {
                actions.push(Action::Detect(n));
            }
            if let Some(waits) = &node.abstains {
                if self.short_abstention || waits.is_empty() {
                    actions.push(Action::AbstentionEnds(n));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Begin(c) => {
                let client = &mut state.clients[usize::from(c)];
                client.attempt += 1;
                client.attempts_left -= 1;
                client.queued |= self.fair && self.queue_at_once;
                client.extended = false;
                client.valid = true;
                client.generation = 0;
                client.heard = false;
                Self::start_round(client, Request::Lock, &[Answer::Pending; NODES]);
            }
            Action::Deliver(c, n, fate) => {
                let State { nodes, clients, .. } = &mut state;
                let client = &mut clients[usize::from(c)];
                let (request, mut answers) = client.round?;
                let node = &mut nodes[n];
                // An abstaining node's requests fail at once, unsent.
                let out = !node.up || node.abstains.is_some();
                answers[n] = if out || fate == Fate::Dropped {
                    Answer::Failed
                } else {
                    let yes = apply(node, c, client, request);
                    match (fate, yes) {
                        (Fate::Answered, true) => Answer::Yes,
                        (Fate::Answered, false) => Answer::No,
                        _ => Answer::Failed,
                    }
                };
                client.round = Some((request, answers));
                self.settle(&mut state, usize::from(c));
            }
            Action::Straggle(c, n) => {
                let State { nodes, clients, .. } = &mut state;
                let client = &mut clients[usize::from(c)];
                let node = &mut nodes[n];
                let straggler = std::mem::replace(&mut client.stragglers[n], Straggler::None);
                if node.up && node.abstains.is_none() {
                    match straggler {
                        Straggler::Lock => {
                            let took = lock(node, c, client);
                            // A release waits for it (one connection per node), so it
                            // never lands after the lease ended.
                            if !took && client.queued {
                                client.stragglers[n] = Straggler::Leave;
                            }
                        }
                        Straggler::Leave => leave_queue(node, c, client.grants),
                        Straggler::None => {}
                    }
                }
            }
            Action::ValidityEnds(c) => state.clients[usize::from(c)].valid = false,
            Action::Extend(c) => {
                let client = &mut state.clients[usize::from(c)];
                client.extended = true;
                Self::start_round(client, Request::Extend, &[Answer::Pending; NODES]);
            }
            Action::Release(c) => {
                let client = &mut state.clients[usize::from(c)];
                client.valid = false;
                client.lease = None;
                Self::start_round(client, Request::Release, &[Answer::Pending; NODES]);
            }
            Action::KeyExpires(n) => state.nodes[n].key = None,
            Action::EntryExpires(n, i) => {
                state.nodes[n].holders.remove(i);
            }
            Action::Crash(n) => {
                state.nodes[n].up = false;
                state.crashes_left -= 1;
            }
            Action::Restart(n, keep_data) => {
                let node = &mut state.nodes[n];
                node.up = true;
                if !keep_data {
                    node.key = None;
                    node.holders.clear();
                    node.queue.clear();
                    node.counter = 0;
                    if self.restarts == Restarts::EmptyAbstaining {
                        state.abstain(n);
                    }
                }
            }
            Action::ClockStep(n) => {
                state.steps_left -= 1;
                // Stepped past their expiry: a key (or entry) set later lasts its TTL
                // again, as the clock runs on at its rate.
                let node = &mut state.nodes[n];
                node.key = None;
                node.holders.clear();
                match self.clock {
                    Clock::StepsDetectedLater => node.stepped = true,
                    Clock::StepsDetectedAtOnce => state.abstain(n),
                    Clock::Steady | Clock::StepsUnchecked => {}
                }
            }
            Action::Detect(n) => {
                state.nodes[n].stepped = false;
                state.abstain(n);
            }
            Action::AbstentionEnds(n) => state.nodes[n].abstains = None,
            Action::Hear(c, n) => {
                let client = &mut state.clients[usize::from(c)];
                let (request, mut answers) = client.round?;
                answers[n] = Answer::Yes;
                client.round = Some((request, answers));
                client.heard = true;
                self.settle(&mut state, usize::from(c));
            }
            Action::GiveUp(c) => {
                let granted = state.clients[usize::from(c)].granted(c);
                let client = &mut state.clients[usize::from(c)];
                let (_, answers) = client.round?;
                // What the rollback gives back: a grant it heard of (a yes now).
                state.grant_given_back |= answers
                    .iter()
                    .zip(&state.nodes)
                    .any(|(answer, node)| *answer == Answer::Yes && node.key == Some(granted));
                client.awaiting = false;
                self.fail(client, &answers, true);
                self.settle(&mut state, usize::from(c));
            }
        }
        // An ended validity never runs again (attempts only count up): forgetting it keeps
        // states that differ only in what ended as one.
        let ended: Vec<Vec<Validity>> = state
            .nodes
            .iter()
            .map(|node| {
                let waits = node.abstains.iter().flatten();
                waits.filter(|v| !state.runs(**v)).copied().collect()
            })
            .collect();
        for (node, ended) in state.nodes.iter_mut().zip(ended) {
            if let Some(waits) = &mut node.abstains {
                waits.retain(|v| !ended.contains(v));
            }
        }
        Some(state.canonical())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "exclusion: no two valid holders in conflicting modes",
                |_, state: &State| {
                    let holding: Vec<Mode> = state
                        .clients
                        .iter()
                        .filter(|client| client.holds())
                        .map(|client| client.mode)
                        .collect();
                    holding.iter().enumerate().all(|(i, mode)| {
                        holding[i + 1..].iter().all(|other| mode.compatible(*other))
                    })
                },
            ),
            Property::always("fencing tokens strictly increase", |_, state: &State| {
                !state.tokens_decreased
            }),
            // Reachability, so that the properties above are not true for want of runs.
            Property::sometimes("a second grant after the first", |_, state: &State| {
                state.grants >= 2
            }),
            Property::sometimes(
                "a queued waiter claims a key reserved for it",
                |_, state: &State| state.nodes.iter().any(|node| node.claimed),
            ),
            Property::sometimes(
                "a waiter holds on a quorum that counts a grant",
                |_, state: &State| state.held_by_grant,
            ),
            Property::sometimes(
                "a waiter that gave up undoes a grant",
                |_, state: &State| state.grant_given_back,
            ),
        ]
    }
}
