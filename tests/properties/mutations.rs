//! Deliberate defects, switched on by `QUORUMLOCK_MUTATION=<name>`, to show that a property
//! can fail: each is a copy of a node script with one change, or a defect of the simulated
//! client, applied to every simulated node of every run. Nothing here changes the library.
//!
//! ```sh
//! QUORUMLOCK_MUTATION=any-waiter-claims-a-reservation \
//!   cargo test --features test-util --test properties -- --exact a_reservation_is_only_claimed_by_its_waiter
//! ```
//!
//! The property named with each mutation must then fail (the others may too).

use quorumlock::protocol::NodeScript;
use quorumlock::sim::SimCluster;

/// The environment variable that names the mutation of a run.
pub const MUTATION_VAR: &str = "QUORUMLOCK_MUTATION";

/// One change to a node script: in `script`, `from` (which must occur) becomes `to`.
struct Patch {
    script: NodeScript,
    from: &'static str,
    to: &'static str,
}

/// Every mutation: its name, what it breaks, and how.
const MUTATIONS: &[(&str, &[Patch])] = &[
    // A queued attempt takes a key another client holds (only a reservation for another
    // waiter stops it): two holders. Caught by `fair_queue_never_has_two_holders`.
    (
        "queued-lock-takes-held-keys",
        &[Patch {
            script: NodeScript::LockQueued,
            from: "if (value and value ~= mine) or held_shared(KEYS[i]) then",
            to: "if (value and value ~= mine and string.sub(value, 1, #RESERVED) == RESERVED) \
                 or held_shared(KEYS[i]) then",
        }],
    ),
    // A queued attempt takes a key reserved for any waiter, not only for itself. Caught by
    // `a_reservation_is_only_claimed_by_its_waiter`.
    (
        "any-waiter-claims-a-reservation",
        &[Patch {
            script: NodeScript::LockQueued,
            from: "if (value and value ~= mine) or held_shared(KEYS[i]) then",
            to: "if (value and string.sub(value, 1, #RESERVED) ~= RESERVED) \
                 or held_shared(KEYS[i]) then",
        }],
    ),
    // A release reserves the key for twice as long as the waiter's place lasts, so a dead
    // waiter holds the line up past the bound. Caught by
    // `a_dead_waiter_stalls_the_line_at_most_its_place_lifetime`.
    (
        "reservation-outlives-the-place",
        &[Patch {
            script: NodeScript::Unlock,
            from: r#"redis.call("SET", key, RESERVED .. head, "PX", lapses - now)"#,
            to: r#"redis.call("SET", key, RESERVED .. head, "PX", 2 * (lapses - now))"#,
        }],
    ),
    // Leaving the queue leaves the waiter's place (and its deadline) behind. Caught by
    // `no_key_left_behind_after_a_dropped_acquire`.
    (
        "leave-queue-keeps-the-place",
        &[Patch {
            script: NodeScript::LeaveQueue,
            from: "    redis.call(\"ZREM\", queue, waiter)\n    redis.call(\"HDEL\", deadlines, waiter, GRANT .. waiter)\n",
            to: "",
        }],
    ),
    // The direct grant: a refresh that finds the key granted to an earlier place of its
    // waiter takes it in its own token but keeps the grant's older TTL, which the waiter's
    // validity, counted from the refresh, outlasts (the model check's `KeepsEarlierGrants`).
    // Caught by `fair_queue_never_has_two_holders`.
    (
        "grant-keeps-the-earlier-ttl",
        &[Patch {
            script: NodeScript::LockQueued,
            from: r#"redis.call("SET", KEYS[i], ARGV[1], "PX", tonumber(ARGV[2]))"#,
            to: r#"redis.call("SET", KEYS[i], ARGV[1], "PX", redis.call("PTTL", KEYS[i]))"#,
        }],
    ),
    // The direct grant: a release grants the key for half the waiter's TTL, so that the
    // key's life ends before the validity the waiter counts from its refresh (the grant's
    // validity counted from the wrong moment, seen from the node). Caught by
    // `fair_queue_never_has_two_holders`.
    (
        "grant-for-half-the-ttl",
        &[Patch {
            script: NodeScript::Unlock,
            from: r#"redis.call("SET", key, token, "PX", ttl)"#,
            to: r#"redis.call("SET", key, token, "PX", math.floor(ttl / 2))"#,
        }],
    ),
    // The direct grant: a waiter that leaves the line keeps a key granted to it (its leave
    // gives back only a reservation), so a grant to a waiter that left holds the key until
    // its TTL. Caught by `no_key_left_behind_after_a_dropped_acquire`.
    (
        "leave-keeps-a-grant",
        &[Patch {
            script: NodeScript::LeaveQueue,
            from: "if value == mine or granted then",
            to: "if value == mine then",
        }],
    ),
];

/// The mutation this run was asked for, if any (an unknown name is a mistake: it panics).
pub fn requested() -> Option<String> {
    let name = std::env::var(MUTATION_VAR).ok()?;
    let known = name == "no-script-reload" || MUTATIONS.iter().any(|(known, _)| *known == name);
    assert!(
        known,
        "{MUTATION_VAR}={name:?} names no mutation; known: no-script-reload, {}",
        MUTATIONS
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Some(name)
}

/// Applies the requested mutation, if any, to every node of `cluster`.
pub fn apply(cluster: &SimCluster) {
    let Some(name) = requested() else {
        return;
    };
    if name == "no-script-reload" {
        // The client sends each script call once: a release that meets a flushed script
        // cache fails. Caught by
        // `no_key_left_after_a_release_when_the_script_cache_was_lost`.
        for node in cluster.nodes() {
            node.break_script_reloads(true);
        }
        return;
    }
    let (_, patches) = MUTATIONS
        .iter()
        .find(|(known, _)| *known == name)
        .expect("a known mutation");
    for patch in *patches {
        let source = patch.script.source();
        assert!(
            source.contains(patch.from),
            "mutation {name}: {:?} does not occur in {:?}",
            patch.from,
            patch.script
        );
        let mutated = source.replace(patch.from, patch.to);
        for node in cluster.nodes() {
            node.substitute_script(patch.script, &mutated);
        }
    }
}
