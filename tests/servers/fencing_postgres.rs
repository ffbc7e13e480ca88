//! Fencing that reaches the data: holders sell from a stock row in a real PostgreSQL table
//! through a read-modify-write under a fenced lock, and a holder pauses past its TTL between
//! its read and its write. The overlap is forced, not hoped for: each round, the paused
//! holder writes only once a newer holder has taken the lock and read the row (and, every
//! other round, written it too), so every round has one stale write.
//!
//! With the statement pattern of the fencing docs (claim the row with the token while
//! reading it, write only while no newer token claimed it) the stale write is refused and
//! the stock is exact: 0 lost updates. With plain statements (`SELECT`, then `UPDATE`) the
//! same schedule loses one sale per round.

use std::time::Duration;

use crate::common::{cluster, config, redlock_on, volatile};
use quorumlock::{LockError, Redlock};
use quorumlock_testkit::{PostgresServer, RedisCluster};
use tokio::sync::oneshot;
use tokio_postgres::{Client, NoTls};

/// Claims the row for a token and reads it: applies only when no newer token claimed it
/// (an equal token is the same holder), and returns the stock then.
const CLAIM: &str = "UPDATE stock SET fence = $1 WHERE sku = $2 AND fence <= $1 RETURNING qty";
/// Writes the row under a token: applies only when no newer token claimed it.
const FENCED_WRITE: &str = "UPDATE stock SET qty = $1, fence = $2 WHERE sku = $3 AND fence <= $2";
/// The unfenced read-modify-write.
const PLAIN_READ: &str = "SELECT qty FROM stock WHERE sku = $1";
const PLAIN_WRITE: &str = "UPDATE stock SET qty = $1 WHERE sku = $2";

const SKU: &str = "sku-42";
const INITIAL: i64 = 100;
/// Rounds of one paused holder and one newer holder each.
const ROUNDS: usize = 4;
/// Short, so that a paused holder's lease runs out quickly.
const LOCK_TTL: Duration = Duration::from_millis(300);
/// How long past its validity a paused holder sleeps before it goes on.
const PAST_VALIDITY: Duration = Duration::from_millis(50);

/// How a holder reads and writes the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Statements {
    /// The fencing docs' pattern: claim while reading, write only under the newest token.
    Fenced,
    /// `SELECT`, then an unconditional `UPDATE`.
    Plain,
}

/// One holder's connection to the database.
struct Store {
    client: Client,
    statements: Statements,
}

