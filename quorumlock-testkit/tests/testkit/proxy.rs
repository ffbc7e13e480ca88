//! The fault proxy itself, on one real redis-server node and raw RESP bytes: latency per
//! direction, a blackhole that delivers in order once lifted, refused, reset and closed
//! connections, resets on a command before or after the node runs it, and a redirect to
//! another server.

use std::time::Duration;

use quorumlock_testkit::{Direction, FaultProxy, RedisCluster, ResetWhen};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A client's view of a Redis connection through a proxy, raw bytes (RESP).
async fn raw(proxy: &FaultProxy) -> TcpStream {
    TcpStream::connect(proxy.addr()).await.unwrap()
}

/// Sends a RESP command and reads one reply chunk.
async fn roundtrip(stream: &mut TcpStream, args: &[&str]) -> std::io::Result<Vec<u8>> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    stream.write_all(request.as_bytes()).await?;
    let mut buf = vec![0; 1024];
    let n = stream.read(&mut buf).await?;
    buf.truncate(n);
    Ok(buf)
}

#[tokio::test]
async fn proxy_forwards_and_delays_per_direction() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let proxy = FaultProxy::start(([127, 0, 0, 1], cluster.node(0).port()).into())
        .await
        .unwrap();
    let mut stream = raw(&proxy).await;
    assert_eq!(
        roundtrip(&mut stream, &["PING"]).await.unwrap(),
        b"+PONG\r\n"
    );
    let tap = proxy.tap("greeting");
    assert_eq!(
        roundtrip(&mut stream, &["SET", "greeting", "hi"])
            .await
            .unwrap(),
        b"+OK\r\n"
    );
    assert_eq!(tap.count(), 1);

    for (direction, at_least) in [
        (Direction::ToServer, 100 * MS),
        (Direction::ToClient, 100 * MS),
        (Direction::Both, 200 * MS),
    ] {
        proxy.set_latency(direction, 100 * MS, 20 * MS);
        let started = Instant::now();
        assert_eq!(
            roundtrip(&mut stream, &["PING"]).await.unwrap(),
            b"+PONG\r\n"
        );
        let rtt = started.elapsed();
        assert!(
            rtt >= at_least && rtt < at_least + 500 * MS,
            "{direction:?}: {rtt:?}"
        );
        proxy.heal().await.unwrap();
    }
    // Healing drops the latency of open connections too: under a latency that would hold
    // this round trip for 4 s, it takes far less once healed. The margin is that wide so
    // that a loaded machine's scheduling delays cannot be mistaken for a latency left on.
    proxy.set_latency(Direction::Both, 2_000 * MS, Duration::ZERO);
    proxy.heal().await.unwrap();
    let started = Instant::now();
    roundtrip(&mut stream, &["PING"]).await.unwrap();
    assert!(
        started.elapsed() < 2_000 * MS,
        "healed: {:?}",
        started.elapsed()
    );
    assert_eq!(tap.count(), 1);
    assert_eq!(proxy.connections_accepted(), 1);
}

#[tokio::test]
async fn proxy_blackholes_then_delivers_in_order() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let proxy = FaultProxy::start(([127, 0, 0, 1], cluster.node(0).port()).into())
        .await
        .unwrap();
    let mut stream = raw(&proxy).await;
    roundtrip(&mut stream, &["PING"]).await.unwrap();

    proxy.blackhole(true);
    assert!(proxy.is_faulty());
    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .await
        .unwrap();
    let mut buf = vec![0; 64];
    assert!(
        tokio::time::timeout(300 * MS, stream.read(&mut buf))
            .await
            .is_err(),
        "a blackholed node answers nothing"
    );
    assert_eq!(
        cluster.node(0).get("k").await.unwrap(),
        None,
        "nor runs anything"
    );
    // New connections are accepted but hang as well.
    let mut other = raw(&proxy).await;
    assert!(
        tokio::time::timeout(200 * MS, roundtrip(&mut other, &["PING"]))
            .await
            .is_err()
    );

    proxy.heal().await.unwrap();
    let mut replies = Vec::new();
    while replies.len() < b"+OK\r\n$1\r\n1\r\n".len() {
        let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        replies.extend_from_slice(&buf[..n]);
    }
    assert_eq!(replies, b"+OK\r\n$1\r\n1\r\n", "held requests run in order");
}

