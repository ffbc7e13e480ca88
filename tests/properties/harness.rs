//! Running a property: the case count, the seed, failure persistence, and a failure report
//! that says how to replay it.

use std::fmt::Debug;

use proptest::strategy::Strategy;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, RngSeed, TestCaseError, TestError, TestRng,
    TestRunner,
};

/// The environment variable that sets the number of cases per property.
pub const CASES_VAR: &str = "QUORUMLOCK_PROPTEST_CASES";
/// The number of cases per property when [`CASES_VAR`] is not set: the quick budget of a
/// plain `cargo test`, a few seconds for the whole file. `.ci/run` runs the deep budget,
/// [`DEEP_CASES`], as a step of its own.
pub const QUICK_CASES: u32 = 64;
/// The deep budget `.ci/run` sets: the number of cases every property ran before the quick
/// budget existed.
pub const DEEP_CASES: u32 = 1_000;
/// How many schedules a negative search (a checker shown able to fail) may try. A search
/// uses a fixed seed and stops at its first find, so its cost does not depend on the
/// budget: this bound only has to cover where the find is.
pub const SEARCH_CASES: u32 = 1_000;
/// Proptest's own variable for the seed of a run.
pub const SEED_VAR: &str = "PROPTEST_RNG_SEED";
/// The seed of a run when [`SEED_VAR`] is not set: every plain `cargo test` checks the same
/// schedules, so that a failure replays and a pass means the same every time. `.ci/run`'s
/// deep step derives its seed from the commit, so that each landing explores new schedules
/// while any run of one commit replays exactly.
pub const DEFAULT_SEED: u64 = 20_261_202;

/// The number of cases per property: `$QUORUMLOCK_PROPTEST_CASES`, else [`QUICK_CASES`].
pub fn cases() -> u32 {
    match std::env::var(CASES_VAR) {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            panic!("{CASES_VAR} must be a positive whole number, got {value:?}")
        }),
        Err(_) => QUICK_CASES,
    }
}

/// How many shrinking steps a failure may take: `$PROPTEST_MAX_SHRINK_ITERS`, else 20,000.
fn shrink_iters() -> u32 {
    std::env::var("PROPTEST_MAX_SHRINK_ITERS")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(20_000)
}

/// The seed of this run: `$PROPTEST_RNG_SEED`, else [`DEFAULT_SEED`].
fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR} must be a u64, got {value:?}")),
        Err(_) => DEFAULT_SEED,
    }
}

/// Checks `property` on `cases()` schedules from `strategy`; on failure, panics with the
/// shrunk minimal input, the reason, the seed and the command that replays it. The failing
/// case is also saved under `tests/properties/regressions/` and tried first by later runs.
pub fn check<S>(
    name: &str,
    module: &str,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), String>,
) where
    S: Strategy,
    S::Value: Debug + std::fmt::Display,
{
    check_cases(name, module, cases(), strategy, property);
}

/// [`check`] on `cases` schedules: for a property whose schedules cost many times the
/// others', so that it runs a share of [`cases()`].
pub fn check_cases<S>(
    name: &str,
    module: &str,
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), String>,
) where
    S: Strategy,
    S::Value: Debug + std::fmt::Display,
{
    let seed = seed();
    // The test's path as the test runner names it: the module path without the crate.
    let test = match module.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    };
    let path: &'static str =
        Box::leak(format!("tests/properties/regressions/{name}.txt").into_boxed_str());
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(path))),
        rng_seed: RngSeed::Fixed(seed),
        // Schedules shrink fast; bound the worst case anyway (`PROPTEST_MAX_SHRINK_ITERS`
        // bounds it further, for a quick look at a failure).
        max_shrink_iters: shrink_iters(),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&strategy, |value| {
        property(value).map_err(TestCaseError::fail)
    });
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, minimal)) => panic!(
            "property `{name}` failed: {reason}\n\
             minimal failing schedule:\n{minimal}\n{minimal:#?}\n\
             seed: {seed}\n\
             replay: {SEED_VAR}={seed} {CASES_VAR}={cases} \
             cargo test --features test-util --test properties -- --exact {test}\n\
             (the failing case is also saved in {path} and is tried first on the next run)"
        ),
        Err(TestError::Abort(reason)) => {
            panic!("property `{name}` aborted: {reason} (seed {seed})")
        }
    }
}

/// A property test: `fn name, strategy, property` becomes the test `name`, which
/// [`check`]s `property` on values of `strategy` under its own name, so that the name is
/// written once for the test, its regressions file and its replay command.
macro_rules! property {
    ($(#[$doc:meta])* fn $name:ident, $strategy:expr, $property:expr $(,)?) => {
        $(#[$doc])*
        #[test]
        fn $name() {
            $crate::harness::check(stringify!($name), module_path!(), $strategy, $property);
        }
    };
}
pub(crate) use property;

/// Searches `strategy` with a fixed seed for a value on which `property` fails, up to
/// `cases` values, and returns the shrunk minimal one with the reason; `None` if none
/// failed. Used to show that the checker can fail.
pub fn search<S>(
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), String>,
) -> Option<(String, S::Value)>
where
    S: Strategy,
    S::Value: Debug,
{
    // The failure itself is what is searched for; a few hundred shrinking steps make its
    // example readable, and each costs a whole run.
    search_shrinking(cases, 300, strategy, property)
}

/// [`search`], shrinking a failing value at most `shrink_iters` times: for schedules too
/// costly to shrink to the minimal one, where any failing one shows the checker can fail.
pub fn search_shrinking<S>(
    cases: u32,
    shrink_iters: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), String>,
) -> Option<(String, S::Value)>
where
    S: Strategy,
    S::Value: Debug,
{
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: shrink_iters,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    match runner.run(&strategy, |value| {
        property(value).map_err(TestCaseError::fail)
    }) {
        Ok(()) => None,
        Err(TestError::Fail(reason, minimal)) => Some((reason.to_string(), minimal)),
        Err(TestError::Abort(reason)) => panic!("search aborted: {reason}"),
    }
}
