//! The simulation's script host (`quorumlock::sim::ScriptHost`) against a real
//! `redis-server`: proptest sequences of every node script (lock, lock-watching,
//! lock-queued, lock-queued-many, unlock, leave-queue, extend, raise-counter) and of the
//! plain commands a node sends (`SET NX PX`, and `GET`/`MGET` for holds and read-counter),
//! from states seeded with held and reserved keys, queues with live and lapsed places,
//! watch markers, fencing counters (some not numbers) and keys of the wrong type, run on
//! both. After every step the replies (errors word for word), the published messages and
//! the whole keyspace (every key, type, value and TTL) must be the same.
//!
//! Time: the host's node clock is the machine's wall clock, read as each step starts,
//! which is what the real server's `TIME` and expiry read. TTLs and queue deadlines
//! derived from it are compared within [`TOLERANCE_MS`]. Durations are either long (30 s
//! or more) or tiny (1 or 2 ms, followed by a 3 ms pause), so no decision falls on a
//! millisecond the two could read differently.
//!
//! `QUORUMLOCK_PROPTEST_CASES` sets the number of sequences (default 1,000); a failure is
//! shrunk to a minimal sequence and kept in `tests/script_host.proptest-regressions`,
//! which later runs try first.
//!
//! It can fail: each of these deliberate mutations of the host (one at a time, then
//! reverted) made it fail within the default case count:
//! - sorted sets rank equal scores by member in descending order (`commands.rs`, `ZRANGE`):
//!   a released key is reserved for the wrong waiter;
//! - `SET` ignores `NX` (`commands.rs`): the single-key lock overwrites a holder;
//! - `MGET` answers `WRONGTYPE` for a key that is not a string (`commands.rs`): a
//!   read-counter over a key of the wrong type differs;
//! - an error raised by `redis.call` is located one line off (`script_host.rs`): the
//!   `WRONGTYPE` errors of the queue scripts differ.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use quorumlock::sim::{Data, LiveKey, NodeScript, ScriptHost, ServerReply};
use quorumlock::testkit::RedisCluster;
use redis::{ConnectionLike, Value};

/// How far apart a TTL, or a queue deadline, may be on the two servers: what they read of
/// the clock differs by the time a step takes to reach the real one.
const TOLERANCE_MS: i64 = 250;

/// The lock keys the sequences use.
const KEYS: [&str; 3] = ["a", "b", "c"];
const QUEUE: &str = "quorumlock:waiters:";
const DEADLINES: &str = "quorumlock:waiter-deadlines:";
const WATCHED: &str = "quorumlock:watched:";
const RESERVED: &str = "quorumlock:reserved:";
const FENCE: &str = "quorumlock:fence:";
/// A channel the test publishes on after each step, to know it has seen all of its messages.
const SENTINEL: &str = "script-host-test:step-done";
/// Microseconds since the epoch, as the lock's tickets are.
const TICKET_BASE: u64 = 1_700_000_000_000_000;

fn cases() -> u32 {
    std::env::var("QUORUMLOCK_PROPTEST_CASES").map_or(1_000, |value| {
        value
            .trim()
            .parse()
            .expect("QUORUMLOCK_PROPTEST_CASES is a whole number")
    })
}

/// One argument of a command: text, or a deadline relative to the step's clock reading.
#[derive(Debug, Clone)]
enum Arg {
    Text(String),
    NowPlusMs(i64),
}

/// One step, run on both servers: commands one after the other, or a script.
#[derive(Debug, Clone)]
enum Step {
    Commands(Vec<Vec<Arg>>),
    Script {
        script: NodeScript,
        keys: Vec<String>,
        argv: Vec<String>,
    },
}