impl Store {
    async fn connect(server: &PostgresServer, statements: Statements) -> Store {
        let (client, connection) = tokio_postgres::connect(&server.url(), NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        Store { client, statements }
    }

    /// The stock as this holder reads it, or `None` when a newer holder claimed the row.
    async fn read(&self, token: u64) -> Option<i64> {
        let rows = match self.statements {
            Statements::Fenced => self.client.query(CLAIM, &[&bigint(token), &SKU]).await,
            Statements::Plain => self.client.query(PLAIN_READ, &[&SKU]).await,
        };
        rows.expect("read the stock").first().map(|row| row.get(0))
    }

    /// Writes the stock; whether the database applied it.
    async fn write(&self, qty: i64, token: u64) -> bool {
        let applied = match self.statements {
            Statements::Fenced => {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                    [&qty, &bigint(token), &SKU];
                self.client.execute(FENCED_WRITE, &params).await
            }
            Statements::Plain => self.client.execute(PLAIN_WRITE, &[&qty, &SKU]).await,
        };
        applied.expect("write the stock") == 1
    }
}

/// A fencing token as a Postgres `bigint`: tokens are at most 2^53.
fn bigint(token: u64) -> i64 {
    i64::try_from(token).expect("a token is at most quorumlock::fencing::MAX_TOKEN")
}

/// What a schedule of rounds did to the stock.
#[derive(Debug, Default)]
struct Tally {
    /// Sales whose write the database applied.
    sold: i64,
    /// Sales refused by the database (a newer holder had claimed the row).
    refused: usize,
    /// The stock at the end.
    stock: i64,
}

impl Tally {
    /// Sales applied but missing from the stock: overwritten by a stale write.
    fn lost(&self) -> i64 {
        self.sold - (INITIAL - self.stock)
    }
}

async fn database(statements: Statements) -> (PostgresServer, Store) {
    let server = PostgresServer::start()
        .await
        .expect("start a local PostgreSQL server (apt-get install -y postgresql)");
    let store = Store::connect(&server, statements).await;
    store
        .client
        .batch_execute(
            "CREATE TABLE stock (sku text PRIMARY KEY, qty bigint NOT NULL, \
             fence bigint NOT NULL DEFAULT 0)",
        )
        .await
        .unwrap();
    store
        .client
        .execute(
            "INSERT INTO stock (sku, qty) VALUES ($1, $2)",
            &[&SKU, &INITIAL],
        )
        .await
        .unwrap();
    (server, store)
}

/// A lock client of its own (its own connections, as another process would have).
async fn holder(nodes: &RedisCluster) -> Redlock {
    let fenced = config(LOCK_TTL)
        .to_builder()
        .fencing(true)
        .retry_count(40)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .unwrap();
    redlock_on(nodes, volatile(nodes.urls()), fenced).await
}

/// Runs [`ROUNDS`] rounds: a holder takes the lock, reads the stock and pauses past its
/// validity; a newer holder takes the lock once it has expired and reads the stock; the
/// paused holder wakes and writes what it computed before the pause, after the newer
/// holder's write (even rounds) or between its read and its write (odd rounds).
async fn sell_with_paused_holders(statements: Statements) -> Tally {
    let nodes = cluster(3).await;
    let (server, observer) = database(statements).await;
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let stale_writes_last = round % 2 == 0;
        let (paused_lock, newer_lock) = (holder(&nodes).await, holder(&nodes).await);
        let (paused_db, newer_db) = (
            Store::connect(&server, statements).await,
            Store::connect(&server, statements).await,
        );
        let (read_done, read) = oneshot::channel::<()>();
        let (newer_ready, ready) = oneshot::channel::<()>();
        let (stale_done, stale_written) = oneshot::channel::<()>();

        let paused = tokio::spawn(async move {
            let guard = paused_lock.acquire("stock").await.unwrap();
            let token = guard.fencing_token().unwrap();
            let stock = paused_db.read(token).await;
            read_done.send(()).unwrap();
            // The pause: past the lease's end, and until the newer holder has read.
            tokio::time::sleep(guard.validity() + PAST_VALIDITY).await;
            ready.await.unwrap();
            let mut guard = guard;
            assert!(matches!(
                guard.refresh().await,
                Err(LockError::Expired { .. })
            ));
            let applied = match stock {
                Some(stock) => paused_db.write(stock - 1, token).await,
                None => false,
            };
            stale_done.send(()).unwrap();
            (token, applied)
        });

        read.await.unwrap();
        let guard = newer_lock.acquire("stock").await.unwrap();
        let token = guard.fencing_token().unwrap();
        let stock = newer_db
            .read(token)
            .await
            .expect("the newest holder's claim");
        let newer_applied = if stale_writes_last {
            let applied = newer_db.write(stock - 1, token).await;
            newer_ready.send(()).unwrap();
            stale_written.await.unwrap();
            applied
        } else {
            newer_ready.send(()).unwrap();
            stale_written.await.unwrap();
            newer_db.write(stock - 1, token).await
        };
        guard.release().await.unwrap();
        let (paused_token, paused_applied) = paused.await.unwrap();
        assert!(
            token > paused_token,
            "round {round}: {token} after {paused_token}"
        );
        assert!(
            newer_applied,
            "round {round}: the lock holder's own write was refused"
        );
        for applied in [paused_applied, newer_applied] {
            if applied {
                tally.sold += 1;
            } else {
                tally.refused += 1;
            }
        }
    }
    let rows = observer.client.query(PLAIN_READ, &[&SKU]).await.unwrap();
    tally.stock = rows[0].get(0);
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_statements_lose_no_update_to_holders_paused_past_the_ttl() {
    let tally = sell_with_paused_holders(Statements::Fenced).await;
    assert_eq!(tally.lost(), 0, "{tally:?}");
    assert_eq!(
        tally.refused, ROUNDS,
        "every paused holder's write refused: {tally:?}"
    );
    assert_eq!(tally.stock, INITIAL - i64::try_from(ROUNDS).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_statements_lose_an_update_to_every_holder_paused_past_the_ttl() {
    let tally = sell_with_paused_holders(Statements::Plain).await;
    assert_eq!(tally.refused, 0, "{tally:?}");
    // Two sales a round, one unit gone a round.
    assert_eq!(tally.lost(), i64::try_from(ROUNDS).unwrap(), "{tally:?}");
}

/// A blind write of a new row (no read before it): the upsert of the fencing docs inserts
/// it, or overwrites it only under a token at least the row's.
#[tokio::test]
async fn the_fenced_upsert_refuses_an_older_token() {
    let (_server, store) = database(Statements::Fenced).await;
    const UPSERT: &str = "INSERT INTO stock (sku, qty, fence) VALUES ($1, $2, $3) \
         ON CONFLICT (sku) DO UPDATE SET qty = EXCLUDED.qty, fence = EXCLUDED.fence \
         WHERE stock.fence <= EXCLUDED.fence";
    let upsert = |sku: &'static str, qty: i64, token: i64| {
        let client = &store.client;
        async move { client.execute(UPSERT, &[&sku, &qty, &token]).await.unwrap() }
    };
    assert_eq!(upsert("sku-7", 5, 3).await, 1, "a new row is inserted");
    assert_eq!(upsert("sku-7", 4, 2).await, 0, "an older token is refused");
    assert_eq!(
        upsert("sku-7", 6, 3).await,
        1,
        "the same holder may write again"
    );
    assert_eq!(upsert("sku-7", 7, 9).await, 1, "a newer token is accepted");
    let rows = store
        .client
        .query("SELECT qty, fence FROM stock WHERE sku = 'sku-7'", &[])
        .await
        .unwrap();
    assert_eq!((rows[0].get::<_, i64>(0), rows[0].get::<_, i64>(1)), (7, 9));
}
