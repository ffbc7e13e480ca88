//! Fencing that reaches a SQL database: a holder paused past its TTL cannot lose a sale in a
//! PostgreSQL table, because the table checks the fencing token.
//!
//! The lock alone cannot stop a holder that read the stock, paused (GC, swap, SIGSTOP) until
//! its lock expired and another holder sold, and then wrote what it computed before the
//! pause. The row keeps the highest token that claimed it (`fence`), and every statement
//! applies only while no newer token did:
//!
//! ```sql
//! -- claim and read, right after acquiring: from now on, older holders cannot write
//! UPDATE stock SET fence = $token WHERE sku = $sku AND fence <= $token RETURNING qty;
//! -- write what was computed from that read: refused if a newer holder claimed the row
//! UPDATE stock SET qty = $qty, fence = $token WHERE sku = $sku AND fence <= $token;
//! ```
//!
//! Two clients sell from one row. A takes the lock (token t1), claims and reads the stock,
//! and pauses. Its lock expires; B takes it (token t2 > t1), claims, reads and sells. A
//! wakes and writes its stale level: refused (0 rows). The same schedule with a plain
//! `SELECT` and `UPDATE` on a second row applies A's write, and B's sale is lost.
//!
//! Checked at the end: t2 > t1, A's fenced write was refused, the fenced row's stock is
//! exact, and the plain row lost a sale. The example exits non-zero otherwise.
//!
//! ```text
//! cargo run --example fencing_postgres     # starts 3 lock nodes and a PostgreSQL server
//! QUORUMLOCK_POSTGRES_URL=postgres://user:pass@db:5432/shop \
//! QUORUMLOCK_NODES=redis://h1:6379,redis://h2:6379,redis://h3:6379 \
//!     cargo run --example fencing_postgres
//! ```
//!
//! The database may also be given as the first argument. The example (re)creates a table
//! `quorumlock_example_stock` there. A local server needs Debian's `postgresql` package
//! (the testkit finds its binaries and runs it as the `postgres` user when run as root).

mod common;

use std::process::ExitCode;
use std::time::Duration;

use common::Result;
use quorumlock::{LockConfig, Redlock};
use quorumlock_testkit::{Persistence, PostgresServer};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

const LOCK: &str = "lock:stock";
const TTL: Duration = Duration::from_millis(500);
const INITIAL: i64 = 10;
/// The row both clients sell from with fenced statements, and the one without.
const FENCED: &str = "sku-fenced";
const PLAIN: &str = "sku-plain";

#[tokio::main]
async fn main() -> ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result {
    let nodes = common::lock_nodes_with(3, Persistence::AppendFsyncAlways).await?;
    let (url, _local) = match std::env::args()
        .nth(1)
        .or_else(|| std::env::var("QUORUMLOCK_POSTGRES_URL").ok())
    {
        Some(url) => (url, None),
        None => {
            let server = PostgresServer::start().await?;
            (server.url(), Some(server))
        }
    };
    let db = connect(&url).await?;
    db.batch_execute(
        "DROP TABLE IF EXISTS quorumlock_example_stock;
         CREATE TABLE quorumlock_example_stock
             (sku text PRIMARY KEY, qty bigint NOT NULL, fence bigint NOT NULL DEFAULT 0)",
    )
    .await?;
    for sku in [FENCED, PLAIN] {
        db.execute(
            "INSERT INTO quorumlock_example_stock (sku, qty) VALUES ($1, $2)",
            &[&sku, &INITIAL],
        )
        .await?;
    }
    let config = LockConfig::builder().ttl(TTL).fencing(true).build()?;
    // Two separate clients, as two processes would have.
    let (a, b) = tokio::try_join!(
        Redlock::connect(&nodes.urls, config.clone()),
        Redlock::connect(&nodes.urls, config)
    )?;
    let (a_db, b_db) = tokio::try_join!(connect(&url), connect(&url))?;
    println!("lock {LOCK:?} with fencing, TTL {TTL:?}; stock {INITIAL} on two rows of {url}");

    let start = Instant::now();
    let (a_read, b_may_go) = oneshot::channel();
    let (b_sold, a_wakes) = oneshot::channel();
    let ((t1, refused), t2) = tokio::try_join!(
        client_a(a, a_db, start, a_read, a_wakes),
        client_b(b, b_db, start, b_may_go, b_sold),
    )?;

    let (fenced, plain) = (
        plain_read(&db, FENCED).await?,
        plain_read(&db, PLAIN).await?,
    );
    println!("\ntwo sales on each row, from {INITIAL}:");
    println!("  {FENCED} (fenced statements) = {fenced}");
    println!("  {PLAIN}  (plain statements)  = {plain}");

    let mut failures = Vec::new();
    if t2 <= t1 {
        failures.push(format!("B's token {t2} is not greater than A's {t1}"));
    }
    if !refused {
        failures.push("A's late fenced write was applied".to_owned());
    }
    // A's sale was refused, so one sale went through: B's.
    if fenced != INITIAL - 1 {
        failures.push(format!(
            "the fenced row holds {fenced}, not {}",
            INITIAL - 1
        ));
    }
    if plain != INITIAL - 1 {
        failures.push(format!("the plain row holds {plain}: no sale was lost?"));
    }
    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    println!(
        "OK: tokens {t1} < {t2}; A's late write was refused and the fenced stock is exact \
         (without fencing, two sales took one unit: a lost update)"
    );
    Ok(())
}

