//! The host against what redis-server 7.0 answered to the same scripts.

use super::*;

const NOW: Duration = Duration::from_secs(1_796_121_222);

fn eval(host: &mut ScriptHost, source: &str) -> ServerReply {
    host.eval(NOW, source, &["k"], &["v"])
}

fn suffixed(message: &str, source: &str, line: usize) -> ServerReply {
    let sha = redis::Script::new(source).get_hash().to_owned();
    ServerReply::Error(format!("{message} script: {sha}, on @user_script:{line}."))
}

// Every expectation below is what redis-server 7.0 answered to the same script.

#[test]
fn lua_values_become_replies_as_redis_converts_them() {
    let mut host = ScriptHost::new();
    let bulk = ServerReply::bulk;
    assert_eq!(eval(&mut host, "return 3.9"), ServerReply::Integer(3));
    assert_eq!(eval(&mut host, "return -3.9"), ServerReply::Integer(-3));
    assert_eq!(
        eval(&mut host, "return 1e300"),
        ServerReply::Integer(i64::MIN)
    );
    assert_eq!(
        eval(&mut host, "return {1, {ok='x'}, {err='y'}, true, false}"),
        ServerReply::Array(vec![
            ServerReply::Integer(1),
            ServerReply::Status("x".into()),
            ServerReply::Error("y".into()),
            ServerReply::Integer(1),
            ServerReply::Nil,
        ])
    );
    let nested = eval(&mut host, "return {1, 2, {3, nil, 5}}");
    let three = ServerReply::Array(vec![ServerReply::Integer(3)]);
    let one_two = [ServerReply::Integer(1), ServerReply::Integer(2)];
    assert_eq!(
        nested,
        ServerReply::Array([&one_two[..], &[three]].concat())
    );
    assert_eq!(
        eval(&mut host, "return {err=5}"),
        ServerReply::Array(vec![])
    );
    assert_eq!(eval(&mut host, "return {double=3.5}"), bulk("3.5"));
    assert_eq!(eval(&mut host, "return KEYS[1] .. ARGV[1]"), bulk("kv"));
    let status = eval(&mut host, "return redis.status_reply('a\\r\\nb')");
    assert_eq!(status, ServerReply::Status("a  b".into()));
    let errors = [
        ("return redis.error_reply('boom')", "ERR boom"),
        ("return redis.error_reply('MY boom')", "MY boom"),
        ("return redis.error_reply('-X')", "ERR X"),
        (
            "return redis.error_reply(5)",
            "ERR wrong number or type of arguments",
        ),
        ("return {err='boom'}", "boom"),
    ];
    for (source, error) in errors {
        assert_eq!(eval(&mut host, source), ServerReply::Error(error.into()));
    }
}

#[test]
fn command_errors_raise_in_call_and_return_in_pcall() {
    let mut host = ScriptHost::new();
    assert_eq!(host.execute(NOW, &["SET", "k", "x"]), ServerReply::ok());
    let wrong_type = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let source = "local n = 1\nreturn redis.call('ZADD', KEYS[1], n, 'a')";
    assert_eq!(eval(&mut host, source), suffixed(wrong_type, source, 2));
    let caught = "local t = redis.pcall('ZADD', KEYS[1], 1, 'a'); return t['err']";
    assert_eq!(eval(&mut host, caught), ServerReply::bulk(wrong_type));
    let lua_pcall = "local ok, e = pcall(redis.call, 'ZADD', KEYS[1], 1, 'a'); return e";
    assert_eq!(eval(&mut host, lua_pcall), ServerReply::bulk(wrong_type));
    let cases = [
        (
            "return redis.call('NOSUCH')",
            "ERR Unknown Redis command called from script",
        ),
        (
            "return redis.call('GET')",
            "ERR Wrong number of args calling Redis command from script",
        ),
        (
            "return redis.call('SET', 'a', {})",
            "ERR Lua redis lib command arguments must be strings or integers",
        ),
        (
            "return redis.call()",
            "ERR Please specify at least one argument for this redis lib call",
        ),
        (
            "x = 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "string.x = 1",
            "ERR user_script:1: Attempt to modify a readonly table",
        ),
        (
            "return y",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'y'",
        ),
        ("error('plain')", "ERR user_script:1: plain"),
        ("error({err='tbl'})", "tbl"),
    ];
    for (source, error) in cases {
        assert_eq!(
            eval(&mut host, source),
            suffixed(error, source, 1),
            "{source}"
        );
    }
    // An error stops the script, and keeps what it wrote before.
    let partial = "redis.call('SET', 'w', '1')\nredis.call('ZADD', KEYS[1], 1, 'a')";
    assert!(eval(&mut host, partial).is_error());
    assert_eq!(host.execute(NOW, &["GET", "w"]), ServerReply::bulk("1"));
}

#[test]
fn numbers_reach_commands_in_g17_and_time_is_the_callers() {
    let mut host = ScriptHost::new();
    for (number, stored) in [
        ("1.5", "1.5"),
        ("1e20", "1e+20"),
        ("0.1", "0.10000000000000001"),
    ] {
        let source = format!("return redis.call('SET', 'n', {number})");
        assert_eq!(
            host.eval(NOW, &source, &[] as &[&str], &[] as &[&str]),
            ServerReply::ok()
        );
        assert_eq!(host.execute(NOW, &["GET", "n"]), ServerReply::bulk(stored));
    }
    let now = Duration::from_micros(5_000_123);
    let time = host.eval(
        now,
        "return redis.call('TIME')",
        &[] as &[&str],
        &[] as &[&str],
    );
    let expected = [ServerReply::bulk("5"), ServerReply::bulk("123")];
    assert_eq!(time, ServerReply::Array(expected.to_vec()));
}

#[test]
fn scripts_are_cached_by_sha_until_flushed() {
    let mut host = ScriptHost::new();
    let source = "return ARGV[1]";
    let sha = redis::Script::new(source).get_hash().to_owned();
    let missing = host.execute(NOW, &["EVALSHA", &sha, "0", "x"]);
    assert_eq!(missing.error_code(), Some("NOSCRIPT"));
    assert_eq!(
        host.execute(NOW, &["SCRIPT", "LOAD", source]),
        ServerReply::bulk(sha.clone())
    );
    let upper = sha.to_ascii_uppercase();
    assert_eq!(
        host.execute(NOW, &["EVALSHA", &upper, "0", "x"]),
        ServerReply::bulk("x")
    );
    assert_eq!(host.execute(NOW, &["SCRIPT", "FLUSH"]), ServerReply::ok());
    let exists = host.execute(NOW, &["SCRIPT", "EXISTS", &sha]);
    assert_eq!(exists, ServerReply::Array(vec![ServerReply::Integer(0)]));
    let cases = [
        (
            vec!["EVAL", "return +", "0"],
            "ERR Error compiling script (new function): user_script:1: unexpected symbol near '+'",
        ),
        (
            vec!["EVAL", "return 1", "2", "a"],
            "ERR Number of keys can't be greater than number of args",
        ),
        (
            vec!["EVAL", "return 1", "-1"],
            "ERR Number of keys can't be negative",
        ),
        (
            vec!["EVAL", "return 1", "x"],
            "ERR value is not an integer or out of range",
        ),
    ];
    for (line, error) in cases {
        assert_eq!(
            host.execute(NOW, &line),
            ServerReply::Error(error.into()),
            "{line:?}"
        );
    }
}
