//! Property tests on the deterministic simulated cluster, in one binary: the mutex's
//! safety invariants ([`mutex`], and the fair queue's in [`fair`]), cohorts ([`cohort`])
//! and the lock family ([`family_properties`]), over one harness, one schedule generator
//! and one runner. See `docs/testing-properties.md` for what each checks and for the
//! budgets (`QUORUMLOCK_PROPTEST_CASES`, the seed).

#![cfg(feature = "test-util")]

mod checks;
mod cohort;
mod fair;
mod family;
mod family_properties;
mod harness;
mod mutations;
mod mutex;
mod queue_checks;
mod runner;
mod schedule;
