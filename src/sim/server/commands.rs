//! The commands a [`Keyspace`] runs: those the lock nodes send and their scripts call, with
//! Redis 7.0's replies and errors.

use std::collections::BTreeMap;
use std::time::Duration;

use super::keyspace::{millis, Data, Keyspace};
use super::number::{format_g17, parse_integer, parse_score};
use super::reply::ServerReply;

/// A sorted set's members with their scores.
type Members = BTreeMap<Vec<u8>, f64>;
/// A hash's fields with their values.
type Fields = BTreeMap<Vec<u8>, Vec<u8>>;

/// Each command with its arity as Redis counts it: the number of words, the command's name
/// included; negative for "at least that many".
const COMMANDS: &[(&str, i32)] = &[
    ("GET", 2),
    ("MGET", -2),
    ("SET", -3),
    ("EXISTS", -2),
    ("DEL", -2),
    ("PEXPIRE", -3),
    ("PTTL", 2),
    ("ZADD", -4),
    ("ZREM", -3),
    ("ZRANGE", -4),
    ("ZSCORE", 3),
    ("ZCARD", 2),
    ("HSET", -4),
    ("HGET", 3),
    ("HDEL", -3),
    ("PUBLISH", 3),
    ("TIME", 1),
];

/// Why a command line cannot run at all.
pub(super) enum Unrunnable {
    /// No such command (or none the keyspace implements).
    Unknown,
    /// The command exists, with another number of arguments.
    WrongArity(&'static str),
}

/// The command named by the first word of `args`, if it can run with that many words.
pub(super) fn lookup<A: AsRef<[u8]>>(args: &[A]) -> Result<&'static str, Unrunnable> {
    let name = args.first().map(AsRef::as_ref).unwrap_or_default();
    let (command, arity) = COMMANDS
        .iter()
        .find(|(command, _)| command.as_bytes().eq_ignore_ascii_case(name))
        .ok_or(Unrunnable::Unknown)?;
    let words = i32::try_from(args.len()).unwrap_or(i32::MAX);
    let fits = if *arity >= 0 {
        words == *arity
    } else {
        words >= -arity
    };
    if fits {
        Ok(command)
    } else {
        Err(Unrunnable::WrongArity(command))
    }
}

/// The error for an option of a real command that the keyspace does not implement: the
/// lock nodes never send it, and answering as if it were absent would hide the gap.
fn unsupported(command: &str, option: &[u8]) -> ServerReply {
    ServerReply::err(format!(
        "the simulated server does not implement {command} {}",
        String::from_utf8_lossy(option)
    ))
}

/// A count as an integer reply.
fn counted(count: usize) -> ServerReply {
    ServerReply::Integer(i64::try_from(count).unwrap_or(i64::MAX))
}

fn not_an_integer() -> ServerReply {
    ServerReply::err("value is not an integer or out of range")
}

