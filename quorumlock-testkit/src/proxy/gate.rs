//! The listener gate: the listening socket, opened and closed to new connections as
//! `refuse_new` changes (on Linux without giving up its port), and the accept loop that
//! hands each connection to the pump.

use std::future::pending;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
#[cfg(not(target_os = "linux"))]
use tokio::time::Instant;

use super::pump::serve;
use super::shared::{Listening, LiveEntry, Shared};

/// How long re-opening the listening port is retried before giving up (where
/// it has to be bound anew).
#[cfg(not(target_os = "linux"))]
const REBIND_BUDGET: Duration = Duration::from_secs(2);
/// The listening socket's backlog.
const LISTEN_BACKLOG: u32 = 1024;

/// Accepts connections while not refusing, closes and re-opens the listening
/// socket as `refuse_new` changes, and owns every connection task.
pub(super) async fn accept_loop(listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut gate = Gate::Open(listener);
    let mut faults = shared.faults.subscribe();
    let mut connections = JoinSet::new();
    loop {
        let refuse = faults.borrow_and_update().refuse_new;
        gate = match (refuse, gate) {
            (true, Gate::Open(listener)) => match close_gate(listener) {
                Ok(closed) => {
                    shared.listening.send_replace(Listening::Closed);
                    Gate::Closed(closed)
                }
                Err(err) => {
                    shared
                        .listening
                        .send_replace(Listening::Failed(err.to_string()));
                    Gate::Broken
                }
            },
            (false, Gate::Closed(closed)) => match open_gate(closed, addr).await {
                Ok(listener) => {
                    shared.listening.send_replace(Listening::Open);
                    Gate::Open(listener)
                }
                Err(err) => {
                    shared
                        .listening
                        .send_replace(Listening::Failed(err.to_string()));
                    Gate::Broken
                }
            },
            (_, gate) => gate,
        };
        tokio::select! {
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = gate.accept() => match accepted {
                Ok(client) => {
                    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                    let born = {
                        let current = shared.faults.borrow();
                        (current.reset_epoch, current.close_epoch)
                    };
                    shared.live().insert(id, born);
                    shared.accepted.fetch_add(1, Ordering::SeqCst);
                    let live = LiveEntry { shared: Arc::clone(&shared), id };
                    connections.spawn(serve(client, Arc::clone(&shared), born, live));
                }
                // Out of file descriptors and the like: do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The listening socket, open or closed to new connections.
enum Gate {
    /// Accepting.
    Open(TcpListener),
    /// Refusing: see [`close_gate`].
    Closed(ClosedGate),
    /// Closing or re-opening failed (reported through `Listening::Failed`).
    Broken,
}

impl Gate {
    async fn accept(&self) -> io::Result<TcpStream> {
        match self {
            Gate::Open(listener) => listener.accept().await.map(|(stream, _)| stream),
            Gate::Closed(_) | Gate::Broken => pending().await,
        }
    }
}

/// On Linux, a listening socket taken out of the reactor and out of the
/// listening state but still bound, so that no other socket can take its port
/// while connections are refused.
#[cfg(target_os = "linux")]
type ClosedGate = std::net::TcpListener;

/// Elsewhere, nothing: the listening socket is closed, and bound again later.
#[cfg(not(target_os = "linux"))]
type ClosedGate = ();

/// A listening socket on a free port of 127.0.0.1.
///
/// On Linux it is bound to an explicit port with `SO_REUSEPORT` and without
/// `SO_REUSEADDR`: the explicit port survives [`close_gate`] (an automatically
/// chosen one would be released), `SO_REUSEPORT` lets it listen again while
/// its accepted connections are open, and no ordinary socket can bind the port
/// meanwhile.
#[cfg(target_os = "linux")]
pub(super) async fn bind_listener() -> io::Result<TcpListener> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseport(true)?;
        match socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            // Taken between the probe and the bind: try another port.
            Err(err) if err.kind() == io::ErrorKind::AddrInUse && attempt < 10 => {}
            Err(err) => return Err(err),
        }
    }
}

/// A listening socket on a free port of 127.0.0.1 (closed and bound anew to refuse).
#[cfg(not(target_os = "linux"))]
pub(super) async fn bind_listener() -> io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await
}

/// Stops accepting: new connections are refused, open ones are not affected.
///
/// On Linux, `connect(AF_UNSPEC)` on a listening socket takes it out of the
/// listening state without unbinding it. It is taken out of the reactor first:
/// a socket in that state reports a hang-up, which the reactor would remember.
#[cfg(target_os = "linux")]
fn close_gate(listener: TcpListener) -> io::Result<ClosedGate> {
    use std::os::fd::AsRawFd;
    let listener = listener.into_std()?;
    // SAFETY: an all-zero `sockaddr` is a valid value of that plain C struct.
    let mut unspecified: libc::sockaddr = unsafe { std::mem::zeroed() };
    unspecified.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr>())
        .map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `listener`, which is alive, and the
    // address points to a valid `sockaddr` of `len` bytes.
    let rc = unsafe { libc::connect(listener.as_raw_fd(), &unspecified, len) };
    if rc == 0 {
        Ok(listener)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn close_gate(listener: TcpListener) -> io::Result<ClosedGate> {
    drop(listener);
    Ok(())
}

/// Accepts again: `listen` on the same, still bound, socket.
#[cfg(target_os = "linux")]
async fn open_gate(closed: ClosedGate, _addr: SocketAddr) -> io::Result<TcpListener> {
    use std::os::fd::AsRawFd;
    let backlog = libc::c_int::try_from(LISTEN_BACKLOG).map_err(io::Error::other)?;
    // SAFETY: the descriptor is owned by `closed`, which is alive.
    let rc = unsafe { libc::listen(closed.as_raw_fd(), backlog) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    TcpListener::from_std(closed)
}

/// Accepts again: binds the port anew, retrying briefly while it is still held.
#[cfg(not(target_os = "linux"))]
async fn open_gate(_closed: ClosedGate, addr: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + REBIND_BUDGET;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(err) if Instant::now() >= deadline => return Err(err),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
