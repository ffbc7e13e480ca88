//! The original design's usage example, the Rust way: a `LockFactory` over a `Redlock`,
//! one lock per order, a domain error, and a lock released on every path.
//!
//! ```text
//! cargo run --example order_processing          # starts 5 local Redis nodes
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003,redis://127.0.0.1:7004,redis://127.0.0.1:7005 \
//!     cargo run --example order_processing      # the nodes of docker-compose.yml
//! ```

mod common;

use std::time::Duration;

use quorumlock::{LockConfig, LockError, LockFactory, Redlock};

/// What can go wrong when processing an order, in the application's own terms.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("order {0} is being processed by another worker")]
    AlreadyInProgress(u64),
    #[error("order {0}: the lock expired before processing finished; check the order")]
    LockLost(u64),
    #[error("lock service unavailable: {0}")]
    LockUnavailable(LockError),
    #[error("order {0}: payment declined")]
    PaymentDeclined(u64),
}

impl OrderError {
    fn from_lock(order: u64, err: LockError) -> Self {
        match err {
            LockError::Held { .. } => OrderError::AlreadyInProgress(order),
            LockError::NotHeld { .. } | LockError::Expired { .. } => OrderError::LockLost(order),
            other => OrderError::LockUnavailable(other),
        }
    }
}

async fn process_order(factory: &LockFactory<Redlock>, order: u64) -> Result<(), OrderError> {
    let lock = factory
        .create(&format!("order-processing:order:{order}"))
        .map_err(OrderError::LockUnavailable)?;
    let guard = lock
        .acquire()
        .await
        .map_err(|err| OrderError::from_lock(order, err))?;

    // The critical section. Any early return (`?`) or panic drops `guard`, which releases
    // the lock in the background: the Rust form of the original `try { ... } finally`.
    charge(order).await?;
    println!(
        "order {order}: processed ({:.1?} of validity left)",
        guard.validity()
    );

    guard
        .release()
        .await
        .map_err(|err| OrderError::from_lock(order, err))
}

/// Stands in for the real work: takes a moment, and declines one particular order.
async fn charge(order: u64) -> Result<(), OrderError> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    if order == 666 {
        return Err(OrderError::PaymentDeclined(order));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> common::Result {
    // QUORUMLOCK_NODES=redis://host1:6379,redis://host2:6379,... or 5 local nodes (stopped
    // when `nodes` is dropped).
    let nodes = common::lock_nodes(5).await?;
    let config = LockConfig::builder().ttl(Duration::from_secs(10)).build()?;
    let factory = LockFactory::new(Redlock::connect(&nodes.urls, config).await?);

    // Two workers pick up the same order at once: one processes it, the other backs off.
    let (a, b) = tokio::join!(
        process_order(&factory, 12345),
        process_order(&factory, 12345)
    );
    for err in [a, b].into_iter().filter_map(Result::err) {
        println!("{err}");
    }

    // A failing order, twice: both attempts fail on the payment, neither on the lock,
    // because the first attempt's guard was released when the error dropped it.
    for _ in 0..2 {
        if let Err(err) = process_order(&factory, 666).await {
            println!("{err}");
        }
    }
    Ok(())
}
