//! Free loopback ports for new nodes.

use crate::error::Result;

/// A port that was free a moment ago. Another process may take it before
/// redis binds it; callers detect that and retry.
pub(crate) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// `n` distinct ports that were free a moment ago (see [`free_port`]): all
/// probe listeners are held at once, and released just before returning.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let ports = listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(ports)
}

/// The highest port a cluster node may use: its cluster bus listens 10000 ports higher.
const MAX_CLUSTER_PORT: u16 = 55535;

/// A port for a cluster-enabled node: free a moment ago, at most [`MAX_CLUSTER_PORT`], with
/// its cluster bus port free too.
pub(crate) fn free_cluster_port() -> Result<u16> {
    use rand::Rng;
    for _ in 0..256 {
        let port = rand::rng().random_range(20_000..=MAX_CLUSTER_PORT);
        let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no free port pair (port, port + 10000) for a cluster node",
    )
    .into())
}
