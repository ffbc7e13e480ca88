//! Resource names and the Redis keys they map to.

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

/// The Redis keys of one lock: one per resource, sorted.
pub(crate) type Keys = Arc<[Arc<str>]>;

/// The resources of one lock: a name for errors and logs, and their Redis keys.
pub(crate) struct Resources {
    /// The resource name, or the sorted names joined by `" + "` for several.
    pub(crate) name: String,
    pub(crate) keys: Keys,
}

impl Resources {
    /// Checks the names and forms their keys: each name itself, or the configured prefix
    /// followed by the name. Several names are sorted, so every client locks them in the
    /// same order and reports them the same way.
    pub(crate) fn new(config: &LockConfig, resources: &[&str]) -> Result<Self, LockError> {
        if resources.is_empty() {
            return Err(invalid("", "no resource given"));
        }
        if resources.len() > MAX_RESOURCES {
            return Err(invalid(resources[0], "more than 64 resources in one lock"));
        }
        if let [name] = resources {
            // The usual lock, on one resource: no sorting, no joined name.
            validate(name)?;
            return Ok(Resources {
                name: (*name).to_owned(),
                keys: Arc::new([key_of(config, name)]),
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
        let keys = names.iter().map(|name| key_of(config, name)).collect();
        Ok(Resources {
            name: names.join(" + "),
            keys,
        })
    }
}

impl LockConfig {
    /// The Redis key a lock on `resource` lives under: the name, after the key prefix.
    /// Fails on a name that cannot be a lock (empty, or longer than
    /// [`MAX_RESOURCE_LEN`]).
    ///
    /// ```
    /// # use quorumlock::LockConfig;
    /// let config = LockConfig::builder().key_prefix("locks:").build()?;
    /// assert_eq!(config.key_for("order:1")?, "locks:order:1");
    /// assert!(config.key_for("").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, resource: &str) -> Result<String, LockError> {
        validate(resource)?;
        Ok(key_of(self, resource).to_string())
    }
}

/// The Redis key of resource `name`: the name itself, or the configured prefix and the name.
fn key_of(config: &LockConfig, name: &str) -> Arc<str> {
    match config.key_prefix() {
        Some(prefix) => format!("{prefix}{name}").into(),
        None => Arc::from(name),
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
        let one = Resources::new(&plain, &["order:1"]).unwrap();
        assert_eq!(one.name, "order:1");
        assert_eq!(&*one.keys[0], "order:1");
        let prefixed = LockConfig::builder().key_prefix("lock:").build().unwrap();
        let one = Resources::new(&prefixed, &["order:1"]).unwrap();
        assert_eq!(&*one.keys[0], "lock:order:1");
        assert_eq!(one.name, "order:1");
    }

    #[test]
    fn several_resources_are_sorted_and_named_together() {
        let config = LockConfig::default();
        let both = Resources::new(&config, &["b", "a"]).unwrap();
        assert_eq!(both.name, "a + b");
        let keys: Vec<&str> = both.keys.iter().map(|key| &**key).collect();
        assert_eq!(keys, ["a", "b"]);
    }

    #[test]
    fn rejects_empty_duplicate_oversized_and_too_many_names() {
        let config = LockConfig::default();
        let reject = |names: &[&str]| match Resources::new(&config, names) {
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
        match Resources::new(&config, &[&long]) {
            Err(LockError::InvalidResource { resource, .. }) => assert_eq!(resource.len(), 64),
            other => panic!("unexpected {:?}", other.map(|r| r.name)),
        }
        assert!(Resources::new(&config, &[&"x".repeat(MAX_RESOURCE_LEN)]).is_ok());
    }

    #[test]
    fn any_utf8_is_a_valid_name() {
        let config = LockConfig::default();
        assert!(Resources::new(&config, &["заказ 🧾 #1\n"]).is_ok());
    }
}
