//! [`ScriptHost`]: runs Redis Lua scripts over a [`Keyspace`] as Redis 7.0 runs them.
//! How their errors read is in `errors`.

mod errors;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::commands::{lookup, Unrunnable};
use super::keyspace::Keyspace;
use super::lua_values::{command_words, lua_to_reply, reply_to_lua};
use super::number::parse_integer;
use super::reply::ServerReply;

use self::errors::{error_handler, raised_by_call, raised_error, RaisedByCall, SCRIPT_CHUNK};

/// The Redis API and sandbox of the host, built once per Lua state (`sandbox.lua`: Lua,
/// to stay close to what it stands in for). It receives the host table, with `handler`,
/// the error handler, and `command_error`, which tells an error `redis.call` raised; it
/// leaves there `redis`, the table whose `call` and `pcall` the engine sets once, `env`,
/// the environment of every script, `globals`, what that environment reads (KEYS and ARGV
/// are set in it per call), and `run`, which calls a script under the handler.
const SANDBOX: &str = include_str!("sandbox.lua");

/// An in-memory Redis server for scripts: a [`Keyspace`] and a Lua 5.1 interpreter that
/// runs scripts on it as Redis 7.0 does.
///
/// A script runs atomically: nothing else touches the keyspace until it returns, and the
/// whole script sees one node-clock reading (`TIME` and every expiry), as Redis freezes
/// the time a script sees. As in Redis, an error stops the script but keeps the writes it
/// made before. `redis.call`, `redis.pcall`, `redis.error_reply` and `redis.status_reply`
/// behave as Redis's; globals are read-only and reading a missing one is an error; the
/// `string`, `math`, `table` and `coroutine` libraries are there, but not `cjson`,
/// `cmsgpack`, `struct` or `bit`. Errors carry Redis's ` script: <sha>, on
/// @user_script:<line>.` suffix.
///
/// Scripts are cached by SHA-1 as Redis caches them: [`eval`](Self::eval) and
/// [`load`](Self::load) cache one, [`evalsha`](Self::evalsha) runs a cached one or answers
/// `NOSCRIPT`, [`flush_scripts`](Self::flush_scripts) forgets them all (a restart does).
pub struct ScriptHost {
    /// The interpreter; `None` only while the host is being dropped.
    engine: Option<Engine>,
    /// The SHA-1s of the scripts this server has cached.
    scripts: HashSet<String>,
    /// Scripts run in place of others (see [`substitute`](ScriptHost::substitute)): the
    /// source that runs for each SHA-1 called.
    substitutes: HashMap<String, String>,
    keyspace: Keyspace,
}

/// A Lua state with the sandbox, and every script it compiled. A simulation makes
/// thousands of short-lived servers, and building the sandbox and compiling the scripts
/// cost more than running them, so a dropped host's engine is kept for the next host of
/// the thread ([`ENGINES`]). That is invisible to scripts: the sandbox's globals are
/// read-only and each call sets KEYS, ARGV and `redis.call` afresh; which scripts a server
/// has cached is the host's own set, not the engine's.
struct Engine {
    lua: Lua,
    /// The table the sandbox lives in (see [`SANDBOX`]).
    host: Table,
    /// Compiled scripts by their SHA-1.
    compiled: HashMap<String, Function>,
    /// The SHA-1 of each source compiled, so that an `EVAL` of a known script is not
    /// hashed again.
    hashes: HashMap<String, String>,
}

/// How many idle engines a thread keeps.
const ENGINES_KEPT: usize = 16;

thread_local! {
    /// The idle engines of this thread, for the next hosts.
    static ENGINES: RefCell<Vec<Engine>> = const { RefCell::new(Vec::new()) };
}

impl Engine {
    /// An idle engine of this thread, or a new one.
    fn take() -> mlua::Result<Self> {
        match ENGINES.with(|engines| engines.borrow_mut().pop()) {
            Some(engine) => Ok(engine),
            None => Self::build(),
        }
    }

