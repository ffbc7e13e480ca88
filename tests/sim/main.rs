//! The lock logic on simulated nodes, under tokio's paused clock: the lock family, cohorts,
//! the hand-off and the fair queue, extension, several resources, the factory and the
//! acquire loop's rules. The nodes run the real Lua scripts (`quorumlock::sim`); time is
//! virtual, so a wait of seconds costs nothing and every run is the same. Order between
//! tasks is checked by polling them (`tokio_test`-style: `poll!`, `is_finished` after the
//! clock has moved), never by sleeping on a wall clock.
//!
//! What only a real server shows (the wire, the connection, pub/sub, TLS, ACL, Cluster,
//! Sentinel, faults of processes and networks) is in `tests/servers/`.

#![cfg(feature = "test-util")]

mod support;

mod cohort;
mod election;
mod extension;
mod factory;
mod fairness;
mod family_ttl;
mod fencing;
mod handoff;
mod lock_delay;
mod modes;
mod multi;
mod redlock;
mod rwlock;
mod semaphore;
mod session;
mod settings;
