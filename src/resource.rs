//! Resource names and the Redis keys they map to.
//!
//! # Key layout
//!
//! By default a resource's key is its name after the configured prefix: `<prefix><name>`,
//! the names other Redlock clients use. In the hash-tagged layout (a lock with a Redis
//! Cluster member, or [`Nodes::hash_tags`](crate::Nodes::hash_tags)) the whole key is one hash tag,
//! `{<prefix><name>}`. Every other key of the lock is a brace-free prefix and that key
//! (`quorumlock:waiters:{...}`, `quorumlock:watched:{...}`, `quorumlock:fence:{...}`, and
//! the release channel `quorumlock:released:{...}`), so all of them hash to the lock key's
//! slot and every script touches one slot. The tag is the text up to the key's first `}`:
//! names that share it, such as `{orders}:1` and `{orders}:2`, share a slot too, which is
//! how a lock over several resources stays in one slot.

use std::sync::Arc;

use crate::config::LockConfig;
use crate::error::LockError;

/// The longest resource name accepted, in bytes.
///
/// Redis keys may be far longer, but a lock name of kilobytes is a bug (a payload passed
/// where an identifier belongs), and every request carries the key to every node.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The most resources one lock may cover.
pub const MAX_RESOURCES: usize = 64;

/// How a lock's keys are laid out on its nodes (see the [module](self) docs): a fact of
/// its node set, which the coordinator keeps beside the configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum KeyLayout {
    /// `<prefix><name>`: the names other Redlock clients use.
    #[default]
    Plain,
    /// `{<prefix><name>}`: each key one hash tag, asked for on standalone nodes.
    HashTags,
    /// Hash tags, and every key of one lock in one slot: a member is a Redis Cluster.
    OneSlot,
}

/// The Redis keys of one lock: one per resource, sorted. Read as a slice of keys.
///
/// A lock of one resource, nearly every lock, keeps its key alone, not in a list of one:
/// a held lock keeps its keys for its life, and the list would be an allocation of its
/// own (32 bytes) in every one.
#[derive(Clone)]
pub(crate) enum Keys {
    One(Arc<str>),
    Many(Arc<[Arc<str>]>),
}

impl std::ops::Deref for Keys {
    type Target = [Arc<str>];

    fn deref(&self) -> &[Arc<str>] {
        match self {
            Keys::One(key) => std::slice::from_ref(key),
            Keys::Many(keys) => keys,
        }
    }
}

impl FromIterator<Arc<str>> for Keys {
    fn from_iter<I: IntoIterator<Item = Arc<str>>>(keys: I) -> Self {
        let mut keys: Vec<Arc<str>> = keys.into_iter().collect();
        if keys.len() == 1 {
            if let Some(key) = keys.pop() {
                return Keys::One(key);
            }
        }
        Keys::Many(keys.into())
    }
}

impl From<Vec<Arc<str>>> for Keys {
    fn from(keys: Vec<Arc<str>>) -> Self {
        keys.into_iter().collect()
    }
}

impl<const N: usize> From<[Arc<str>; N]> for Keys {
    fn from(keys: [Arc<str>; N]) -> Self {
        keys.into_iter().collect()
    }
}

impl PartialEq for Keys {
    fn eq(&self, other: &Keys) -> bool {
        **self == **other
    }
}

impl Eq for Keys {}