/// A step, and whether it used a tiny duration (then both servers wait it out).
#[derive(Debug, Clone)]
struct Timed {
    step: Step,
    tiny: bool,
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
    let lifetime = || duration(&[60_000, 120_000]);
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
        3 => (key(), token(), ttl(), waiter(), ticket(), lifetime()).prop_map(
            |(key, token, (ttl, a), waiter, ticket, (lifetime, b))| {
                let argv = vec![token, ttl, waiter, ticket, lifetime];
                script(NodeScript::LockQueued, &[key], argv, a || b)
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

fn sequence() -> impl Strategy<Value = Vec<Timed>> {
    let step = prop_oneof![4 => script_call(), 1 => node_command(), 2 => seed()];
    proptest::collection::vec(step, 1..20)
}

/// A real server's answer, in the host's terms.
fn from_redis(result: redis::RedisResult<Value>) -> ServerReply {
    let error = |code: &str, detail: Option<&str>| {
        ServerReply::Error(detail.map_or(code.to_owned(), |detail| format!("{code} {detail}")))
    };
    match result {
        Err(err) => error(err.code().unwrap_or("ERR"), err.detail()),
        Ok(Value::ServerError(err)) => error(err.code(), err.details()),
        Ok(Value::Nil) => ServerReply::Nil,
        Ok(Value::Int(value)) => ServerReply::Integer(value),
        Ok(Value::BulkString(bytes)) => ServerReply::Bulk(bytes),
        Ok(Value::Okay) => ServerReply::ok(),
        Ok(Value::SimpleString(status)) => ServerReply::Status(status),
        Ok(Value::Array(items)) => {
            ServerReply::Array(items.into_iter().map(|item| from_redis(Ok(item))).collect())
        }
        Ok(other) => panic!("a RESP2 server does not answer {other:?}"),
    }
}

/// The real server and a connection subscribed to everything it publishes.
struct Real<'a> {
    commands: redis::Connection,
    messages: redis::PubSub<'a>,
    steps: u64,
    /// How often each situation worth comparing came up, so that the run can tell it met
    /// them (see [`Coverage`]).
    seen: BTreeMap<Coverage, u32>,
}

/// Situations the sequences must reach for the comparison to mean something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Coverage {
    /// A script took its keys.
    Granted,
    /// A script answered an error (a key of the wrong type, a counter that is no number).
    ScriptError,
    /// A release or a queue exit announced something.
    Published,
    /// A script reserved a key for a waiter and announced it on the waiter's channel.
    HandedOff,
}

impl Real<'_> {
    fn query(&mut self, words: &[String]) -> ServerReply {
        let mut command = redis::Cmd::new();
        for word in words {
            command.arg(word.as_str());
        }
        from_redis(self.commands.req_command(&command))
    }

    /// What the last step published: every message before this step's sentinel.
    fn published(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.steps += 1;
        self.query(&["PUBLISH".into(), SENTINEL.into(), self.steps.to_string()]);
        let mut published = Vec::new();
        loop {
            let message = self
                .messages
                .get_message()
                .expect("the subscription delivers");
            if message.get_channel_name() == SENTINEL {
                return published;
            }
            published.push((
                message.get_channel_name().as_bytes().to_vec(),
                message.get_payload_bytes().to_vec(),
            ));
        }
    }

