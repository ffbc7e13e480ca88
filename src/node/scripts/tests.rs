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
    let script = Arc::new(NodeScript::new(UNLOCK));
    script.cached.store(true, Ordering::Relaxed);
    let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
    let call = ScriptCall::new(&script, &keys, &["token", "channel:"])
        .with_queues_of(&keys)
        .with_markers_of(&keys)
        .command();
    let expected = [
        "EVALSHA",
        script.script.get_hash(),
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
    let script = Arc::new(NodeScript::new(EXTEND));
    script.cached.store(true, Ordering::Relaxed);
    let keys: Vec<Arc<str>> = vec!["only".into()];
    let call = ScriptCall::new(&script, &keys, &["token", "30000"]).command();
    let expected = [
        "EVALSHA",
        script.script.get_hash(),
        "1",
        "only",
        "token",
        "30000",
    ];
    assert_eq!(args(&call), expected);
}

#[test]
fn a_script_the_node_may_not_have_is_sent_whole() {
    let script = Arc::new(NodeScript::new(EXTEND));
    let keys: Vec<Arc<str>> = vec!["only".into()];
    let call = ScriptCall::new(&script, &keys, &["token", "30000"]).command();
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