impl std::hash::Hash for Keys {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The resources of one lock: a name for errors and logs, and their Redis keys.
pub(crate) struct Resources {
    /// The resource name, or the sorted names joined by `" + "` for several.
    pub(crate) name: Name,
    pub(crate) keys: Keys,
}

/// A lock's name, for errors and logs, read beside its keys (see [`of`](Self::of)).
///
/// A single resource's name is a part of its key (after the key prefix, inside the braces
/// of the hash-tagged layout), and a held lock keeps its keys anyway: it keeps where the
/// name lies in the first key rather than a second copy of it per held lock.
#[derive(Debug, Clone)]
pub(crate) enum Name {
    /// The bytes `start..end` of the first key.
    InKey { start: u32, end: u32 },
    /// A name of its own: several resources' joined names, or one shared with the object
    /// that makes the lock.
    Own(Arc<str>),
}

// A key (braces, prefix and name) is far shorter than `u32::MAX` bytes, so a place in it
// fits a `u32`: half the size of a `usize` range, in every held lock.
const _: () = assert!(2 + LockConfig::MAX_KEY_PREFIX_LEN + MAX_RESOURCE_LEN <= u32::MAX as usize);

impl Name {
    /// The name, for a lock whose keys are `keys`.
    pub(crate) fn of<'a>(&'a self, keys: &'a Keys) -> &'a str {
        match self {
            // `Resources::new` made the range from this very key, whose length fits
            // `MAX_RESOURCE_LEN` and the key prefix's; it never changes.
            Name::InKey { start, end } => &keys[0][*start as usize..*end as usize],
            Name::Own(name) => name,
        }
    }
}

impl Resources {
    /// The resource name, or the sorted names joined by `" + "` for several.
    pub(crate) fn name(&self) -> &str {
        self.name.of(&self.keys)
    }
}

impl Resources {
    /// Checks the names and forms their keys: each name itself, or the configured prefix
    /// followed by the name. Several names are sorted, so every client locks them in the
    /// same order and reports them the same way.
    pub(crate) fn new(
        config: &LockConfig,
        layout: KeyLayout,
        resources: &[&str],
    ) -> Result<Self, LockError> {
        if resources.is_empty() {
            return Err(invalid("", "no resource given"));
        }
        if config.fencing() {
            // Checked here, on every lock, since a configuration can change after connect.
            config.fencing_counters().check_layout(layout)?;
        }
        if resources.len() > MAX_RESOURCES {
            return Err(invalid(resources[0], "more than 64 resources in one lock"));
        }
        if let [name] = resources {
            // The usual lock, on one resource: no sorting, no joined name.
            validate(name)?;
            let (key, start) = lock_key(config, layout, name)?;
            return Ok(Resources {
                // Lossless: a key's length fits a `u32` (asserted above `impl Name`).
                name: Name::InKey {
                    start: start as u32,
                    end: (start + name.len()) as u32,
                },
                keys: Keys::One(key),
            });
        }
        let mut names: Vec<&str> = resources.to_vec();
        names.sort_unstable();
        for (i, name) in names.iter().enumerate() {
            validate(name)?;
            if i > 0 && names[i - 1] == *name {
                return Err(invalid(name, "listed twice in one lock"));
            }
        }
        let keys: Keys = names
            .iter()
            .map(|name| lock_key(config, layout, name).map(|(key, _)| key))
            .collect::<Result<_, _>>()?;
        if layout == KeyLayout::OneSlot {
            one_slot(&names, &keys)?;
        }
        Ok(Resources {
            name: Name::Own(names.join(" + ").into()),
            keys,
        })
    }
}

impl LockConfig {
    /// The Redis key a lock on `resource` lives under on nodes of the plain layout: the
    /// name, after the key prefix. Fails on a name that cannot be a lock (empty, or longer
    /// than [`MAX_RESOURCE_LEN`]). On nodes with hash tags (a Redis Cluster member), see
    /// [`Nodes::key_for`](crate::Nodes::key_for).
    ///
    /// ```
    /// # use quorumlock::LockConfig;
    /// let config = LockConfig::builder().key_prefix("locks:").build()?;
    /// assert_eq!(config.key_for("order:1")?, "locks:order:1");
    /// assert!(config.key_for("").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, resource: &str) -> Result<String, LockError> {
        key_for(self, KeyLayout::Plain, resource)
    }
}

/// The Redis key a lock on `resource` lives under, in `layout`.
pub(crate) fn key_for(
    config: &LockConfig,
    layout: KeyLayout,
    resource: &str,
) -> Result<String, LockError> {
    validate(resource)?;
    Ok(lock_key(config, layout, resource)?.0.to_string())
}

/// The Redis key of resource `name`: the name itself, or the configured prefix and the
/// name; in the hash-tagged layout, that in braces. With where the name starts in it.
fn lock_key(
    config: &LockConfig,
    layout: KeyLayout,
    name: &str,
) -> Result<(Arc<str>, usize), LockError> {
    let prefix = config.key_prefix().unwrap_or_default();
    if layout == KeyLayout::Plain {
        return Ok(match config.key_prefix() {
            Some(prefix) => (format!("{prefix}{name}").into(), prefix.len()),
            None => (Arc::from(name), 0),
        });
    }
    // `{}...` is an empty tag, which Redis ignores: the key would hash whole, and its queue
    // keys and counter to other slots.
    if prefix.is_empty() && name.starts_with('}') {
        return Err(invalid(
            name,
            "in the hash-tagged key layout (a Redis Cluster member) a key cannot start \
             with '}': its hash tag would be empty",
        ));
    }
    Ok((format!("{{{prefix}{name}}}").into(), 1 + prefix.len()))
}

/// Refuses a lock whose keys are in different Redis Cluster slots: one script can only
/// touch one slot, and splitting the all-or-none step across slots would need a second
/// protocol (a lock per slot, with its own rollback) for no safety gained.
fn one_slot(names: &[&str], keys: &[Arc<str>]) -> Result<(), LockError> {
    use redis::cluster_routing::Slot;
    let first = Slot::for_key(keys[0].as_bytes());
    match keys
        .iter()
        .position(|key| Slot::for_key(key.as_bytes()) != first)
    {
        None => Ok(()),
        Some(other) => Err(invalid(
            names[other],
            "on a Redis Cluster member the resources of one lock must share a hash slot: \
             give them a common hash tag, such as `{orders}:1` and `{orders}:2`",
        )),
    }
}

/// Rejects names that cannot be a lock.
pub(crate) fn validate(resource: &str) -> Result<(), LockError> {
    let reason = if resource.is_empty() {
        "the name is empty"
    } else if resource.len() > MAX_RESOURCE_LEN {
        "the name is longer than 1024 bytes"
    } else {
        return Ok(());
    };
    Err(invalid(resource, reason))
}