fn integer(arg: &[u8]) -> Result<i64, ServerReply> {
    parse_integer(arg).ok_or_else(not_an_integer)
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

impl Keyspace {
    /// Runs one command line (`["SET", "k", "v", "PX", "100"]`) at the node-clock reading
    /// `now`, and answers as Redis 7.0 would.
    pub fn execute<A: AsRef<[u8]>>(&mut self, now: Duration, args: &[A]) -> ServerReply {
        match lookup(args) {
            Ok(command) => {
                let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
                self.run(command, now, &args)
            }
            Err(Unrunnable::Unknown) => {
                let mut words = args.iter().map(|arg| String::from_utf8_lossy(arg.as_ref()));
                let name = words.next().unwrap_or_default();
                let rest: String = words.map(|word| format!("'{word}' ")).collect();
                ServerReply::err(format!(
                    "unknown command '{name}', with args beginning with: {rest}"
                ))
            }
            Err(Unrunnable::WrongArity(command)) => ServerReply::err(format!(
                "wrong number of arguments for '{}' command",
                command.to_ascii_lowercase()
            )),
        }
    }

    /// Runs `command`, found by [`lookup`] with a fitting arity.
    pub(super) fn run(&mut self, command: &str, now: Duration, args: &[&[u8]]) -> ServerReply {
        let now_ms = millis(now);
        let result = match command {
            "GET" => self.get(args[1], now_ms),
            "MGET" => Ok(self.mget(&args[1..], now_ms)),
            "SET" => self.set(args, now_ms),
            "EXISTS" => Ok(self.count(&args[1..], |keys, key| keys.entry(key, now_ms).is_some())),
            "DEL" => Ok(self.count(&args[1..], |keys, key| keys.remove(key, now_ms))),
            "PEXPIRE" => self.pexpire(args, now_ms),
            "PTTL" => Ok(self.pttl(args[1], now_ms)),
            "ZADD" => self.zadd(args, now_ms),
            "ZREM" => self.remove_items(args[1], &args[2..], now_ms, true),
            "ZRANGE" => self.zrange(args, now_ms),
            "ZSCORE" => self.zscore(args[1], args[2], now_ms),
            "ZCARD" => self.zcard(args[1], now_ms),
            "HSET" => self.hset(args, now_ms),
            "HGET" => self.hget(args[1], args[2], now_ms),
            "HDEL" => self.remove_items(args[1], &args[2..], now_ms, false),
            "PUBLISH" => {
                self.publish(args[1], args[2]);
                // Nobody subscribes to the simulated server.
                Ok(ServerReply::Integer(0))
            }
            "TIME" => Ok(ServerReply::Array(vec![
                ServerReply::bulk(now.as_secs().to_string()),
                ServerReply::bulk(now.subsec_micros().to_string()),
            ])),
            other => unreachable!("{other} is in COMMANDS but not run"),
        };
        result.unwrap_or_else(|error| error)
    }

    /// How many of `keys` `counts` says yes to, each key as often as it is named.
    fn count(
        &mut self,
        keys: &[&[u8]],
        mut counts: impl FnMut(&mut Keyspace, &[u8]) -> bool,
    ) -> ServerReply {
        counted(keys.iter().filter(|key| counts(self, key)).count())
    }

    fn get(&mut self, key: &[u8], now_ms: u64) -> Result<ServerReply, ServerReply> {
        match self.entry(key, now_ms).map(|entry| &entry.data) {
            None => Ok(ServerReply::Nil),
            Some(Data::String(value)) => Ok(ServerReply::Bulk(value.clone())),
            Some(_) => Err(ServerReply::wrong_type()),
        }
    }

    fn mget(&mut self, keys: &[&[u8]], now_ms: u64) -> ServerReply {
        let values = keys
            .iter()
            .map(
                |key| match self.entry(key, now_ms).map(|entry| &entry.data) {
                    Some(Data::String(value)) => ServerReply::Bulk(value.clone()),
                    _ => ServerReply::Nil,
                },
            )
            .collect();
        ServerReply::Array(values)
    }

    /// `SET key value [NX|XX] [EX seconds|PX milliseconds]`.
    fn set(&mut self, args: &[&[u8]], now_ms: u64) -> Result<ServerReply, ServerReply> {
        let syntax = || ServerReply::err("syntax error");
        let (mut only_if_absent, mut only_if_present) = (false, false);
        let mut expiry: Option<(&[u8], i64)> = None;
        let mut options = args[3..].iter();
        while let Some(option) = options.next() {
            if is(option, "NX") && !only_if_present {
                only_if_absent = true;
            } else if is(option, "XX") && !only_if_absent {
                only_if_present = true;
            } else if (is(option, "EX") || is(option, "PX")) && expiry.is_none() {
                let unit = if is(option, "EX") { 1_000 } else { 1 };
                expiry = Some((options.next().ok_or_else(syntax)?, unit));
            } else if ["KEEPTTL", "GET", "EXAT", "PXAT"]
                .iter()
                .any(|o| is(option, o))
            {
                return Err(unsupported("SET", option));
            } else {
                return Err(syntax());
            }
        }
        let expires_at = match expiry {
            None => None,
            Some((amount, unit)) => {
                let invalid = || ServerReply::err("invalid expire time in 'set' command");
                let amount = integer(amount)?;
                if amount <= 0 {
                    return Err(invalid());
                }
                let at = amount
                    .checked_mul(unit)
                    .and_then(|ms| i64::try_from(now_ms).ok()?.checked_add(ms))
                    .ok_or_else(invalid)?;
                Some(u64::try_from(at).map_err(|_| invalid())?)
            }
        };
        let exists = self.entry(args[1], now_ms).is_some();
        if (only_if_absent && exists) || (only_if_present && !exists) {
            return Ok(ServerReply::Nil);
        }
        self.insert(args[1], Data::String(args[2].to_vec()), expires_at);
        Ok(ServerReply::ok())
    }

    /// `PEXPIRE key milliseconds`: an expiry at or before now deletes the key.
    fn pexpire(&mut self, args: &[&[u8]], now_ms: u64) -> Result<ServerReply, ServerReply> {
        if let Some(option) = args.get(3) {
            return Err(unsupported("PEXPIRE", option));
        }
        let ms = integer(args[2])?;
        let at = i128::from(now_ms) + i128::from(ms);
        let Ok(at) = i64::try_from(at) else {
            return Err(ServerReply::err("invalid expire time in 'pexpire' command"));
        };
        let Some(entry) = self.entry(args[1], now_ms) else {
            return Ok(ServerReply::Integer(0));
        };
        match u64::try_from(at) {
            Ok(at) if at > now_ms => entry.expires_at = Some(at),
            _ => {
                self.remove(args[1], now_ms);
            }
        }
        Ok(ServerReply::Integer(1))
    }

    fn pttl(&mut self, key: &[u8], now_ms: u64) -> ServerReply {
        ServerReply::Integer(match self.entry(key, now_ms) {
            None => -2,
            Some(entry) => match entry.expires_at {
                None => -1,
                Some(at) => i64::try_from(at - now_ms).unwrap_or(i64::MAX),
            },
        })
    }

    /// The sorted set under `key` (`None`: no key); a key of another type is an error.
    fn zset(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut Members>, ServerReply> {
        match self.entry(key, now_ms).map(|entry| &mut entry.data) {
            None => Ok(None),
            Some(Data::SortedSet(members)) => Ok(Some(members)),
            Some(_) => Err(ServerReply::wrong_type()),
        }
    }

    /// `ZADD key score member [score member ...]`.
    fn zadd(&mut self, args: &[&[u8]], now_ms: u64) -> Result<ServerReply, ServerReply> {
        let options = ["NX", "XX", "GT", "LT", "CH", "INCR"];
        if options.iter().any(|option| is(args[2], option)) {
            return Err(unsupported("ZADD", args[2]));
        }
        let pairs = &args[2..];
        if !pairs.len().is_multiple_of(2) {
            return Err(ServerReply::err("syntax error"));
        }
        let scored: Vec<(f64, &[u8])> = pairs
            .chunks(2)
            .map(|pair| {
                let score = parse_score(pair[0])
                    .ok_or_else(|| ServerReply::err("value is not a valid float"))?;
                Ok((score, pair[1]))
            })
            .collect::<Result<_, ServerReply>>()?;
        if self.zset(args[1], now_ms)?.is_none() {
            self.insert(args[1], Data::SortedSet(BTreeMap::new()), None);
        }
        let members = self
            .zset(args[1], now_ms)?
            .expect("the sorted set was just made");
        let added = scored
            .into_iter()
            .filter(|(score, member)| members.insert(member.to_vec(), *score).is_none())
            .count();
        Ok(counted(added))
    }

    /// `ZRANGE key start stop [WITHSCORES]`, by rank.
    fn zrange(&mut self, args: &[&[u8]], now_ms: u64) -> Result<ServerReply, ServerReply> {
        let mut with_scores = false;
        for option in &args[4..] {
            if is(option, "WITHSCORES") {
                with_scores = true;
            } else if ["BYSCORE", "BYLEX", "REV", "LIMIT"]
                .iter()
                .any(|o| is(option, o))
            {
                return Err(unsupported("ZRANGE", option));
            } else {
                return Err(ServerReply::err("syntax error"));
            }
        }
        let (start, stop) = (integer(args[2])?, integer(args[3])?);
        let Some(set) = self.zset(args[1], now_ms)? else {
            return Ok(ServerReply::Array(Vec::new()));
        };
        let mut ranked: Vec<(&Vec<u8>, f64)> = set.iter().map(|(m, s)| (m, *s)).collect();
        ranked.sort_by(|(a, x), (b, y)| x.total_cmp(y).then_with(|| a.cmp(b)));
        let len = i64::try_from(ranked.len()).unwrap_or(i64::MAX);
        let from_end = |index: i64| if index < 0 { index + len } else { index };
        let (start, stop) = (from_end(start).max(0), from_end(stop).min(len - 1));
        if start > stop || start >= len {
            return Ok(ServerReply::Array(Vec::new()));
        }
        let (start, stop) = (start as usize, stop as usize);
        let mut items = Vec::new();
        for (member, score) in &ranked[start..=stop] {
            items.push(ServerReply::Bulk((*member).clone()));
            if with_scores {
                items.push(ServerReply::bulk(format_g17(*score)));
            }
        }
        Ok(ServerReply::Array(items))
    }

    fn zscore(
        &mut self,
        key: &[u8],
        member: &[u8],
        now_ms: u64,
    ) -> Result<ServerReply, ServerReply> {
        let score = self
            .zset(key, now_ms)?
            .and_then(|set| set.get(member).copied());
        Ok(score.map_or(ServerReply::Nil, |score| {
            ServerReply::bulk(format_g17(score))
        }))
    }

    fn zcard(&mut self, key: &[u8], now_ms: u64) -> Result<ServerReply, ServerReply> {
        let count = self.zset(key, now_ms)?.map_or(0, |set| set.len());
        Ok(counted(count))
    }

    /// The hash under `key` (`None`: no key); a key of another type is an error.
    fn hash(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut Fields>, ServerReply> {
        match self.entry(key, now_ms).map(|entry| &mut entry.data) {
            None => Ok(None),
            Some(Data::Hash(fields)) => Ok(Some(fields)),
            Some(_) => Err(ServerReply::wrong_type()),
        }
    }

    /// `HSET key field value [field value ...]`.
    fn hset(&mut self, args: &[&[u8]], now_ms: u64) -> Result<ServerReply, ServerReply> {
        if !args.len().is_multiple_of(2) {
            return Err(ServerReply::err(
                "wrong number of arguments for 'hset' command",
            ));
        }
        if self.hash(args[1], now_ms)?.is_none() {
            self.insert(args[1], Data::Hash(BTreeMap::new()), None);
        }
        let fields = self.hash(args[1], now_ms)?.expect("the hash was just made");
        let added = args[2..]
            .chunks(2)
            .filter(|pair| fields.insert(pair[0].to_vec(), pair[1].to_vec()).is_none())
            .count();
        Ok(counted(added))
    }

    fn hget(&mut self, key: &[u8], field: &[u8], now_ms: u64) -> Result<ServerReply, ServerReply> {
        let value = self
            .hash(key, now_ms)?
            .and_then(|fields| fields.get(field).cloned());
        Ok(value.map_or(ServerReply::Nil, ServerReply::Bulk))
    }

    /// `ZREM` (`sorted_set`) or `HDEL`: removes members or fields, and the key with the
    /// last one.
    fn remove_items(
        &mut self,
        key: &[u8],
        items: &[&[u8]],
        now_ms: u64,
        sorted_set: bool,
    ) -> Result<ServerReply, ServerReply> {
        let removed = match self.entry(key, now_ms).map(|entry| &mut entry.data) {
            None => 0,
            Some(Data::SortedSet(members)) if sorted_set => items
                .iter()
                .filter(|item| members.remove(**item).is_some())
                .count(),
            Some(Data::Hash(fields)) if !sorted_set => items
                .iter()
                .filter(|item| fields.remove(**item).is_some())
                .count(),
            Some(_) => return Err(ServerReply::wrong_type()),
        };
        self.drop_if_empty(key);
        Ok(counted(removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keys: &mut Keyspace, now_ms: u64, line: &str) -> ServerReply {
        let args: Vec<&str> = line.split(' ').collect();
        keys.execute(Duration::from_millis(now_ms), &args)
    }

    #[test]
    fn keys_expire_once_the_clock_passes_their_expiry() {
        let mut keys = Keyspace::new();
        assert_eq!(run(&mut keys, 100, "SET k v PX 5"), ServerReply::ok());
        assert_eq!(run(&mut keys, 100, "SET k w NX"), ServerReply::Nil);
        assert_eq!(run(&mut keys, 105, "PTTL k"), ServerReply::Integer(0));
        assert_eq!(run(&mut keys, 105, "GET k"), ServerReply::bulk("v"));
        assert_eq!(run(&mut keys, 106, "GET k"), ServerReply::Nil);
        assert_eq!(run(&mut keys, 106, "PTTL k"), ServerReply::Integer(-2));
        assert_eq!(run(&mut keys, 106, "SET k v XX"), ServerReply::Nil);
        assert_eq!(run(&mut keys, 106, "SET k v"), ServerReply::ok());
        assert_eq!(run(&mut keys, 106, "PTTL k"), ServerReply::Integer(-1));
        assert_eq!(run(&mut keys, 106, "PEXPIRE k 0"), ServerReply::Integer(1));
        assert_eq!(run(&mut keys, 106, "EXISTS k k"), ServerReply::Integer(0));
        let invalid = ServerReply::err("invalid expire time in 'set' command");
        assert_eq!(run(&mut keys, 106, "SET k v PX 0"), invalid);
        assert_eq!(run(&mut keys, 106, "SET k v PX 01"), not_an_integer());
        assert_eq!(
            run(&mut keys, 106, "SET k v NX XX"),
            ServerReply::err("syntax error")
        );
    }

    #[test]
    fn collections_check_their_type_and_vanish_when_empty() {
        let mut keys = Keyspace::new();
        assert_eq!(
            run(&mut keys, 0, "ZADD q 2 b 1 c 1 a"),
            ServerReply::Integer(3)
        );
        assert_eq!(run(&mut keys, 0, "ZADD q 0.5 b"), ServerReply::Integer(0));
        let ranked = run(&mut keys, 0, "ZRANGE q 0 -1 WITHSCORES");
        let expected: Vec<ServerReply> = ["b", "0.5", "a", "1", "c", "1"]
            .into_iter()
            .map(ServerReply::bulk)
            .collect();
        assert_eq!(ranked, ServerReply::Array(expected));
        assert_eq!(
            run(&mut keys, 0, "ZRANGE q 5 9"),
            ServerReply::Array(vec![])
        );
        assert_eq!(run(&mut keys, 0, "GET q"), ServerReply::wrong_type());
        assert_eq!(
            run(&mut keys, 0, "MGET q"),
            ServerReply::Array(vec![ServerReply::Nil])
        );
        assert_eq!(run(&mut keys, 0, "ZREM q a b c x"), ServerReply::Integer(3));
        assert_eq!(run(&mut keys, 0, "EXISTS q"), ServerReply::Integer(0));
        assert_eq!(run(&mut keys, 0, "HSET h f 1 g 2"), ServerReply::Integer(2));
        assert_eq!(run(&mut keys, 0, "ZCARD h"), ServerReply::wrong_type());
        assert_eq!(run(&mut keys, 0, "HDEL h f g"), ServerReply::Integer(2));
        assert!(keys.live_keys(Duration::ZERO).is_empty());
        assert_eq!(
            run(&mut keys, 0, "NOPE a"),
            ServerReply::err("unknown command 'NOPE', with args beginning with: 'a' ")
        );
        assert_eq!(
            run(&mut keys, 0, "GET"),
            ServerReply::err("wrong number of arguments for 'get' command")
        );
    }
}
