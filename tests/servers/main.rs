//! The tests on real redis-server processes, one module per subject: the wire, the scripts
//! on Redis, connections, identity, TLS, ACL users, Cluster and Sentinel members, server
//! compatibility, faults (chaos, oversell), fencing down to a PostgreSQL table, and what
//! only a real server shows. The testkit starts every node on a free loopback port (and
//! the PostgreSQL server likewise) and stops it when the test ends.
//!
//! One binary for all of them, so that the shared support ([`common`]) and the
//! dependencies are compiled and linked once.

mod common;

mod acl;
mod acl_user;
mod chaos;
mod clocks;
mod cohort;
mod compat;
mod connect;
mod delivery;
mod election;
mod fairness;
mod family_ttl;
mod fencing;
mod fencing_postgres;
mod frozen_node;
mod handoff;
mod healing;
mod identity;
mod lock_delay;
mod modes;
mod multi;
mod observability;
mod oversell;
mod redis_cluster;
mod redlock;
mod rwlock;
mod script_host;
mod semaphore;
mod sentinel;
mod session;
mod single_node;
mod tls;
