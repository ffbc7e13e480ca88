//! The steps of a sequence: node script calls and plain commands with arguments of the
//! shapes a node sends, and the writes that seed a state.

use std::time::Duration;

use proptest::prelude::*;
use quorumlock::protocol::NodeScript;

/// The lock keys the sequences use.
const KEYS: [&str; 3] = ["a", "b", "c"];
const QUEUE: &str = "quorumlock:waiters:";
const DEADLINES: &str = "quorumlock:waiter-deadlines:";
const WATCHED: &str = "quorumlock:watched:";
const RESERVED: &str = "quorumlock:reserved:";
const FENCE: &str = "quorumlock:fence:";
/// Microseconds since the epoch, as the lock's tickets are.
const TICKET_BASE: u64 = 1_700_000_000_000_000;

/// One argument of a command: text, or a deadline relative to the step's clock reading.
#[derive(Debug, Clone)]
pub enum Arg {
    Text(String),
    NowPlusMs(i64),
}

/// One step, run on both servers: commands one after the other, or a script.
#[derive(Debug, Clone)]
pub enum Step {
    Commands(Vec<Vec<Arg>>),
    Script {
        script: NodeScript,
        keys: Vec<String>,
        argv: Vec<String>,
    },
}

/// A step, and whether it used a tiny duration (then both servers wait it out).
#[derive(Debug, Clone)]
pub struct Timed {
    pub step: Step,
    pub tiny: bool,
}

fn text(words: &[&str]) -> Vec<Arg> {
    words
        .iter()
        .map(|word| Arg::Text((*word).to_owned()))
        .collect()
}

/// A duration in ms: mostly long, sometimes tiny.
fn duration(long: &'static [u64]) -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        3 => proptest::sample::select(long).prop_map(|ms| (ms.to_string(), false)),
        1 => proptest::sample::select(&[1u64, 2][..]).prop_map(|ms| (ms.to_string(), true)),
    ]
}

/// Lock keys, mostly `a` alone or first, so that the steps of a sequence meet on it.
fn keys() -> impl Strategy<Value = Vec<&'static str>> {
    prop_oneof![
        2 => Just(vec!["a"]),
        3 => proptest::sample::subsequence(KEYS.to_vec(), 1..=3).prop_shuffle(),
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop_oneof![2 => Just("a"), 1 => proptest::sample::select(&KEYS[..])]
}

/// Tokens, mostly `t1`, so that releases and extensions often hold the key.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![2 => Just("t1"), 1 => proptest::sample::select(&["t2", "t3"][..])]
        .prop_map(str::to_owned)
}

/// Waiters of two clients, and one id without a client part.
fn waiter() -> impl Strategy<Value = String> {
    proptest::sample::select(&["c1:w1", "c1:w2", "c2:w3", "w4"][..]).prop_map(str::to_owned)
}

fn ticket() -> impl Strategy<Value = String> {
    proptest::sample::select(&[0u64, 1, 1, 2, 5][..])
        .prop_map(|offset| (TICKET_BASE + offset).to_string())
}

/// A direct-grant refresh's stamp (`node::GrantStamp`: refresh x 1000 + node), a few
/// refreshes of a few nodes, so that a waiter's later refresh meets its earlier grant.
fn stamp() -> impl Strategy<Value = String> {
    proptest::sample::select(&[1000u64, 1001, 2000, 3002][..]).prop_map(|stamp| stamp.to_string())
}

/// The channel prefix; mostly the one a node announces on, sometimes none.
fn channel() -> impl Strategy<Value = String> {
    prop_oneof![3 => Just("quorumlock:released:"), 1 => Just("")].prop_map(str::to_owned)
}

fn script(script: NodeScript, keys: &[&str], argv: Vec<String>, tiny: bool) -> Timed {
    Timed {
        step: Step::Script {
            script,
            keys: script.keys(keys),
            argv,
        },
        tiny,
    }
}