    fn build() -> mlua::Result<Self> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::new())?;
        let host = lua.create_table()?;
        host.raw_set("handler", lua.create_function(error_handler)?)?;
        let command_error = lua.create_function(|_, error: Value| {
            Ok(raised_by_call(&error).map(|raised| raised.0.clone()))
        })?;
        host.raw_set("command_error", command_error)?;
        lua.load(SANDBOX)
            .set_name("=quorumlock-script-host")
            .call::<()>(host.clone())?;
        // `redis.call` raises a command's error, `redis.pcall` returns it.
        let call =
            lua.create_function(|lua, args: MultiValue| match command_of_script(lua, args) {
                ServerReply::Error(message) => Err(mlua::Error::external(RaisedByCall(message))),
                reply => reply_to_lua(lua, &reply),
            })?;
        let pcall = lua.create_function(|lua, args: MultiValue| {
            reply_to_lua(lua, &command_of_script(lua, args))
        })?;
        let redis: Table = host.raw_get("redis")?;
        redis.raw_set("call", call)?;
        redis.raw_set("pcall", pcall)?;
        Ok(Engine {
            lua,
            host,
            compiled: HashMap::new(),
            hashes: HashMap::new(),
        })
    }

    /// The SHA-1 of `source`, compiled (or the compile error as a reply).
    fn compile(&mut self, source: &str) -> Result<String, ServerReply> {
        if let Some(sha) = self.hashes.get(source) {
            return Ok(sha.clone());
        }
        let sha = redis::Script::new(source).get_hash().to_owned();
        let compiled = self
            .host
            .raw_get::<Table>("env")
            .and_then(|env| {
                self.lua
                    .load(source)
                    .set_name(SCRIPT_CHUNK)
                    .set_environment(env)
                    .into_function()
            })
            .map_err(|error| {
                let message = match error {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                ServerReply::err(format!("Error compiling script (new function): {message}"))
            })?;
        self.compiled.insert(sha.clone(), compiled);
        self.hashes.insert(source.to_owned(), sha.clone());
        Ok(sha)
    }
}

impl Drop for ScriptHost {
    fn drop(&mut self) {
        if let Some(engine) = self.engine.take() {
            // Gone with the thread's end: nothing to keep it for then.
            let _ = ENGINES.try_with(|engines| {
                let mut engines = engines.borrow_mut();
                if engines.len() < ENGINES_KEPT {
                    engines.push(engine);
                }
            });
        }
    }
}

impl ScriptHost {
    /// A server with an empty keyspace and no cached scripts.
    pub fn new() -> Self {
        ScriptHost {
            engine: Some(Engine::take().expect("the script host's Lua sandbox builds")),
            scripts: HashSet::new(),
            substitutes: HashMap::new(),
            keyspace: Keyspace::new(),
        }
    }

    /// Runs `source` whenever the script `sha` is called (by `EVALSHA`, or `EVAL` of the
    /// script whose hash it is), as long as `sha` is cached: a deliberately changed script,
    /// for showing that a test catches the change. Errors then name the substitute's hash.
    pub fn substitute(&mut self, sha: &str, source: &str) {
        self.substitutes
            .insert(sha.to_ascii_lowercase(), source.to_owned());
    }

    fn engine(&mut self) -> &mut Engine {
        self.engine
            .as_mut()
            .expect("a host has its engine until dropped")
    }

    /// The keyspace the scripts run on.
    pub fn keyspace(&self) -> &Keyspace {
        &self.keyspace
    }

    /// The keyspace, to inspect it or change it outside a script.
    pub fn keyspace_mut(&mut self) -> &mut Keyspace {
        &mut self.keyspace
    }

    /// Forgets every cached script (`SCRIPT FLUSH`; a restart loses them too).
    pub fn flush_scripts(&mut self) {
        self.scripts.clear();
    }

