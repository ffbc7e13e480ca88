//! Resource names and the Redis keys they map to.

use std::sync::Arc;

use crate::config::LockConfig;
use crate::error::LockError;

/// The longest resource name accepted, in bytes.
///
/// Redis keys may be far longer, but a lock name of kilobytes is a bug (a payload passed
/// where an identifier belongs), and every request carries the key to every node.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// Checks a resource name and forms its Redis key: the name itself, or the configured
/// prefix followed by the name.
pub(crate) fn redis_key(config: &LockConfig, resource: &str) -> Result<Arc<str>, LockError> {
    validate(resource)?;
    Ok(match config.key_prefix() {
        Some(prefix) => format!("{prefix}{resource}").into(),
        None => resource.into(),
    })
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
    Err(LockError::InvalidResource {
        resource: resource.chars().take(64).collect(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_the_name_unless_a_prefix_is_configured() {
        let plain = LockConfig::default();
        assert_eq!(&*redis_key(&plain, "order:1").unwrap(), "order:1");
        let prefixed = LockConfig::builder().key_prefix("lock:").build().unwrap();
        assert_eq!(&*redis_key(&prefixed, "order:1").unwrap(), "lock:order:1");
    }

    #[test]
    fn rejects_empty_and_oversized_names() {
        let config = LockConfig::default();
        assert!(matches!(
            redis_key(&config, ""),
            Err(LockError::InvalidResource { .. })
        ));
        let long = "x".repeat(MAX_RESOURCE_LEN + 1);
        let err = redis_key(&config, &long).unwrap_err();
        match err {
            LockError::InvalidResource { resource, .. } => assert_eq!(resource.len(), 64),
            other => panic!("unexpected {other:?}"),
        }
        assert!(redis_key(&config, &"x".repeat(MAX_RESOURCE_LEN)).is_ok());
    }

    #[test]
    fn any_utf8_is_a_valid_name() {
        let config = LockConfig::default();
        assert!(redis_key(&config, "заказ 🧾 #1\n").is_ok());
    }
}
