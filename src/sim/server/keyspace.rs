//! [`Keyspace`]: a Redis database in memory, its keys expiring on the caller's node clock.

use std::collections::BTreeMap;
use std::time::Duration;

/// The keys of one Redis database: strings, sorted sets and hashes, each with an optional
/// expiry in milliseconds of the node's clock, and the messages published on it.
///
/// Commands run through [`execute`](Self::execute), with the node-clock reading they run
/// at. A key expires as Redis expires it: it is gone once the clock has passed its expiry
/// time (`now > expiry`, in whole milliseconds), and an expired key is removed when a
/// command meets it (inspection through [`live_keys`](Self::live_keys) never shows one).
#[derive(Debug, Clone, Default)]
pub struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
    published: Vec<Published>,
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// A string (binary-safe).
    String(Vec<u8>),
    /// A sorted set: each member with its score.
    SortedSet(BTreeMap<Vec<u8>, f64>),
    /// A hash: each field with its value.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// A key that has not expired: what it holds and how long it has left.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveKey {
    /// What the key holds.
    pub data: Data,
    /// Milliseconds until it expires (`PTTL`), `None` when it never does.
    pub ttl_ms: Option<u64>,
}

/// A live key as it stands: what it holds, and the last node-clock millisecond it lives
/// through.
pub(crate) struct EntryView<'a> {
    pub(crate) data: &'a Data,
    pub(crate) expires_at: Option<u64>,
}

/// A message a `PUBLISH` sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The channel.
    pub channel: Vec<u8>,
    /// The message.
    pub message: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) data: Data,
    /// The node-clock millisecond after which the key is gone.
    pub(super) expires_at: Option<u64>,
}

impl Entry {
    fn live_at(&self, now_ms: u64) -> bool {
        self.expires_at.is_none_or(|at| now_ms <= at)
    }
}

/// A node-clock reading in whole milliseconds, the resolution of Redis's expiry.
pub(super) fn millis(now: Duration) -> u64 {
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

impl Keyspace {
    /// An empty keyspace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key that is live at `now`, with what it holds and its TTL.
    pub fn live_keys(&self, now: Duration) -> BTreeMap<Vec<u8>, LiveKey> {
        let now_ms = millis(now);
        self.entries
            .iter()
            .filter(|(_, entry)| entry.live_at(now_ms))
            .map(|(key, entry)| {
                let live = LiveKey {
                    data: entry.data.clone(),
                    ttl_ms: entry.expires_at.map(|at| at - now_ms),
                };
                (key.clone(), live)
            })
            .collect()
    }

    /// The entry under `key` if it is live at `now`, without removing anything.
    pub(crate) fn live(&self, key: &[u8], now: Duration) -> Option<EntryView<'_>> {
        let entry = self.entries.get(key)?;
        entry.live_at(millis(now)).then_some(EntryView {
            data: &entry.data,
            expires_at: entry.expires_at,
        })
    }

    /// The messages published since the last call, oldest first.
    pub fn take_published(&mut self) -> Vec<Published> {
        std::mem::take(&mut self.published)
    }

    /// Deletes every key (`FLUSHALL`, or a restart without persistence).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Records a message a `PUBLISH` sent.
    pub(super) fn publish(&mut self, channel: &[u8], message: &[u8]) {
        self.published.push(Published {
            channel: channel.to_vec(),
            message: message.to_vec(),
        });
    }

    /// The live entry under `key`; an expired one is removed first.
    pub(super) fn entry(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        if self
            .entries
            .get(key)
            .is_some_and(|entry| !entry.live_at(now_ms))
        {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Stores `data` under `key` with an expiry, replacing whatever was there.
    pub(super) fn insert(&mut self, key: &[u8], data: Data, expires_at: Option<u64>) {
        self.entries
            .insert(key.to_vec(), Entry { data, expires_at });
    }

    /// Deletes `key`; returns whether it was live.
    pub(super) fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.entry(key, now_ms).is_some() && self.entries.remove(key).is_some()
    }

    /// Deletes `key` if its collection became empty (Redis never keeps an empty one).
    pub(super) fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.entries.get(key).map(|entry| &entry.data) {
            Some(Data::SortedSet(members)) => members.is_empty(),
            Some(Data::Hash(fields)) => fields.is_empty(),
            _ => false,
        };
        if empty {
            self.entries.remove(key);
        }
    }
}