    /// Runs one command line at the node-clock reading `now`: `EVAL`, `EVALSHA`, `SCRIPT
    /// LOAD|EXISTS|FLUSH`, or any command of the [`Keyspace`].
    pub fn execute<A: AsRef<[u8]>>(&mut self, now: Duration, args: &[A]) -> ServerReply {
        let words: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        let name = words.first().copied().unwrap_or_default();
        if name.eq_ignore_ascii_case(b"EVAL") || name.eq_ignore_ascii_case(b"EVALSHA") {
            return self.execute_eval(now, &words);
        }
        if name.eq_ignore_ascii_case(b"SCRIPT") {
            return self.execute_script_command(&words);
        }
        self.keyspace.execute(now, args)
    }

    fn execute_eval(&mut self, now: Duration, words: &[&[u8]]) -> ServerReply {
        let command = String::from_utf8_lossy(words[0]).to_ascii_lowercase();
        if words.len() < 3 {
            return ServerReply::err(format!("wrong number of arguments for '{command}' command"));
        }
        let Some(count) = parse_integer(words[2]) else {
            return ServerReply::err("value is not an integer or out of range");
        };
        let rest = &words[3..];
        let Ok(count) = usize::try_from(count) else {
            return ServerReply::err("Number of keys can't be negative");
        };
        if count > rest.len() {
            return ServerReply::err("Number of keys can't be greater than number of args");
        }
        let (keys, argv) = rest.split_at(count);
        if command == "eval" {
            self.eval(now, &String::from_utf8_lossy(words[1]), keys, argv)
        } else {
            self.evalsha(now, &String::from_utf8_lossy(words[1]), keys, argv)
        }
    }

    fn execute_script_command(&mut self, words: &[&[u8]]) -> ServerReply {
        let sub = words.get(1).copied().unwrap_or_default();
        match words.len() {
            3 if sub.eq_ignore_ascii_case(b"LOAD") => self.load(&String::from_utf8_lossy(words[2])),
            2 if sub.eq_ignore_ascii_case(b"FLUSH") => {
                self.flush_scripts();
                ServerReply::ok()
            }
            n if n >= 3 && sub.eq_ignore_ascii_case(b"EXISTS") => ServerReply::Array(
                words[2..]
                    .iter()
                    .map(|sha| {
                        let cached = self.scripts.contains(&lowercase(sha));
                        ServerReply::Integer(i64::from(cached))
                    })
                    .collect(),
            ),
            _ => ServerReply::err(format!(
                "the simulated server does not implement SCRIPT {}",
                String::from_utf8_lossy(sub)
            )),
        }
    }

    /// Compiles `source` and caches it (`SCRIPT LOAD`): its SHA-1 as a bulk string, or the
    /// compile error.
    pub fn load(&mut self, source: &str) -> ServerReply {
        match self.compile(source) {
            Ok(sha) => ServerReply::bulk(sha),
            Err(error) => error,
        }
    }

    fn compile(&mut self, source: &str) -> Result<String, ServerReply> {
        let sha = self.engine().compile(source)?;
        self.scripts.insert(sha.clone());
        Ok(sha)
    }