    fn keyspace(&mut self) -> BTreeMap<Vec<u8>, LiveKey> {
        let word = |text: &str| text.to_owned();
        let ServerReply::Array(keys) = self.query(&[word("KEYS"), word("*")]) else {
            panic!("KEYS answers an array");
        };
        let mut live = BTreeMap::new();
        for key in keys {
            let ServerReply::Bulk(key) = key else {
                panic!("a key is a bulk string")
            };
            let name = String::from_utf8(key.clone()).expect("the test's keys are text");
            let kind = self.query(&[word("TYPE"), name.clone()]);
            let bulks = |reply: ServerReply| match reply {
                ServerReply::Array(items) => items
                    .into_iter()
                    .map(|item| match item {
                        ServerReply::Bulk(bytes) => bytes,
                        other => panic!("{other:?} in a listing"),
                    })
                    .collect::<Vec<_>>(),
                other => panic!("{other:?} is not a listing"),
            };
            let data = match kind {
                ServerReply::Status(kind) if kind == "string" => {
                    let ServerReply::Bulk(value) = self.query(&[word("GET"), name.clone()]) else {
                        panic!("a string key has a value");
                    };
                    Data::String(value)
                }
                ServerReply::Status(kind) if kind == "zset" => {
                    let ranked = bulks(self.query(&[
                        word("ZRANGE"),
                        name.clone(),
                        word("0"),
                        word("-1"),
                        word("WITHSCORES"),
                    ]));
                    Data::SortedSet(
                        ranked
                            .chunks(2)
                            .map(|pair| {
                                let score =
                                    String::from_utf8_lossy(&pair[1]).parse().expect("a score");
                                (pair[0].clone(), score)
                            })
                            .collect(),
                    )
                }
                ServerReply::Status(kind) if kind == "hash" => {
                    let fields = bulks(self.query(&[word("HGETALL"), name.clone()]));
                    Data::Hash(
                        fields
                            .chunks(2)
                            .map(|pair| (pair[0].clone(), pair[1].clone()))
                            .collect(),
                    )
                }
                // Expired between KEYS and TYPE.
                ServerReply::Status(kind) if kind == "none" => continue,
                other => panic!("the test makes no key of type {other:?}"),
            };
            let ServerReply::Integer(ttl) = self.query(&[word("PTTL"), name]) else {
                panic!("PTTL answers an integer");
            };
            let ttl_ms = u64::try_from(ttl).ok();
            live.insert(key, LiveKey { data, ttl_ms });
        }
        live
    }
}

fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
}

fn resolve(args: &[Arg], now: Duration) -> Vec<String> {
    let now_ms = i64::try_from(now.as_millis()).expect("milliseconds fit");
    args.iter()
        .map(|arg| match arg {
            Arg::Text(text) => text.clone(),
            Arg::NowPlusMs(offset) => (now_ms + offset).to_string(),
        })
        .collect()
}

/// A keyspace as lines of text, for failure reports.
fn readable(keys: &BTreeMap<Vec<u8>, LiveKey>) -> Vec<String> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    keys.iter()
        .map(|(key, live)| {
            let data = match &live.data {
                Data::String(value) => text(value),
                Data::SortedSet(members) => format!(
                    "{:?}",
                    members
                        .iter()
                        .map(|(m, s)| (text(m), *s))
                        .collect::<Vec<_>>()
                ),
                Data::Hash(fields) => format!(
                    "{:?}",
                    fields
                        .iter()
                        .map(|(f, v)| (text(f), text(v)))
                        .collect::<Vec<_>>()
                ),
            };
            format!("{} = {data} (ttl {:?})", text(key), live.ttl_ms)
        })
        .collect()
}

fn close(a: i64, b: i64) -> bool {
    (a - b).abs() <= TOLERANCE_MS
}

/// Whether two keyspaces agree: the same keys and data, TTLs and deadlines (hash values
/// that are numbers) within the tolerance.
fn same_keyspace(real: &BTreeMap<Vec<u8>, LiveKey>, host: &BTreeMap<Vec<u8>, LiveKey>) -> bool {
    let number = |bytes: &[u8]| std::str::from_utf8(bytes).ok()?.parse::<i64>().ok();
    let same_value = |a: &[u8], b: &[u8]| match (number(a), number(b)) {
        (Some(a), Some(b)) => close(a, b),
        _ => a == b,
    };
    real.len() == host.len()
        && real
            .iter()
            .zip(host)
            .all(|((real_key, real), (host_key, host))| {
                let ttls = match (real.ttl_ms, host.ttl_ms) {
                    (None, None) => true,
                    (Some(a), Some(b)) => close(a as i64, b as i64),
                    _ => false,
                };
                let data = match (&real.data, &host.data) {
                    (Data::Hash(a), Data::Hash(b)) => {
                        a.len() == b.len()
                            && a.iter()
                                .zip(b)
                                .all(|((fa, va), (fb, vb))| fa == fb && same_value(va, vb))
                    }
                    (a, b) => a == b,
                };
                real_key == host_key && ttls && data
            })
}

