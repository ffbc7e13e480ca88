//! The pump: one accepted connection carried to the node and back, chunk by chunk, each
//! direction under the current faults, until it ends with a close or a reset.

use std::future::pending;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use super::rules::{remember_tail, Faults, ResetWhen, DOWN, UP};
use super::shared::{LiveEntry, Shared};

/// How long the proxy waits to connect to its upstream before resetting the client.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// For [`ResetWhen::AfterForwarding`]: how long to wait for the node's reply
/// before resetting anyway.
const REPLY_WAIT: Duration = Duration::from_secs(1);
/// Bytes read per chunk.
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction (read but not yet delivered) before reading pauses.
const QUEUE: usize = 256;

/// How a connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// A normal close on both sides.
    Close,
    /// A reset to the client; the node's side is reset too unless `graceful_upstream`.
    Reset { graceful_upstream: bool },
}

/// Per-connection state shared by its two directions.
#[derive(Default)]
struct Connection {
    /// The strand epoch the connection was born under.
    born_strand: u64,
    /// Set by an `AfterForwarding` rule: replies are no longer delivered.
    muted: AtomicBool,
    /// Signalled when a reply arrives while muted.
    answered: Notify,
}

/// Carries one accepted connection (`born` holds the reset and close epochs it was
/// accepted under) until it ends; `live` removes it from the live set when it does.
pub(super) async fn serve(
    client: TcpStream,
    shared: Arc<Shared>,
    born: (u64, u64),
    live: LiveEntry,
) {
    let _live = live;
    let upstream = match tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        TcpStream::connect(shared.upstream()),
    )
    .await
    {
        Ok(Ok(upstream)) => upstream,
        // The node is down or unreachable: the client sees its connection reset.
        _ => {
            abort(&client);
            shared.resets.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);

    let connection = Connection {
        born_strand: shared.faults.borrow().strand_epoch,
        ..Connection::default()
    };
    let end = tokio::select! {
        end = direction(&client, &upstream, UP, &shared, &connection) => end,
        end = direction(&upstream, &client, DOWN, &shared, &connection) => end,
        end = killed(shared.faults.subscribe(), born) => end,
    };
    if let End::Reset { graceful_upstream } = end {
        abort(&client);
        if !graceful_upstream {
            abort(&upstream);
        }
        shared.resets.fetch_add(1, Ordering::SeqCst);
    }
    // Dropping the streams closes them: a reset where SO_LINGER is 0, else a FIN.
}

/// Makes the next close of `stream` send a reset instead of a FIN.
fn abort(stream: &TcpStream) {
    // A zero linger never blocks; `set_zero_linger` is newer than the
    // minimum tokio this crate supports.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Resolves when `reset_all` or `close_all` was called after the connection was born.
async fn killed(mut faults: watch::Receiver<Faults>, born: (u64, u64)) -> End {
    let verdict = match faults
        .wait_for(|f| f.reset_epoch != born.0 || f.close_epoch != born.1)
        .await
    {
        Ok(current) if current.reset_epoch != born.0 => Some(End::Reset {
            graceful_upstream: false,
        }),
        Ok(_) => Some(End::Close),
        Err(_) => None,
    };
    match verdict {
        Some(end) => end,
        // The proxy is going away; its tasks are being aborted.
        None => pending().await,
    }
}

/// A chunk read and not yet delivered.
struct Chunk {
    bytes: Vec<u8>,
    deliver_at: Instant,
    reset_after: bool,
}

/// Forwards one direction until it ends: returns how the connection must end.
async fn direction(
    from: &TcpStream,
    to: &TcpStream,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> End {
    let (tx, rx) = mpsc::channel(QUEUE);
    let reader = read_side(from, tx, dir, shared, connection);
    let writer = write_side(to, rx, dir, shared, connection);
    tokio::pin!(reader, writer);
    tokio::select! {
        end = &mut writer => end,
        stopped = &mut reader => match stopped {
            Some(end) => end,
            // End of stream: deliver what was read, then close.
            None => writer.await,
        },
    }
}

/// Reads chunks and queues them with their delivery time. Returns `None` at
/// the end of the stream, or how the connection must end.
async fn read_side(
    from: &TcpStream,
    tx: mpsc::Sender<Chunk>,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> Option<End> {
    let mut faults = shared.faults.subscribe();
    let mut buf = vec![0; CHUNK];
    let mut tail = Vec::new();
    let mut last_delivery = Instant::now();
    loop {
        let n = match read_some(from, &mut buf).await {
            Ok(0) => return None,
            Ok(n) => n,
            Err(_) => {
                return Some(End::Reset {
                    graceful_upstream: false,
                })
            }
        };
        let bytes = buf[..n].to_vec();
        if dir == DOWN && connection.muted.load(Ordering::SeqCst) {
            // The connection is about to be reset; its replies are lost with it.
            connection.answered.notify_one();
            continue;
        }
        let latency = faults.borrow_and_update().latency[dir];
        let mut reset_after = false;
        if dir == UP {
            match shared.fire_rule(&tail, &bytes) {
                Some(ResetWhen::BeforeForwarding) => {
                    return Some(End::Reset {
                        graceful_upstream: false,
                    })
                }
                Some(ResetWhen::AfterForwarding) => {
                    connection.muted.store(true, Ordering::SeqCst);
                    reset_after = true;
                }
                None => {}
            }
            remember_tail(&mut tail, &bytes);
        }
        let deliver_at = (Instant::now() + latency.sample()).max(last_delivery);
        last_delivery = deliver_at;
        let chunk = Chunk {
            bytes,
            deliver_at,
            reset_after,
        };
        if tx.send(chunk).await.is_err() {
            return None;
        }
    }
}

/// Delivers queued chunks at their time, waiting out any blackhole.
async fn write_side(
    to: &TcpStream,
    mut rx: mpsc::Receiver<Chunk>,
    dir: usize,
    shared: &Shared,
    connection: &Connection,
) -> End {
    let mut faults = shared.faults.subscribe();
    let mut tail = Vec::new();
    while let Some(chunk) = rx.recv().await {
        tokio::time::sleep_until(chunk.deliver_at).await;
        let stranded = connection.born_strand;
        if faults
            .wait_for(|f| !f.blackhole && f.strand_epoch == stranded)
            .await
            .is_err()
        {
            return pending().await;
        }
        if dir == DOWN && connection.muted.load(Ordering::SeqCst) {
            continue;
        }
        if write_all(to, &chunk.bytes).await.is_err() {
            return End::Reset {
                graceful_upstream: false,
            };
        }
        if dir == UP {
            shared.count_taps(&tail, &chunk.bytes);
            remember_tail(&mut tail, &chunk.bytes);
        }
        if chunk.reset_after {
            let _ = tokio::time::timeout(REPLY_WAIT, connection.answered.notified()).await;
            return End::Reset {
                graceful_upstream: true,
            };
        }
    }
    End::Close
}

async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
