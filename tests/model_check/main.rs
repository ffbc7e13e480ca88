//! An exhaustive model check of the lock protocol (`tests/model_check/protocol.rs`): every
//! interleaving, up to a depth, of 3 nodes and 2 clients (3 on demand) locking, queueing,
//! being handed reserved keys and claiming them, extending and releasing, with lost
//! replies, dropped requests, node crashes and restarts with and without data, and the
//! validities running out. It checks exclusion under the validity model and that fencing
//! tokens strictly increase, and that the checker does find the known violation once a
//! node restarts without its data inside the TTL. With [`Protocol::modes`], the clients
//! take one name in different modes (mutex, reader, permits of K in a slot) and the check
//! is that no two valid holders are in conflicting modes; the mutex's old rule (blind to
//! readers and permits) is a mutation the checker must catch.
//!
//! `QUORUMLOCK_MODEL_DEPTH` sets the depth of the checks (default [`CI_DEPTH`]), and
//! `QUORUMLOCK_MODEL_CLIENTS` the number of clients (default 2). Each check prints its
//! state counts and run time. `docs/testing-properties.md` ("The model check") states the
//! abstraction and the measured sizes.
//!
//! A plain `cargo test` runs the two quick checks (the hand-off path, and the checker
//! finding the known violation); the three searches of every run to the full depth take
//! tens of seconds each and are `#[ignore]`d there: `.ci/run` runs them as a step of their
//! own on every landing (`cargo test --test model_check -- --ignored`).

mod protocol;
mod requests;
mod rounds;

use std::time::Instant;

use protocol::{Action, Mode, Protocol, Restarts};
use stateright::{Checker, HasDiscoveries, Model};

/// The depth CI checks to: every run of up to this many steps.
const CI_DEPTH: usize = 12;

fn depth() -> usize {
    std::env::var("QUORUMLOCK_MODEL_DEPTH").map_or(CI_DEPTH, |value| {
        value
            .trim()
            .parse()
            .expect("QUORUMLOCK_MODEL_DEPTH is a whole number")
    })
}

fn clients() -> usize {
    std::env::var("QUORUMLOCK_MODEL_CLIENTS").map_or(2, |value| {
        value
            .trim()
            .parse()
            .expect("QUORUMLOCK_MODEL_CLIENTS is a whole number")
    })
}

/// Explores `model` breadth first, every run of up to `depth` steps, reporting what it
/// covered.
fn explore(
    name: &str,
    model: Protocol,
    depth: usize,
    finish: HasDiscoveries,
) -> impl Checker<Protocol> {
    let started = Instant::now();
    let checker = model
        .checker()
        .threads(2)
        // stateright's depth counts states, the first one as 1, and stops short of it.
        .target_max_depth(depth + 2)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    eprintln!(
        "{name}: depth {depth}, {} states ({} unique), in {:.1?}; found: {:?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed(),
        checker.discoveries().keys().collect::<Vec<_>>()
    );
    checker
}

/// The sizes every check starts from: 3 nodes, the clients of [`clients`], one crash,
/// lost requests and replies.
fn protocol(restarts: Restarts, fencing: bool, fair: bool) -> Protocol {
    Protocol {
        clients: clients(),
        attempts: if fair { 3 } else { 1 },
        crashes: 1,
        restarts,
        fencing,
        fair,
        lossy: true,
        modes: Vec::new(),
        mutex_ignores_holders: false,
    }
}

const EXCLUSION: &str = "exclusion: no two valid holders in conflicting modes";
const FENCING: &str = "fencing tokens strictly increase";
const SECOND_GRANT: &str = "a second grant after the first";
const CLAIM: &str = "a queued waiter claims a key reserved for it";

#[test]
#[ignore = "tens of seconds of exhaustive search: .ci/run runs it, `cargo test --test model_check -- --ignored`"]
fn exclusion_holds_for_fair_waiters_with_restarts_without_data_after_a_ttl() {
    let model = protocol(Restarts::EmptyAfterTtl, false, true);
    let checker = explore("exclusion", model, depth(), HasDiscoveries::All);
    checker.assert_no_discovery(EXCLUSION);
    checker.assert_any_discovery(SECOND_GRANT);
}

/// A node that is down and keeps its data differs from one whose requests are lost only
/// in the requests it holds back, so the crash budget goes to the checks that lose data.
#[test]
#[ignore = "tens of seconds of exhaustive search: .ci/run runs it, `cargo test --test model_check -- --ignored`"]
fn fencing_tokens_increase_on_nodes_that_keep_their_data() {
    let model = Protocol {
        crashes: 0,
        ..protocol(Restarts::KeepData, true, false)
    };
    let checker = explore(
        "fencing",
        model,
        depth() + FENCING_EXTRA,
        HasDiscoveries::All,
    );
    checker.assert_no_discovery(EXCLUSION);
    checker.assert_no_discovery(FENCING);
    checker.assert_any_discovery(SECOND_GRANT);
}

