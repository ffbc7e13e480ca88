//! Property tests of cohorts (locks passed between tasks of one process) on the simulated
//! cluster; see `properties/cohort.rs`. They reuse the property harness (case count, seed,
//! regressions, replay) of `tests/properties.rs`.

#![cfg(feature = "test-util")]

#[path = "properties/cohort.rs"]
mod cohort;
// Its replay search is for the negative properties of tests/properties.rs.
#[allow(dead_code, unused_macros, unused_imports)]
#[path = "properties/harness.rs"]
mod harness;