/// A node script call with arguments of the shapes the node sends.
fn script_call() -> impl Strategy<Value = Timed> {
    let ttl = || duration(&[30_000, 60_000, 90_000]);
    // Not 120 s: a line is kept for twice a place's lifetime once its TTL falls below it, so
    // a line kept for 2 x 60 s would be checked against a 120 s place on the very
    // millisecond the two servers may read differently.
    let lifetime = || duration(&[60_000, 150_000]);
    // Weighted toward the queue: a hand-off needs a holder, a queued waiter and a release.
    prop_oneof![
        2 => (keys(), token(), ttl()).prop_map(|(keys, token, (ttl, tiny))| {
            script(NodeScript::Lock, &keys, vec![token, ttl], tiny)
        }),
        1 => (keys(), token(), ttl(), duration(&[30_000, 60_000])).prop_map(
            |(keys, token, (ttl, a), (interest, b))| {
                script(
                    NodeScript::LockWatching,
                    &keys,
                    vec![token, ttl, interest],
                    a || b,
                )
            }
        ),
        2 => (key(), token(), ttl(), waiter(), ticket(), lifetime()).prop_map(
            |(key, token, (ttl, a), waiter, ticket, (lifetime, b))| {
                let argv = vec![token, ttl, waiter, ticket, lifetime];
                script(NodeScript::LockQueued, &[key], argv, a || b)
            }
        ),
        // A stamped refresh (the direct grant), whose place a release grants the key to.
        // Its TTL is never tiny (a grant sets the key, and the line's record of it, to the
        // TTL the place recorded, in a later step that pauses for no tiny TTL) nor 30 s (a
        // record kept for 2 x 30 s would be checked against a 60 s TTL on the millisecond
        // the two servers may read differently).
        3 => (
            key(),
            token(),
            proptest::sample::select(&[60_000u64, 90_000][..]),
            waiter(),
            ticket(),
            lifetime(),
            stamp()
        )
            .prop_map(
                |(key, token, ttl, waiter, ticket, (lifetime, tiny), stamp)| {
                    let argv = vec![token, ttl.to_string(), waiter, ticket, lifetime, stamp];
                    script(NodeScript::LockQueued, &[key], argv, tiny)
                }
            ),
        2 => (
            keys(),
            token(),
            ttl(),
            waiter(),
            ticket(),
            lifetime(),
            channel()
        )
            .prop_map(
                |(keys, token, (ttl, a), waiter, ticket, (lifetime, b), channel)| {
                    let argv = vec![token, ttl, waiter, ticket, lifetime, channel];
                    script(NodeScript::LockQueuedMany, &keys, argv, a || b)
                }
            ),
        3 => (keys(), token(), channel()).prop_map(|(keys, token, channel)| {
            script(NodeScript::Unlock, &keys, vec![token, channel], false)
        }),
        2 => (keys(), waiter(), channel()).prop_map(|(keys, waiter, channel)| {
            script(NodeScript::LeaveQueue, &keys, vec![waiter, channel], false)
        }),
        1 => (keys(), token(), ttl()).prop_map(|(keys, token, (ttl, tiny))| {
            script(NodeScript::Extend, &keys, vec![token, ttl], tiny)
        }),
        1 => (
            keys(),
            proptest::sample::select(&[1u64, 5, 41, 1 << 53][..])
        )
            .prop_map(|(keys, value)| {
                let counters: Vec<String> =
                    keys.iter().map(|key| format!("{FENCE}{key}")).collect();
                let counters: Vec<&str> = counters.iter().map(String::as_str).collect();
                script(
                    NodeScript::RaiseCounter,
                    &counters,
                    vec![value.to_string()],
                    false,
                )
            }),
    ]
}

/// The plain commands of a node: the single-key lock, holds and read-counter.
fn node_command() -> impl Strategy<Value = Timed> {
    let command = |words: Vec<String>, tiny| Timed {
        step: Step::Commands(vec![words.into_iter().map(Arg::Text).collect()]),
        tiny,
    };
    let values = |keys: Vec<String>| {
        let verb = if keys.len() == 1 { "GET" } else { "MGET" };
        [vec![verb.to_owned()], keys].concat()
    };
    prop_oneof![
        (key(), token(), duration(&[30_000, 60_000])).prop_map(move |(key, token, (ttl, tiny))| {
            let words = ["SET", key, &token, "NX", "PX", &ttl].map(str::to_owned);
            command(words.to_vec(), tiny)
        }),
        keys().prop_map(move |keys| {
            command(
                values(keys.iter().map(|key| (*key).to_owned()).collect()),
                false,
            )
        }),
        keys().prop_map(move |keys| {
            command(
                values(keys.iter().map(|key| format!("{FENCE}{key}")).collect()),
                false,
            )
        }),
    ]
}