/// Minting a token takes a read round and a raise round (two steps each, to a quorum): two
/// grants need this many more steps than without fencing.
const FENCING_EXTRA: usize = 4;

/// The hand-off path is long (a holder, a waiter refused then queued, the release that
/// reserves the key, the claim): it is reached without faults, to the depth it needs.
#[test]
fn a_queued_waiter_is_handed_the_key_and_claims_it() {
    let model = Protocol {
        crashes: 0,
        lossy: false,
        ..protocol(Restarts::KeepData, false, true)
    };
    let wanted = [CLAIM].into_iter().collect();
    let checker = explore(
        "hand-off",
        model,
        depth().max(18),
        HasDiscoveries::AllOf(wanted),
    );
    checker.assert_no_discovery(EXCLUSION);
    let path = checker.assert_any_discovery(CLAIM);
    eprintln!(
        "hand-off in {} steps: {:?}",
        path.clone().into_actions().len(),
        path.into_actions()
    );
}

#[test]
fn the_checker_finds_overlap_after_a_restart_without_data_inside_the_ttl() {
    let model = Protocol {
        clients: 2,
        ..protocol(Restarts::EmptyAnytime, false, false)
    };
    counterexample("the known violation", model, depth(), EXCLUSION);
}

/// Counters lost with a restart after a TTL (when the lock keys are gone anyway) let a later
/// holder read a lower maximum. The shortest such run is 17 steps; it needs no lost reply.
#[test]
#[ignore = "tens of seconds of exhaustive search: .ci/run runs it, `cargo test --test model_check -- --ignored`"]
fn the_checker_finds_a_repeated_token_once_counters_are_lost() {
    let model = Protocol {
        clients: 2,
        lossy: false,
        ..protocol(Restarts::EmptyAfterTtl, true, false)
    };
    counterexample(
        "fencing without persistence",
        model,
        depth().max(17),
        FENCING,
    );
}

/// Checks `model` until `property` fails, and requires the counterexample to restart a node
/// without its data: the broken assumption.
fn counterexample(name: &str, model: Protocol, depth: usize, property: &'static str) {
    let checker = explore(name, model, depth, HasDiscoveries::AnyFailures);
    let actions = checker.assert_any_discovery(property).into_actions();
    assert!(
        actions
            .iter()
            .any(|action| matches!(action, Action::Restart(_, false))),
        "the counterexample restarts a node without its data: {actions:?}"
    );
    eprintln!("counterexample: {actions:?}");
}

/// Two clients of one name in each pair of modes that must not overlap (and, for the last
/// pair, two permits of one semaphore that may), with lost requests and replies, a crash,
/// and restarts without data after a TTL.
const MODE_PAIRS: [[Mode; 2]; 5] = [
    [Mode::Mutex, Mode::Read],
    [
        Mode::Mutex,
        Mode::Permit {
            permits: 2,
            slot: 0,
        },
    ],
    [
        Mode::Read,
        Mode::Permit {
            permits: 2,
            slot: 0,
        },
    ],
    [
        Mode::Permit {
            permits: 2,
            slot: 1,
        },
        Mode::Permit {
            permits: 3,
            slot: 2,
        },
    ],
    [
        Mode::Permit {
            permits: 2,
            slot: 0,
        },
        Mode::Permit {
            permits: 2,
            slot: 1,
        },
    ],
];

fn modes(pair: [Mode; 2], mutex_ignores_holders: bool) -> Protocol {
    Protocol {
        clients: 2,
        modes: pair.to_vec(),
        mutex_ignores_holders,
        ..protocol(Restarts::EmptyAfterTtl, false, false)
    }
}

#[test]
#[ignore = "minutes of exhaustive search: .ci/run runs it, `cargo test --test model_check -- --ignored`"]
fn the_modes_of_one_name_never_overlap() {
    for pair in MODE_PAIRS {
        let checker = explore(
            &format!("{pair:?}"),
            modes(pair, false),
            depth(),
            HasDiscoveries::All,
        );
        checker.assert_no_discovery(EXCLUSION);
        checker.assert_any_discovery(SECOND_GRANT);
    }
}

/// The old rule of the mutex (take the key whatever readers or permits are listed beside
/// it): the checker finds a mutex holder beside a reader, and beside a permit, with every
/// assumption kept.
#[test]
fn the_checker_finds_a_mutex_beside_readers_under_the_old_rule() {
    for pair in &MODE_PAIRS[..2] {
        let model = Protocol {
            crashes: 0,
            lossy: false,
            restarts: Restarts::KeepData,
            ..modes(*pair, true)
        };
        let checker = explore(
            "the old mutex rule",
            model,
            depth(),
            HasDiscoveries::AnyFailures,
        );
        let actions = checker.assert_any_discovery(EXCLUSION).into_actions();
        eprintln!("counterexample: {actions:?}");
    }
}