async fn connect(url: &str) -> Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("database connection: {error}");
        }
    });
    Ok(client)
}

/// A fencing token as a `bigint`: tokens are at most `quorumlock::fencing::MAX_TOKEN`
/// (2^53), far inside it.
fn bigint(token: u64) -> Result<i64> {
    Ok(i64::try_from(token)?)
}

/// Claims the row `sku` for `token` and reads its stock: `None` when a newer token claimed it.
async fn claim_and_read(db: &Client, sku: &str, token: u64) -> Result<Option<i64>> {
    const CLAIM: &str = "UPDATE quorumlock_example_stock SET fence = $1 \
                         WHERE sku = $2 AND fence <= $1 RETURNING qty";
    let row = db.query_opt(CLAIM, &[&bigint(token)?, &sku]).await?;
    Ok(row.map(|row| row.get(0)))
}

/// Writes the stock of `sku` under `token`; whether it applied (no newer token claimed it).
async fn fenced_write(db: &Client, sku: &str, qty: i64, token: u64) -> Result<bool> {
    const WRITE: &str = "UPDATE quorumlock_example_stock SET qty = $1, fence = $2 \
                         WHERE sku = $3 AND fence <= $2";
    Ok(db.execute(WRITE, &[&qty, &bigint(token)?, &sku]).await? == 1)
}

/// The stock of `sku`, read without fencing.
async fn plain_read(db: &Client, sku: &str) -> Result<i64> {
    const READ: &str = "SELECT qty FROM quorumlock_example_stock WHERE sku = $1";
    Ok(db.query_one(READ, &[&sku]).await?.get(0))
}

/// Writes the stock of `sku` without fencing: always applies.
async fn plain_write(db: &Client, sku: &str, qty: i64) -> Result {
    const WRITE: &str = "UPDATE quorumlock_example_stock SET qty = $1 WHERE sku = $2";
    db.execute(WRITE, &[&qty, &sku]).await?;
    Ok(())
}

/// Prints one line of the timeline, stamped with the time since `start`.
fn say(start: Instant, line: std::fmt::Arguments<'_>) {
    println!("{:5.2}s  {line}", start.elapsed().as_secs_f64());
}

/// Claims the fenced row and reads both rows, pauses past its lease, then writes both;
/// returns its token and whether its fenced write was refused.
async fn client_a(
    lock: Redlock,
    db: Client,
    start: Instant,
    read: oneshot::Sender<()>,
    wake: oneshot::Receiver<()>,
) -> Result<(u64, bool)> {
    let guard = lock.acquire(LOCK).await?;
    let token = guard
        .fencing_token()
        .ok_or("no fencing token: fencing(true) not set?")?;
    let fenced = claim_and_read(&db, FENCED, token)
        .await?
        .ok_or("A's claim was refused")?;
    let plain = plain_read(&db, PLAIN).await?;
    say(start, format_args!("A holds token {token}, claims and reads stock {fenced} (plain row: {plain}), pauses..."));
    let _ = read.send(());
    // The stall: past the lease, and until B has sold.
    wake.await?;
    let expired = guard.deadline().elapsed();
    say(
        start,
        format_args!("A resumes; its lock expired {expired:.0?} ago"),
    );
    let applied = fenced_write(&db, FENCED, fenced - 1, token).await?;
    let verdict = if applied {
        "applied"
    } else {
        "REFUSED, a newer token claimed the row"
    };
    say(
        start,
        format_args!("A writes {} with token {token}: {verdict}", fenced - 1),
    );
    plain_write(&db, PLAIN, plain - 1).await?;
    say(
        start,
        format_args!(
            "A writes {} without fencing: applied, over B's sale",
            plain - 1
        ),
    );
    drop(guard);
    Ok((token, !applied))
}

/// Takes the lock once A's has expired, claims, reads and sells on both rows, and wakes A.
async fn client_b(
    lock: Redlock,
    db: Client,
    start: Instant,
    a_read: oneshot::Receiver<()>,
    sold: oneshot::Sender<()>,
) -> Result<u64> {
    a_read.await?;
    // A never releases: the lock frees up only when A's lease runs out.
    let guard = loop {
        match lock.acquire(LOCK).await {
            Err(error) if error.is_retryable() && start.elapsed() < 10 * TTL => continue,
            outcome => break outcome?,
        }
    };
    let token = guard.fencing_token().ok_or("no fencing token")?;
    let fenced = claim_and_read(&db, FENCED, token)
        .await?
        .ok_or("B's claim was refused")?;
    let plain = plain_read(&db, PLAIN).await?;
    if !fenced_write(&db, FENCED, fenced - 1, token).await? {
        return Err("B's fenced write was refused".into());
    }
    plain_write(&db, PLAIN, plain - 1).await?;
    say(
        start,
        format_args!(
            "B holds token {token} after A's lease ran out; sells on both rows ({fenced} -> {})",
            fenced - 1
        ),
    );
    guard.release().await?;
    let _ = sold.send(());
    Ok(token)
}