/// Runs `steps` on both servers, comparing after each step.
fn run_both(real: &mut Real, steps: &[Timed]) -> Result<(), TestCaseError> {
    real.query(&["FLUSHALL".into()]);
    let mut host = ScriptHost::new();
    for (index, timed) in steps.iter().enumerate() {
        let now = wall_clock();
        let (real_reply, host_reply) = match &timed.step {
            Step::Commands(commands) => {
                let (mut real_replies, mut host_replies) = (Vec::new(), Vec::new());
                for args in commands {
                    let words = resolve(args, now);
                    real_replies.push(real.query(&words));
                    host_replies.push(host.execute(now, &words));
                }
                (
                    ServerReply::Array(real_replies),
                    ServerReply::Array(host_replies),
                )
            }
            Step::Script { script, keys, argv } => {
                let mut words = vec![
                    "EVAL".to_owned(),
                    script.source().to_owned(),
                    keys.len().to_string(),
                ];
                words.extend(keys.iter().cloned());
                words.extend(argv.iter().cloned());
                (
                    real.query(&words),
                    host.eval(now, script.source(), keys, argv),
                )
            }
        };
        prop_assert_eq!(
            &host_reply,
            &real_reply,
            "reply of step {}: {:?}",
            index,
            timed.step
        );
        let published: Vec<(Vec<u8>, Vec<u8>)> = host
            .keyspace_mut()
            .take_published()
            .into_iter()
            .map(|message| (message.channel, message.message))
            .collect();
        if matches!(timed.step, Step::Script { .. }) {
            let handed_off = published
                .iter()
                .any(|(channel, _)| channel.starts_with(b"quorumlock:waiter:"));
            let met = [
                (Coverage::Granted, host_reply == ServerReply::Integer(1)),
                (Coverage::ScriptError, host_reply.is_error()),
                (Coverage::Published, !published.is_empty()),
                (Coverage::HandedOff, handed_off),
            ];
            for (situation, _) in met.into_iter().filter(|(_, met)| *met) {
                *real.seen.entry(situation).or_default() += 1;
            }
        }
        prop_assert_eq!(published, real.published(), "messages of step {}", index);
        // Tiny TTLs run out before the keyspaces are compared, on both servers.
        if timed.tiny {
            std::thread::sleep(Duration::from_millis(3));
        }
        let host_keys = host.keyspace().live_keys(wall_clock());
        let real_keys = real.keyspace();
        prop_assert!(
            same_keyspace(&real_keys, &host_keys),
            "keyspace after step {}: {:?}\nreal: {:#?}\nhost: {:#?}",
            index,
            timed.step,
            readable(&real_keys),
            readable(&host_keys)
        );
    }
    Ok(())
}

#[test]
fn the_script_host_answers_as_redis_does() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the testkit");
    let cluster = runtime
        .block_on(RedisCluster::start(1))
        .expect("a local redis-server starts");
    let client = cluster.node(0).client().expect("a client for the node");
    let mut subscriber = client.get_connection().expect("a subscriber connection");
    let mut messages = subscriber.as_pubsub();
    messages
        .psubscribe("*")
        .expect("subscribed to every channel");
    let real = RefCell::new(Real {
        commands: client.get_connection().expect("a command connection"),
        messages,
        steps: 0,
        seen: BTreeMap::new(),
    });
    let config = Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let outcome = TestRunner::new(config).run(&sequence(), |steps| {
        run_both(&mut real.borrow_mut(), &steps)
    });
    let seen = real.into_inner().seen;
    drop(cluster);
    if let Err(failure) = outcome {
        panic!("the script host differs from redis-server: {failure}");
    }
    // Every situation came up in a good share of the sequences (a handful of times even
    // at the smallest case counts), so the comparison did meet it.
    let least = cases() / 50;
    for situation in [
        Coverage::Granted,
        Coverage::ScriptError,
        Coverage::Published,
        Coverage::HandedOff,
    ] {
        let times = seen.get(&situation).copied().unwrap_or(0);
        assert!(
            times >= least,
            "{situation:?} came up {times} times in {} sequences: {seen:?}",
            cases()
        );
    }
    eprintln!("situations met: {seen:?}");
}
