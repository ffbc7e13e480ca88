//! The real server of the comparison: commands, what it published, and its whole keyspace.

use std::collections::BTreeMap;

use quorumlock::sim::{Data, LiveKey, ServerReply};
use redis::{ConnectionLike, Value};

/// A channel the test publishes on after each step, to know it has seen all of its messages.
const SENTINEL: &str = "script-host-test:step-done";

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
pub struct Real<'a> {
    commands: redis::Connection,
    messages: redis::PubSub<'a>,
    steps: u64,
}

impl<'a> Real<'a> {
    /// The server behind `commands`, whose publications `messages` receives.
    pub fn new(commands: redis::Connection, messages: redis::PubSub<'a>) -> Self {
        Real {
            commands,
            messages,
            steps: 0,
        }
    }

    pub fn query(&mut self, words: &[String]) -> ServerReply {
        let mut command = redis::Cmd::new();
        for word in words {
            command.arg(word.as_str());
        }
        from_redis(self.commands.req_command(&command))
    }

    /// What the last step published: every message before this step's sentinel.
    pub fn published(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
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

    pub fn keyspace(&mut self) -> BTreeMap<Vec<u8>, LiveKey> {
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
