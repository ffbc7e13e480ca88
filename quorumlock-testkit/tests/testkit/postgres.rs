//! The PostgreSQL server of the harness: it accepts connections on its port once started,
//! and is gone, with its directory, once dropped.

use std::time::Duration;

use quorumlock_testkit::PostgresServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A PostgreSQL `SSLRequest`: any server answers it with one byte, `N` or `S`.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

#[tokio::test]
async fn a_server_answers_on_its_port_and_is_gone_once_dropped() {
    let server = PostgresServer::start().await.unwrap();
    let port = server.port();
    assert!((20_000..=55_535).contains(&port), "{port}");
    assert_eq!(
        server.url(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(&SSL_REQUEST).await.unwrap();
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer[0], b'N', "a test server offers no TLS");
    drop(stream);

    let dir = server.dir().to_owned();
    assert!(dir.join("data").join("PG_VERSION").is_file());
    drop(server);
    assert!(!dir.exists(), "the directory outlived the server");
    // The port is closed: the server (postmaster and backends) stopped.
    let connect = TcpStream::connect(("127.0.0.1", port));
    let refused = tokio::time::timeout(Duration::from_secs(2), connect).await;
    assert!(matches!(refused, Ok(Err(_))), "{refused:?}");
}