fn invalid(resource: &str, reason: &'static str) -> LockError {
    LockError::InvalidResource {
        resource: resource.chars().take(64).collect(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_the_name_unless_a_prefix_is_configured() {
        let plain = LockConfig::default();
        let one = Resources::new(&plain, KeyLayout::Plain, &["order:1"]).unwrap();
        assert_eq!(one.name(), "order:1");
        assert_eq!(&*one.keys[0], "order:1");
        let prefixed = LockConfig::builder().key_prefix("lock:").build().unwrap();
        let one = Resources::new(&prefixed, KeyLayout::Plain, &["order:1"]).unwrap();
        assert_eq!(&*one.keys[0], "lock:order:1");
        assert_eq!(one.name(), "order:1");
        let one = Resources::new(&prefixed, KeyLayout::HashTags, &["order:1"]).unwrap();
        assert_eq!(&*one.keys[0], "{lock:order:1}");
        assert_eq!(one.name(), "order:1");
    }

    #[test]
    fn several_resources_are_sorted_and_named_together() {
        let config = LockConfig::default();
        let both = Resources::new(&config, KeyLayout::Plain, &["b", "a"]).unwrap();
        assert_eq!(both.name(), "a + b");
        let keys: Vec<&str> = both.keys.iter().map(|key| &**key).collect();
        assert_eq!(keys, ["a", "b"]);
    }

    #[test]
    fn rejects_empty_duplicate_oversized_and_too_many_names() {
        let config = LockConfig::default();
        let reject = |names: &[&str]| match Resources::new(&config, KeyLayout::Plain, names) {
            Err(LockError::InvalidResource { reason, .. }) => reason,
            Err(other) => panic!("unexpected {other:?}"),
            Ok(_) => panic!("accepted {names:?}"),
        };
        assert_eq!(reject(&[""]), "the name is empty");
        assert_eq!(reject(&[]), "no resource given");
        assert_eq!(reject(&["a", "b", "a"]), "listed twice in one lock");
        let many: Vec<String> = (0..=MAX_RESOURCES).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(reject(&many), "more than 64 resources in one lock");
        let long = "x".repeat(MAX_RESOURCE_LEN + 1);
        match Resources::new(&config, KeyLayout::Plain, &[&long]) {
            Err(LockError::InvalidResource { resource, .. }) => assert_eq!(resource.len(), 64),
            other => panic!("unexpected {:?}", other.map(|r| r.name)),
        }
        assert!(
            Resources::new(&config, KeyLayout::Plain, &[&"x".repeat(MAX_RESOURCE_LEN)]).is_ok()
        );
    }

    #[test]
    fn hash_tagged_keys_put_every_key_of_a_lock_in_one_slot() {
        use redis::cluster_routing::Slot;
        let tagged = LockConfig::builder().key_prefix("lock:").build().unwrap();
        let key = key_for(&tagged, KeyLayout::HashTags, "order:1").unwrap();
        assert_eq!(key, "{lock:order:1}");
        let slot = Slot::for_key(&key);
        use crate::protocol::keys;
        for derived in [
            keys::queue_key(&key),
            keys::deadlines_key(&key),
            keys::watched_key(&key),
            keys::counter_key(&key),
            keys::readers_key(&key),
            keys::reader_key(&key, "0123"),
            keys::writer_waiting_key(&key),
            keys::leader_key(&key),
            keys::release_channel(&key),
            keys::sharded_release_channel(&key),
        ] {
            assert_eq!(Slot::for_key(&derived), slot, "{derived}");
        }
        // Plain nodes keep the names other clients use.
        assert_eq!(LockConfig::default().key_for("order:1").unwrap(), "order:1");
    }

    #[test]
    fn a_cluster_lock_refuses_resources_in_different_slots() {
        let (config, cluster) = (LockConfig::default(), KeyLayout::OneSlot);
        assert_eq!(key_for(&config, cluster, "a").unwrap(), "{a}");
        let same = Resources::new(&config, cluster, &["{orders}:2", "{orders}:1"]).unwrap();
        assert_eq!(&*same.keys[0], "{{orders}:1}");
        let refused = Resources::new(&config, cluster, &["order:1", "order:2"]);
        assert!(
            matches!(refused, Err(LockError::InvalidResource { reason, .. }) if reason.contains("hash slot")),
            "{:?}",
            refused.map(|r| r.name)
        );
        assert!(Resources::new(&config, cluster, &["}x"]).is_err());
        // Tagged by choice on standalone nodes: different slots are fine there.
        let tagged = KeyLayout::HashTags;
        assert!(Resources::new(&config, tagged, &["order:1", "order:2"]).is_ok());
    }

    #[test]
    fn any_utf8_is_a_valid_name() {
        let config = LockConfig::default();
        assert!(Resources::new(&config, KeyLayout::Plain, &["заказ 🧾 #1\n"]).is_ok());
    }
}