#[tokio::test]
async fn proxy_refuses_resets_and_closes_connections() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let proxy = FaultProxy::start(([127, 0, 0, 1], cluster.node(0).port()).into())
        .await
        .unwrap();
    let mut open = raw(&proxy).await;
    roundtrip(&mut open, &["PING"]).await.unwrap();

    // Refusing new connections leaves open ones alone, again and again.
    for _ in 0..3 {
        proxy.refuse_new(true).await.unwrap();
        let refused = TcpStream::connect(proxy.addr()).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        if cfg!(target_os = "linux") {
            assert!(
                std::net::TcpListener::bind(proxy.addr()).is_err(),
                "the port stays reserved while refusing"
            );
        }
        assert_eq!(roundtrip(&mut open, &["PING"]).await.unwrap(), b"+PONG\r\n");
        proxy.refuse_new(false).await.unwrap();
        let mut fresh = raw(&proxy).await;
        assert_eq!(
            roundtrip(&mut fresh, &["PING"]).await.unwrap(),
            b"+PONG\r\n"
        );
    }

    // A reset ends open connections with RST.
    let mut other = raw(&proxy).await;
    roundtrip(&mut other, &["PING"]).await.unwrap();
    proxy.reset_all().await.unwrap();
    assert_eq!(proxy.open_connections(), 0);
    for stream in [&mut open, &mut other] {
        let err = roundtrip(stream, &["PING"]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    }
    assert!(proxy.resets() >= 2);

    // A close ends them with FIN: the client reads end-of-stream.
    let mut closing = raw(&proxy).await;
    roundtrip(&mut closing, &["PING"]).await.unwrap();
    proxy.close_all().await.unwrap();
    let mut buf = [0; 8];
    assert_eq!(closing.read(&mut buf).await.unwrap(), 0);

    // A partition refuses new connections and resets open ones; heal undoes it.
    let mut victim = raw(&proxy).await;
    roundtrip(&mut victim, &["PING"]).await.unwrap();
    proxy.partition().await.unwrap();
    assert!(roundtrip(&mut victim, &["PING"]).await.is_err());
    assert!(TcpStream::connect(proxy.addr()).await.is_err());
    proxy.heal().await.unwrap();
    assert!(!proxy.is_faulty());
    let mut back = raw(&proxy).await;
    assert_eq!(roundtrip(&mut back, &["PING"]).await.unwrap(), b"+PONG\r\n");

    // A connection to a node that is down is reset at once.
    let port = proxy.port();
    drop(cluster);
    let mut orphan = raw(&proxy).await;
    assert!(roundtrip(&mut orphan, &["PING"]).await.is_err());

    // Dropping the proxy closes its port and its connections. Its tasks end on the runtime
    // after the drop returns: the port is polled until it refuses, rather than given a
    // fixed time that a loaded machine may not meet.
    drop(proxy);
    let dropped = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
        assert!(
            dropped.elapsed() < Duration::from_secs(5),
            "port {port} still open"
        );
        tokio::time::sleep(10 * MS).await;
    }
    let mut buf = [0; 8];
    assert!(matches!(back.read(&mut buf).await, Ok(0) | Err(_)));
}

#[tokio::test]
async fn proxy_resets_on_a_command_before_or_after_the_node_runs_it() {
    let cluster = RedisCluster::start(1).await.unwrap();
    let proxy = FaultProxy::start(([127, 0, 0, 1], cluster.node(0).port()).into())
        .await
        .unwrap();

    proxy.reset_on("$3\r\nSET\r\n", ResetWhen::BeforeForwarding);
    let mut stream = raw(&proxy).await;
    assert_eq!(
        roundtrip(&mut stream, &["PING"]).await.unwrap(),
        b"+PONG\r\n"
    );
    let err = roundtrip(&mut stream, &["SET", "before", "1"]).await;
    assert!(err.is_err() || err.as_ref().unwrap().is_empty(), "{err:?}");
    assert_eq!(
        cluster.node(0).get("before").await.unwrap(),
        None,
        "never ran"
    );

    proxy.reset_on("$3\r\nSET\r\n", ResetWhen::AfterForwarding);
    let mut stream = raw(&proxy).await;
    let err = roundtrip(&mut stream, &["SET", "after", "1"]).await;
    assert!(err.is_err() || err.as_ref().unwrap().is_empty(), "{err:?}");
    assert_eq!(
        cluster.node(0).get("after").await.unwrap().as_deref(),
        Some("1"),
        "ran, but the reply was lost"
    );
    // Rules are one-shot.
    let mut stream = raw(&proxy).await;
    assert_eq!(
        roundtrip(&mut stream, &["SET", "third", "1"])
            .await
            .unwrap(),
        b"+OK\r\n"
    );
    assert_eq!(proxy.resets(), 2);
}

#[tokio::test]
async fn a_redirect_moves_new_connections_and_leaves_open_ones() {
    let cluster = RedisCluster::start(2).await.unwrap();
    let node = |i: usize| ([127, 0, 0, 1], cluster.node(i).port()).into();
    let proxy = FaultProxy::start(node(0)).await.unwrap();
    let mut before = raw(&proxy).await;
    assert_eq!(
        roundtrip(&mut before, &["SET", "who", "zero"])
            .await
            .unwrap(),
        b"+OK\r\n"
    );
    proxy.redirect(node(1));
    assert_eq!(proxy.upstream(), node(1));
    let mut after = raw(&proxy).await;
    // The new connection reaches node 1, where the key was never set; the open one is
    // still on node 0.
    assert_eq!(
        roundtrip(&mut after, &["GET", "who"]).await.unwrap(),
        b"$-1\r\n"
    );
    assert_eq!(
        roundtrip(&mut before, &["GET", "who"]).await.unwrap(),
        b"$4\r\nzero\r\n"
    );
}
