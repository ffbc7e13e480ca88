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
