//! The simulated node's commands, faults and clock, through the requests a lock sends.

use super::*;
use crate::sim::{Outcome, Reply};

fn keys(names: &[&str]) -> Vec<Arc<str>> {
    names.iter().map(|name| Arc::from(*name)).collect()
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn commands_are_atomic_over_their_keys_and_conditional_on_the_token() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let (a, b) = (LockToken::generate(), LockToken::generate());
        let ab = keys(&["x", "y"]);
        assert_eq!(
            lock_node.try_lock(&keys(&["y"]), &b, SECOND).await,
            Ok(true)
        );
        // All or none: y is taken, so x is not set either.
        assert_eq!(lock_node.try_lock(&ab, &a, SECOND).await, Ok(false));
        assert_eq!(node.get("x"), None);
        // Extend needs every key: refused, nothing created, y untouched.
        assert_eq!(lock_node.extend(&ab, &b, 2 * SECOND).await, Ok(false));
        assert_eq!(node.get("x"), None);
        assert_eq!(node.ttl("y"), Some(SECOND));
        // Unlock deletes only what holds the token.
        assert_eq!(lock_node.unlock(&ab, &a).await, Ok(false));
        assert_eq!(node.get("y"), Some(b.clone()));
        assert_eq!(lock_node.unlock(&ab, &b).await, Ok(false)); // x did not hold it
        assert_eq!(node.get("y"), None);
        assert_eq!(lock_node.try_lock(&ab, &a, SECOND).await, Ok(true));
        assert_eq!(lock_node.holds(&ab, &a).await, Ok(true));
        assert_eq!(node.keys(), vec!["x".to_owned(), "y".to_owned()]);
        let log = node.log();
        assert_eq!(log.len(), 7);
        let Outcome::Applied(applied) = &log[1].outcome else {
            panic!("{:?}", log[1]);
        };
        assert_eq!(applied.before, applied.after);
        assert!(!applied.result);
    });
}

#[test]
fn crashes_restarts_and_counters() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let token = LockToken::generate();
        let k = keys(&["k"]);
        let c = keys(&["c"]);
        assert_eq!(lock_node.raise_counter(&c, 5).await, Ok(5));
        assert_eq!(lock_node.raise_counter(&c, 3).await, Ok(5)); // never lowered
        assert_eq!(lock_node.read_counter(&keys(&["c", "none"])).await, Ok(5));
        assert_eq!(lock_node.try_lock(&k, &token, SECOND).await, Ok(true));
        node.crash();
        assert!(matches!(
            lock_node.holds(&k, &token).await,
            Err(NodeError::Connection(_))
        ));
        node.restart(true);
        assert_eq!(node.get("k"), Some(token.clone()));
        assert_eq!(node.counter("c"), Some(5));
        node.crash();
        node.restart(false);
        assert_eq!(node.get("k"), None);
        assert_eq!(node.counter("c"), None);
        assert!(matches!(node.log()[4].outcome, Outcome::Failed { .. }));
    });
}

#[test]
fn lost_requests_and_replies_never_answer() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let token = LockToken::generate();
        let k = keys(&["k"]);
        let wait = |future| tokio::time::timeout(SECOND, future);
        node.lose_replies(true);
        assert!(wait(lock_node.try_lock(&k, &token, SECOND)).await.is_err());
        assert_eq!(node.get("k"), None);
        node.lose_replies(false);
        node.apply_but_lose_reply(true);
        assert!(wait(lock_node.try_lock(&k, &token, 10 * SECOND))
            .await
            .is_err());
        assert_eq!(node.get("k"), Some(token.clone()));
        let log = node.log();
        assert!(matches!(log[0].outcome, Outcome::Dropped { .. }));
        assert!(matches!(&log[1].outcome, Outcome::Applied(a) if a.reply == Reply::Lost));
    });
}

#[test]
fn delayed_requests_land_in_order_even_when_abandoned() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let token = LockToken::generate();
        let k = keys(&["k"]);
        node.set_request_delay(Duration::from_millis(100));
        let abandoned = tokio::time::timeout(
            Duration::from_millis(10),
            lock_node.try_lock(&k, &token, SECOND),
        )
        .await;
        assert!(abandoned.is_err());
        // Sent later with no delay, the unlock still arrives after the SET.
        node.set_request_delay(Duration::ZERO);
        assert_eq!(lock_node.unlock(&k, &token).await, Ok(true));
        assert_eq!(node.get("k"), None);
    });
}

#[test]
fn replies_in_flight_are_reset_by_a_crash() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let token = LockToken::generate();
        let k = keys(&["k"]);
        node.set_reply_delay(Duration::from_millis(50));
        let crasher = node.clone();
        let crash = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            crasher.crash();
            crasher.restart(true);
        });
        let reply = lock_node.try_lock(&k, &token, SECOND).await;
        crash.await.unwrap();
        assert!(matches!(reply, Err(NodeError::Connection(_))), "{reply:?}");
        assert_eq!(node.get("k"), Some(token)); // applied all the same
    });
}

#[test]
fn ttls_run_on_the_node_clock() {
    paused().block_on(async {
        let node = SimNode::new("n");
        let lock_node = node.to_lock_node();
        let token = LockToken::generate();
        let k = keys(&["k"]);
        assert_eq!(lock_node.try_lock(&k, &token, SECOND).await, Ok(true));
        node.jump_clock(Duration::from_millis(999));
        assert!(node.get("k").is_some());
        // As Redis, the key lives through its expiry millisecond, and is gone after it.
        node.jump_clock(Duration::from_millis(1));
        assert!(node.get("k").is_some());
        node.jump_clock(Duration::from_millis(1));
        assert_eq!(node.get("k"), None);
        assert_eq!(lock_node.try_lock(&k, &token, SECOND).await, Ok(true));
        node.set_clock_rate(0.5);
        tokio::time::sleep(Duration::from_millis(1_999)).await;
        assert!(node.get("k").is_some());
        node.jump_clock_back(SECOND);
        // At 1000.5 ms of node time, of a key that lives through 2001 ms.
        assert_eq!(node.ttl("k"), Some(Duration::from_millis(1_001)));
    });
}
