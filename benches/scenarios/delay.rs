//! The network profiles' latency injector: a delay line in front of each node, run in a
//! process of its own (this binary, started with [`PROXY_FLAG`]), so that forwarding the
//! bytes costs the measured client no CPU time and takes no turn in its scheduler.
//!
//! This kernel has no `tc netem`, and tokio's timers tick in whole milliseconds, too
//! coarse for 0.25 ms; so each direction of each connection is a reader thread and a writer
//! thread, and the writer sleeps (`nanosleep`) until each chunk's delivery time, read time
//! plus the delay. Chunks of one direction keep their order; a chunk never waits for
//! another connection's.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The first argument that makes this binary a delay proxy:
/// `--delay-proxy <delay in µs> <upstream port>...`.
pub const PROXY_FLAG: &str = "--delay-proxy";

/// A network profile: loopback as it is, or every node behind a delay each way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Added to each direction (client to node, node to client).
    pub each_way: Duration,
}

impl Profile {
    pub const LOOPBACK: Profile = Profile {
        each_way: Duration::ZERO,
    };

    /// `loopback`, or a delay each way such as `0.25ms` or `1ms`.
    pub fn parse(text: &str) -> Result<Profile, String> {
        if text == "loopback" {
            return Ok(Profile::LOOPBACK);
        }
        let ms: f64 = text
            .strip_suffix("ms")
            .and_then(|ms| ms.parse().ok())
            .filter(|ms: &f64| ms.is_finite() && *ms > 0.0 && *ms <= 100.0)
            .ok_or(format!(
                "profile {text:?}: loopback, or a delay each way from 0 to 100 ms such as 0.25ms"
            ))?;
        Ok(Profile {
            each_way: Duration::from_secs_f64(ms / 1e3),
        })
    }

    pub fn is_loopback(self) -> bool {
        self.each_way.is_zero()
    }

    /// `loopback`, or `1 ms each way`.
    pub fn label(self) -> String {
        if self.is_loopback() {
            "loopback".to_owned()
        } else {
            format!("{} ms each way", self.each_way.as_secs_f64() * 1e3)
        }
    }
}

/// The delay proxies of one profile, one per node, in a child process that ends with them.
pub struct DelayProxies {
    child: Child,
    /// One URL per node, in node order.
    pub urls: Vec<String>,
}

impl DelayProxies {
    /// Starts a child process with one proxy per port of `upstreams`, each delaying both
    /// directions by `each_way`.
    pub fn spawn(each_way: Duration, upstreams: &[u16]) -> io::Result<DelayProxies> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(PROXY_FLAG)
            .arg(each_way.as_micros().to_string())
            .args(upstreams.iter().map(u16::to_string))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut urls = Vec::with_capacity(upstreams.len());
        while urls.len() < upstreams.len() {
            let line = lines.next().ok_or_else(|| {
                io::Error::new(io::ErrorKind::UnexpectedEof, "delay proxy ended early")
            })??;
            let port: u16 = line
                .strip_prefix("port ")
                .and_then(|port| port.parse().ok())
                .ok_or_else(|| io::Error::other(format!("delay proxy said {line:?}")))?;
            urls.push(format!("redis://127.0.0.1:{port}/"));
        }
        Ok(DelayProxies { child, urls })
    }
}

impl Drop for DelayProxies {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's side: serves until its standard input closes (the parent ended).
pub fn serve(args: &[String]) -> ExitCode {
    let parsed: Option<(u64, Vec<u16>)> = args.split_first().and_then(|(delay, ports)| {
        let ports: Option<Vec<u16>> = ports.iter().map(|p| p.parse().ok()).collect();
        Some((delay.parse().ok()?, ports?))
    });
    let Some((delay_us, ports)) = parsed else {
        eprintln!("usage: {PROXY_FLAG} <delay in µs> <upstream port>...");
        return ExitCode::from(2);
    };
    let delay = Duration::from_micros(delay_us);
    let mut stdout = io::stdout().lock();
    for upstream in ports {
        let listener = match TcpListener::bind(("127.0.0.1", 0)) {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!("delay proxy: bind: {err}");
                return ExitCode::FAILURE;
            }
        };
        let port = listener.local_addr().map(|addr| addr.port()).unwrap_or(0);
        thread::spawn(move || accept_loop(&listener, upstream, delay));
        let _ = writeln!(stdout, "port {port}");
    }
    let _ = stdout.flush();
    drop(stdout);
    // Ends with the parent: its end of the pipe closes when it exits, however it exits.
    let _ = io::copy(&mut io::stdin(), &mut io::sink());
    ExitCode::SUCCESS
}

fn accept_loop(listener: &TcpListener, upstream: u16, delay: Duration) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let Ok(node) = TcpStream::connect(("127.0.0.1", upstream)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        for (from, to) in [(&client, &node), (&node, &client)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                continue;
            };
            let _ = to.set_nodelay(true);
            direction(from, to, delay);
        }
    }
}

/// Carries `from`'s bytes to `to`, each chunk `delay` after it was read.
fn direction(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (chunks, queued) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if chunks
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // Dropping `chunks` lets the writer deliver what is queued, then end.
    });
    thread::spawn(move || {
        let mut out = Vec::new();
        let mut pending: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        loop {
            if pending.is_empty() {
                match queued.recv() {
                    Ok(chunk) => pending.push_back(chunk),
                    Err(_) => break,
                }
            }
            pending.extend(queued.try_iter());
            if let Some((at, _)) = pending.front() {
                sleep_until(*at);
            }
            // The chunks due by now go out in one write.
            let now = Instant::now();
            out.clear();
            while pending.front().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, bytes)) = pending.pop_front() {
                    out.extend_from_slice(&bytes);
                }
            }
            if to.write_all(&out).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        thread::sleep(at - now);
    }
}
