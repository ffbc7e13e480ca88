//! Tests of the test harness itself, on real redis-server processes: one test binary, a
//! module per part.
//!
//! - [`cluster`]: the nodes, their failure injection (kill, freeze, restart, slow) and
//!   their clean-up;
//! - [`proxy`]: the fault proxy, on raw RESP bytes (`cargo test -p quorumlock-testkit
//!   --test testkit proxy::`);
//! - [`postgres`]: the PostgreSQL server, started and stopped.

mod cluster;
mod postgres;
mod proxy;
