//! How a [`RedisNode`] answers the lock family's requests: the read and write sides of a
//! read-write lock, and an election's leader record.

use std::sync::Arc;
use std::time::Duration;

use super::RedisNode;
use crate::config::millis;
use crate::error::NodeError;
use crate::node::scripts::{ScriptCall, LEADER_PREFIX, READERS_PREFIX, WRITER_WAITING_PREFIX};
use crate::token::LockToken;

impl RedisNode {
    pub(super) async fn lock_shared(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
        writer: &str,
    ) -> Result<bool, NodeError> {
        let [entry] = keys else {
            return Err(one_key("lock shared"));
        };
        let keys: [Arc<str>; 4] = [
            Arc::clone(entry),
            writer.into(),
            format!("{READERS_PREFIX}{writer}").into(),
            format!("{WRITER_WAITING_PREFIX}{writer}").into(),
        ];
        let args = [token.as_str(), &millis(ttl).to_string()];
        let call = ScriptCall::new(&self.scripts.lock_shared, &keys, &args);
        Ok(self.run_script(&call).await? == 1)
    }

    pub(super) async fn lock_exclusive(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        ttl: Duration,
        waiting: Option<Duration>,
    ) -> Result<bool, NodeError> {
        let [writer] = keys else {
            return Err(one_key("lock exclusive"));
        };
        let keys: [Arc<str>; 3] = [
            Arc::clone(writer),
            format!("{READERS_PREFIX}{writer}").into(),
            format!("{WRITER_WAITING_PREFIX}{writer}").into(),
        ];
        // A waiting time under a millisecond still marks the writer as waiting.
        let waiting = waiting.map_or(0, |waiting| millis(waiting).max(1));
        let args = [
            token.as_str(),
            &millis(ttl).to_string(),
            &waiting.to_string(),
        ];
        let call = ScriptCall::new(&self.scripts.lock_exclusive, &keys, &args);
        Ok(self.run_script(&call).await? == 1)
    }

    pub(super) async fn proclaim(
        &self,
        keys: &[Arc<str>],
        token: &LockToken,
        record: &str,
    ) -> Result<bool, NodeError> {
        let [key] = keys else {
            return Err(one_key("proclaim"));
        };
        let keys: [Arc<str>; 2] = [Arc::clone(key), format!("{LEADER_PREFIX}{key}").into()];
        let args = [token.as_str(), record];
        let call = ScriptCall::new(&self.scripts.proclaim, &keys, &args);
        Ok(self.run_repeatable_script(&call).await? == 1)
    }

    /// The lock key's token and the leader record, read at once (`MGET`): the record is
    /// current only while the key holds the token it was written with.
    pub(super) async fn read_proclamation(
        &self,
        keys: &[Arc<str>],
    ) -> Result<Option<String>, NodeError> {
        let [key] = keys else {
            return Err(one_key("read proclamation"));
        };
        let both: [Arc<str>; 2] = [Arc::clone(key), format!("{LEADER_PREFIX}{key}").into()];
        let values = self.values(&both).await?;
        let (Some(Some(holder)), Some(Some(record))) = (values.first(), values.get(1)) else {
            return Ok(None);
        };
        Ok(current_record(holder, record).map(str::to_owned))
    }
}

/// The record part of a stored leader record `<token> <record>`, when `holder` (the lock
/// key's token now) is the token it was written with.
pub(crate) fn current_record<'a>(holder: &str, stored: &'a str) -> Option<&'a str> {
    let (token, record) = stored.split_once(' ')?;
    (token == holder).then_some(record)
}

/// The error for a family request given other than one key, which the family never sends.
fn one_key(what: &str) -> NodeError {
    NodeError::Redis(format!("a {what} request takes exactly one key"))
}