    /// Runs `source` with `keys` and `argv` at `now` (`EVAL`), caching it.
    pub fn eval<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        now: Duration,
        source: &str,
        keys: &[K],
        argv: &[V],
    ) -> ServerReply {
        match self.compile(source) {
            Ok(sha) => self.evalsha(now, &sha, keys, argv),
            Err(error) => error,
        }
    }

    /// Runs the cached script `sha` (`EVALSHA`), or answers `NOSCRIPT`.
    pub fn evalsha<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        now: Duration,
        sha: &str,
        keys: &[K],
        argv: &[V],
    ) -> ServerReply {
        let mut sha = lowercase(sha.as_bytes());
        if !self.scripts.contains(&sha) {
            return ServerReply::Error("NOSCRIPT No matching script. Please use EVAL.".into());
        }
        if let Some(source) = self.substitutes.get(&sha).cloned() {
            match self.engine().compile(&source) {
                Ok(substitute) => sha = substitute,
                Err(error) => return error,
            }
        }
        let Some(script) = self.engine().compiled.get(&sha).cloned() else {
            return ServerReply::err("the script host lost a compiled script");
        };
        self.invoke(now, &sha, &script, keys, argv)
            .unwrap_or_else(|error| ServerReply::err(format!("the script host failed: {error}")))
    }

    /// One invocation: KEYS and ARGV set, `redis.call` bound to the keyspace at `now` for
    /// the duration of the script, its result (or error) turned into the reply.
    fn invoke<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        now: Duration,
        sha: &str,
        script: &Function,
        keys: &[K],
        argv: &[V],
    ) -> mlua::Result<ServerReply> {
        let ScriptHost {
            engine, keyspace, ..
        } = self;
        let Engine { lua, host, .. } = engine
            .as_mut()
            .expect("a host has its engine until dropped");
        // The keyspace is lent to the Lua state for the script's `redis.call`s.
        lua.set_app_data(Invocation {
            keyspace: std::mem::take(keyspace),
            now,
        });
        let outcome = (|| {
            let globals: Table = host.raw_get("globals")?;
            globals.raw_set("KEYS", lua.create_sequence_from(strings(lua, keys)?)?)?;
            globals.raw_set("ARGV", lua.create_sequence_from(strings(lua, argv)?)?)?;
            let run: Function = host.raw_get("run")?;
            let outcome: MultiValue = run.call(script.clone())?;
            let mut outcome = outcome.into_iter();
            let ok = matches!(outcome.next(), Some(Value::Boolean(true)));
            let value = outcome.next().unwrap_or(Value::Nil);
            if ok {
                lua_to_reply(&value)
            } else {
                raised_error(sha, &value)
            }
        })();
        if let Some(invocation) = lua.remove_app_data::<Invocation>() {
            *keyspace = invocation.keyspace;
        }
        outcome
    }
}

/// What the `redis.call`s of the script running work on: the server's keyspace, lent to
/// the Lua state for the invocation, and the clock reading the whole script sees.
struct Invocation {
    keyspace: Keyspace,
    now: Duration,
}

/// Runs the command a script called, on the keyspace of the invocation under way.
fn command_of_script(lua: &Lua, args: MultiValue) -> ServerReply {
    let words = match command_words(args) {
        Ok(words) => words,
        Err(error) => return error,
    };
    match lua.app_data_mut::<Invocation>() {
        Some(mut invocation) => {
            let now = invocation.now;
            run_from_script(&mut invocation.keyspace, now, &words)
        }
        None => ServerReply::err("redis.call outside a script"),
    }
}

/// A command called from a script: Redis answers unknown commands and wrong arities with
/// errors of its own there.
fn run_from_script(keyspace: &mut Keyspace, now: Duration, words: &[Vec<u8>]) -> ServerReply {
    match lookup(words) {
        Ok(command) => {
            let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            keyspace.run(command, now, &words)
        }
        Err(Unrunnable::Unknown) => ServerReply::err("Unknown Redis command called from script"),
        Err(Unrunnable::WrongArity(_)) => {
            ServerReply::err("Wrong number of args calling Redis command from script")
        }
    }
}

fn strings<A: AsRef<[u8]>>(lua: &Lua, items: &[A]) -> mlua::Result<Vec<mlua::LuaString>> {
    items.iter().map(|item| lua.create_string(item)).collect()
}

fn lowercase(sha: &[u8]) -> String {
    String::from_utf8_lossy(sha).to_ascii_lowercase()
}

impl Default for ScriptHost {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ScriptHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptHost")
            .field("scripts", &self.scripts.len())
            .field("keyspace", &self.keyspace)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