/// Writes that set up a state: held and reserved keys, queue places live or lapsed (or with
/// no deadline at all), watch markers, counters, and keys of the wrong type.
fn seed() -> impl Strategy<Value = Timed> {
    let timed = |step, tiny| Timed { step, tiny };
    let holder = prop_oneof![
        token(),
        waiter().prop_map(|waiter| format!("{RESERVED}{waiter}"))
    ];
    prop_oneof![
        (key(), holder, duration(&[30_000, 60_000])).prop_map(move |(key, value, (ttl, tiny))| {
            timed(
                Step::Commands(vec![text(&["SET", key, &value, "PX", &ttl])]),
                tiny,
            )
        }),
        (key(), ticket(), waiter()).prop_map(move |(key, ticket, waiter)| {
            let queue = format!("{QUEUE}{key}");
            timed(
                Step::Commands(vec![text(&["ZADD", &queue, &ticket, &waiter])]),
                false,
            )
        }),
        (
            key(),
            ticket(),
            waiter(),
            proptest::sample::select(&[-5_000i64, 60_000, 60_000][..])
        )
            .prop_map(move |(key, ticket, waiter, offset)| {
                let queue = format!("{QUEUE}{key}");
                let mut deadline = text(&["HSET", &format!("{DEADLINES}{key}"), &waiter]);
                deadline.push(Arg::NowPlusMs(offset));
                let place = vec![text(&["ZADD", &queue, &ticket, &waiter]), deadline];
                timed(Step::Commands(place), false)
            }),
        // A live place with the direct grant's terms (a stamped refresh's token, TTL and
        // stamp), which a release grants the key to.
        (
            key(),
            ticket(),
            waiter(),
            token(),
            proptest::sample::select(&["60000", "90000"][..]),
            stamp()
        )
            .prop_map(move |(key, ticket, waiter, token, ttl, stamp)| {
                let queue = format!("{QUEUE}{key}");
                let mut place = text(&["HSET", &format!("{DEADLINES}{key}"), &waiter]);
                place.push(Arg::NowPlusMs(60_000));
                place.extend(text(&[
                    &format!("grant:{waiter}"),
                    &format!("{token} {ttl} {stamp}"),
                ]));
                let commands = vec![text(&["ZADD", &queue, &ticket, &waiter]), place];
                timed(Step::Commands(commands), false)
            }),
        // A key granted to a waiter: in the token of its refresh, recorded as its, which its
        // next refresh takes and its leave gives back.
        (key(), token(), waiter()).prop_map(move |(key, token, waiter)| {
            let record = format!("granted:{token}");
            let commands = vec![
                text(&["SET", key, &token, "PX", "60000"]),
                text(&["HSET", &format!("{DEADLINES}{key}"), &record, &waiter]),
            ];
            timed(Step::Commands(commands), false)
        }),
        (key(), duration(&[30_000, 60_000])).prop_map(move |(key, (ttl, tiny))| {
            timed(
                Step::Commands(vec![text(&[
                    "SET",
                    &format!("{WATCHED}{key}"),
                    "1",
                    "PX",
                    &ttl,
                ])]),
                tiny,
            )
        }),
        (key(), proptest::sample::select(&["7", "0", "x"][..])).prop_map(move |(key, value)| {
            timed(
                Step::Commands(vec![text(&["SET", &format!("{FENCE}{key}"), value])]),
                false,
            )
        }),
        (key(), any::<bool>()).prop_map(move |(key, lock_key)| {
            let words = if lock_key {
                text(&["HSET", key, "f", "v"])
            } else {
                text(&["SET", &format!("{QUEUE}{key}"), "oops"])
            };
            timed(Step::Commands(vec![words]), false)
        }),
    ]
}

pub fn sequence() -> impl Strategy<Value = Vec<Timed>> {
    let step = prop_oneof![4 => script_call(), 1 => node_command(), 2 => seed()];
    proptest::collection::vec(step, 1..20)
}

pub fn resolve(args: &[Arg], now: Duration) -> Vec<String> {
    let now_ms = i64::try_from(now.as_millis()).expect("milliseconds fit");
    args.iter()
        .map(|arg| match arg {
            Arg::Text(text) => text.clone(),
            Arg::NowPlusMs(offset) => (now_ms + offset).to_string(),
        })
        .collect()
}
