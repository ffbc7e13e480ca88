//! Free loopback ports for new nodes.
//!
//! Each port is handed out once per process. Tests of one binary run side by side, and a
//! node one of them killed leaves its port free: another test's new node on that port
//! would answer the first test's clients, which still hold its address (a cluster client's
//! slot map, a lock's node list), and its grants would be another server's. Never reusing
//! a port within the process keeps every test's servers its own.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;

/// Every port handed out by this process (cluster bus ports included).
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// How many ports the kernel offers before the search gives up.
const TRIES: usize = 256;

/// Records `ports` as handed out, if none of them was before; whether they were new.
fn claim(ports: &[u16]) -> bool {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    if ports.iter().any(|port| handed_out.contains(port)) {
        return false;
    }
    handed_out.extend(ports.iter().copied());
    true
}

fn exhausted(what: &str) -> crate::TestkitError {
    std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free {what} that this process has not handed out before"),
    )
    .into()
}

/// A port that was free a moment ago, never handed out before by this process. Another
/// process may take it before redis binds it; callers detect that and retry.
pub(crate) fn free_port() -> Result<u16> {
    for _ in 0..TRIES {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        if claim(&[port]) {
            return Ok(port);
        }
    }
    Err(exhausted("port"))
}

/// `n` distinct ports that were free a moment ago (see [`free_port`]): all probe
/// listeners are held at once, and released just before returning.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    for _ in 0..TRIES {
        let listeners = (0..n)
            .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let ports = listeners
            .iter()
            .map(|listener| listener.local_addr().map(|addr| addr.port()))
            .collect::<std::io::Result<Vec<_>>>()?;
        if claim(&ports) {
            return Ok(ports);
        }
    }
    Err(exhausted("set of ports"))
}

/// The highest port a cluster node may use: its cluster bus listens 10000 ports higher.
pub(crate) const MAX_CLUSTER_PORT: u16 = 55535;

/// The lowest port [`free_port_at_most`] draws: above the well-known and most registered
/// service ports.
const MIN_DRAWN_PORT: u16 = 20_000;

/// A port at most `max` (and at least 20000) whose listener `binds` accepts, with every
/// port `also(port)` names free too, none handed out before by this process. Drawn at
/// random: the kernel's own choice of a free port may lie above `max`.
fn free_port_drawn(max: u16, also: impl Fn(u16) -> Option<u16>) -> Result<u16> {
    use rand::Rng;
    for _ in 0..TRIES {
        let port = rand::rng().random_range(MIN_DRAWN_PORT..=max);
        let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        let ports: Vec<u16> = std::iter::once(port).chain(also(port)).collect();
        if ports.iter().all(|&port| free(port)) && claim(&ports) {
            return Ok(port);
        }
    }
    Err(exhausted(&format!("port at most {max}")))
}

/// A port that was free a moment ago, at most `max`, never handed out before by this
/// process (see [`free_port`]).
pub(crate) fn free_port_at_most(max: u16) -> Result<u16> {
    free_port_drawn(max, |_| None)
}

/// A port for a cluster-enabled node: free a moment ago, at most [`MAX_CLUSTER_PORT`], with
/// its cluster bus port free too, neither handed out before by this process.
pub(crate) fn free_cluster_port() -> Result<u16> {
    free_port_drawn(MAX_CLUSTER_PORT, |port| Some(port + 10_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_handed_out_once() {
        let first = free_ports(3).unwrap();
        let mut seen: HashSet<u16> = first.iter().copied().collect();
        for _ in 0..50 {
            let port = free_port().unwrap();
            assert!(seen.insert(port), "port {port} handed out twice");
        }
        let cluster = free_cluster_port().unwrap();
        assert!(cluster <= MAX_CLUSTER_PORT);
        assert!(seen.insert(cluster) && seen.insert(cluster + 10_000));
        let low = free_port_at_most(30_000).unwrap();
        assert!((MIN_DRAWN_PORT..=30_000).contains(&low) && seen.insert(low));
        assert!(!claim(&[first[0]]), "a claimed port claimed again");
    }
}
