//! The scripts' calls, and the names they share with the rest of the node.

use super::*;
use crate::node::releases::WAITER_CHANNEL_PREFIX;

fn args(call: &Cmd) -> Vec<String> {
    call.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "<not a plain argument>".to_owned(),
        })
        .collect()
}

#[test]
fn a_script_call_lists_the_keys_then_the_queue_and_markers_then_the_args() {
    let script = Arc::new(CachedScript::new(NodeScript::Unlock));
    script.cached.store(true, Ordering::Relaxed);
    let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
    let call = ScriptCall::new(&script, &keys, &[b"token", b"channel:"]).command();
    let expected = [
        "EVALSHA",
        script.name.sha1(),
        "8",
        "a",
        "b",
        "quorumlock:waiters:a",
        "quorumlock:waiter-deadlines:a",
        "quorumlock:waiters:b",
        "quorumlock:waiter-deadlines:b",
        "quorumlock:watched:a",
        "quorumlock:watched:b",
        "token",
        "channel:",
    ];
    assert_eq!(args(&call), expected);
}

#[test]
fn a_plain_script_call_has_only_the_lock_keys() {
    let script = Arc::new(CachedScript::new(NodeScript::Extend));
    script.cached.store(true, Ordering::Relaxed);
    let keys: Vec<Arc<str>> = vec!["only".into()];
    let call = ScriptCall::new(&script, &keys, &[b"token", b"30000"]).command();
    let expected = ["EVALSHA", script.name.sha1(), "1", "only", "token", "30000"];
    assert_eq!(args(&call), expected);
}

#[test]
fn a_script_the_node_may_not_have_is_sent_whole() {
    let script = Arc::new(CachedScript::new(NodeScript::Extend));
    let keys: Vec<Arc<str>> = vec!["only".into()];
    let call = ScriptCall::new(&script, &keys, &[b"token", b"30000"]).command();
    let expected = ["EVAL", EXTEND, "1", "only", "token", "30000"];
    assert_eq!(args(&call), expected);
}

#[test]
fn the_scripts_use_the_channels_the_listener_subscribes_to() {
    // The scripts that free a key announce it: queueing for several keys frees the
    // keys reserved for the waiter that it cannot use yet.
    for script in [UNLOCK, LEAVE_QUEUE, LOCK_QUEUED_MANY] {
        assert!(script.contains(&format!("\"{WAITER_CHANNEL_PREFIX}\" .. client")));
    }
}

#[test]
fn the_key_table_names_the_queue_prefixes() {
    let module_docs = include_str!("../scripts.rs");
    assert!(module_docs.contains(&format!("`{QUEUE_PREFIX}<key>`")));
    assert!(module_docs.contains(&format!("`{DEADLINES_PREFIX}<key>`")));
    assert!(module_docs.contains(&format!("`{WATCHED_PREFIX}<key>`")));
}

#[test]
fn the_watching_lock_takes_the_first_keys_marker_and_a_queued_one_its_queue() {
    let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
    let watching = Arc::new(CachedScript::new(NodeScript::LockWatching));
    let call = ScriptCall::new(&watching, &keys, &[b"t", b"1", b"2"]).command();
    assert_eq!(args(&call)[2..6], ["3", "a", "b", "quorumlock:watched:a"]);
    let queued = Arc::new(CachedScript::new(NodeScript::LockQueued));
    let call = ScriptCall::new(&queued, &keys[..1], &[b"t"]).command();
    assert_eq!(
        args(&call)[2..],
        [
            "3",
            "a",
            "quorumlock:waiters:a",
            "quorumlock:waiter-deadlines:a",
            "t"
        ]
    );
}

#[test]
fn the_scripts_are_listed_in_the_order_of_their_names() {
    let scripts = NodeScripts::new();
    for name in NodeScript::ALL {
        assert_eq!(scripts.get(name).name, name);
    }
}
