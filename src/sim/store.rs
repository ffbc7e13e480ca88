//! [`Store`]: what a simulated node holds, and the lock commands run on it as the node's
//! Redis scripts would run them: each atomic over the keys of its request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::log::{Applied, Op, Reply, Stored};
use crate::error::NodeError;
use crate::token::LockToken;

/// The lock keys, with their expiry on the node's clock, and the fencing counters.
#[derive(Debug, Default)]
pub(super) struct Store {
    keys: BTreeMap<String, Stored>,
    /// Fencing counters: never expire; lost with the data.
    counters: BTreeMap<String, u64>,
}

impl Store {
    /// Deletes every key, fencing counters included (`FLUSHALL`).
    pub(super) fn clear(&mut self) {
        self.keys.clear();
        self.counters.clear();
    }

    /// Deletes `key`, a lock key or a fencing counter; returns whether it was there.
    pub(super) fn evict(&mut self, key: &str) -> bool {
        let lock = self.keys.remove(key).is_some();
        self.counters.remove(key).is_some() || lock
    }

    /// Stores `stored` under `key`, unconditionally.
    pub(super) fn insert(&mut self, key: &str, stored: Stored) {
        self.keys.insert(key.to_owned(), stored);
    }

    /// The value under `key` if it has not expired at `now` on the node's clock.
    pub(super) fn live(&self, key: &str, now: Duration) -> Option<&Stored> {
        self.keys.get(key).filter(|stored| now < stored.expires_at)
    }

    /// The fencing counter at `key`, if it exists.
    pub(super) fn counter(&self, key: &str) -> Option<u64> {
        self.counters.get(key).copied()
    }

    /// The lock keys live at `now` and the fencing counters, in order.
    pub(super) fn keys(&self, now: Duration) -> Vec<String> {
        let mut keys: Vec<String> = self
            .keys
            .iter()
            .filter(|(_, stored)| now < stored.expires_at)
            .map(|(key, _)| key.clone())
            .chain(self.counters.keys().cloned())
            .collect();
        keys.sort();
        keys
    }

    /// How many lock keys it holds, expired or not.
    pub(super) fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Runs one command on the store, as the Redis scripts would: atomically.
    /// `at` is when it runs on tokio's clock, `node_time` on the node's.
    pub(super) fn apply(
        &mut self,
        at: Instant,
        node_time: Duration,
        op: Op,
        keys: &[Arc<str>],
        token: Option<&LockToken>,
    ) -> Result<Applied, NodeError> {
        let mut applied = Applied {
            at,
            node_time,
            result: true,
            count: None,
            before: Vec::new(),
            after: Vec::new(),
            counters_before: Vec::new(),
            counters_after: Vec::new(),
            reply: Reply::Pending,
        };
        match op {
            Op::ReadCounter => {
                applied.counters_before = self.counter_values(keys);
                applied.count = Some(applied.counters_before.iter().copied().max().unwrap_or(0));
                applied.counters_after = applied.counters_before.clone();
                return Ok(applied);
            }
            Op::RaiseCounter { value } => {
                applied.counters_before = self.counter_values(keys);
                for key in keys {
                    let counter = self.counters.entry(key.to_string()).or_insert(0);
                    *counter = (*counter).max(value);
                }
                applied.counters_after = self.counter_values(keys);
                applied.count = Some(
                    applied
                        .counters_after
                        .iter()
                        .copied()
                        .min()
                        .unwrap_or(value),
                );
                return Ok(applied);
            }
            Op::Lock { ttl } | Op::Extend { ttl } if ttl.is_zero() => {
                return Err(NodeError::Redis("invalid expire time".to_owned()));
            }
            _ => {}
        }
        let Some(token) = token else {
            return Err(NodeError::Redis(
                "a lock command without a token".to_owned(),
            ));
        };
        for key in keys {
            if matches!(self.keys.get(&**key), Some(stored) if node_time >= stored.expires_at) {
                self.keys.remove(&**key);
            }
        }
        applied.before = keys
            .iter()
            .map(|key| self.keys.get(&**key).cloned())
            .collect();
        let ours = |stored: &Option<Stored>| stored.as_ref().is_some_and(|s| &s.token == token);
        let all_ours = applied.before.iter().all(ours);
        applied.result = match op {
            Op::Lock { ttl } => {
                let free = applied.before.iter().all(Option::is_none);
                if free {
                    for key in keys {
                        self.keys.insert(
                            key.to_string(),
                            Stored {
                                token: token.clone(),
                                expires_at: node_time.saturating_add(ttl),
                            },
                        );
                    }
                }
                free
            }
            Op::Unlock => {
                for (key, before) in keys.iter().zip(&applied.before) {
                    if ours(before) {
                        self.keys.remove(&**key);
                    }
                }
                all_ours
            }
            Op::Extend { ttl } => {
                if all_ours {
                    for key in keys {
                        if let Some(stored) = self.keys.get_mut(&**key) {
                            stored.expires_at = node_time.saturating_add(ttl);
                        }
                    }
                }
                all_ours
            }
            Op::Holds | Op::ReadCounter | Op::RaiseCounter { .. } => all_ours,
        };
        applied.after = keys
            .iter()
            .map(|key| self.keys.get(&**key).cloned())
            .collect();
        Ok(applied)
    }

    /// The counters at `keys`, 0 where absent.
    fn counter_values(&self, keys: &[Arc<str>]) -> Vec<u64> {
        keys.iter()
            .map(|key| self.counters.get(&**key).copied().unwrap_or(0))
            .collect()
    }
}
