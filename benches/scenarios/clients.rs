//! The contenders: quorumlock's two lock kinds, rslock, and the hand-written floor, behind
//! one enum so that every scenario runs the same loop for each of them.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use quorumlock::{LockConfig, LockGuard, RedisLock, Redlock};
use rand::RngCore;
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};

/// Who is being measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// `quorumlock::Redlock` (or `RedisLock` in the single-node scenario).
    Quorumlock,
    /// `quorumlock::Redlock` with `fair(false)`: waiters race for each release, as with
    /// other Redlock clients; shows what the fair queue changes under contention.
    QuorumlockUnfair,
    /// rslock 0.10 `LockManager`.
    Rslock,
    /// The same Redis commands sent by hand with redis-rs: the floor.
    Floor,
    /// No lock at all: acquire and release do nothing. A reference, not a contender: in
    /// the contended scenario it measures what the work under the lock alone can reach.
    NoLock,
}

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::Quorumlock => "quorumlock",
            Contender::QuorumlockUnfair => "quorumlock-unfair",
            Contender::Rslock => "rslock",
            Contender::Floor => "floor",
            Contender::NoLock => "no-lock",
        }
    }
}

/// A connected lock client of one contender.
pub enum Client {
    Redlock(Redlock),
    Single(RedisLock),
    Rslock {
        manager: rslock::LockManager,
        ttl: Duration,
    },
    Floor(Floor),
    NoLock,
}

/// A held lock of any contender.
pub enum Held {
    Guard(LockGuard),
    Rslock(rslock::Lock),
    Floor(FloorLock),
    /// What `Client::NoLock` "holds".
    Nothing,
}

impl Client {
    /// Connects `contender` to `urls` (one URL: quorumlock's single-node `RedisLock`).
    pub async fn connect(contender: Contender, urls: &[String], config: &LockConfig) -> Client {
        match contender {
            Contender::Quorumlock if urls.len() == 1 => Client::Single(
                RedisLock::connect(&urls[0], config.clone())
                    .await
                    .expect("RedisLock::connect"),
            ),
            Contender::Quorumlock => Client::Redlock(
                Redlock::connect(urls, config.clone())
                    .await
                    .expect("Redlock::connect"),
            ),
            Contender::QuorumlockUnfair => {
                let unfair = config.to_builder().fair(false).build().expect("config");
                Client::Redlock(
                    Redlock::connect(urls, unfair)
                        .await
                        .expect("Redlock::connect"),
                )
            }
            // As a user would: its constructor, its default retries (3 attempts, a random
            // 0-200 ms wait between them), its default connections.
            Contender::Rslock => Client::Rslock {
                manager: rslock::LockManager::new(urls.to_vec()),
                ttl: config.ttl(),
            },
            Contender::Floor => Client::Floor(
                Floor::connect(urls, config.ttl())
                    .await
                    .expect("floor connects"),
            ),
            Contender::NoLock => Client::NoLock,
        }
    }

    /// Takes the lock on `resource`: quorumlock's `acquire` (bounded retries), rslock's
    /// `acquire_no_guard` (retries until it succeeds), the floor's single attempt.
    pub async fn acquire(&self, resource: &str) -> Result<Held, String> {
        match self {
            Client::Redlock(lock) => lock
                .acquire(resource)
                .await
                .map(Held::Guard)
                .map_err(|err| err.to_string()),
            Client::Single(lock) => lock
                .acquire(resource)
                .await
                .map(Held::Guard)
                .map_err(|err| err.to_string()),
            Client::Rslock { manager, ttl } => manager
                .acquire_no_guard(resource, *ttl)
                .await
                .map(Held::Rslock)
                .map_err(|err| err.to_string()),
            Client::Floor(floor) => floor.lock(resource).await.map(Held::Floor),
            Client::NoLock => Ok(Held::Nothing),
        }
    }

    /// Releases a lock this client took.
    pub async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Guard(guard)) => guard.release().await.map_err(|err| err.to_string()),
            (Client::Rslock { manager, .. }, Held::Rslock(lock)) => {
                // Best effort by design: rslock's unlock reports nothing.
                manager.unlock(&lock).await;
                Ok(())
            }
            (Client::Floor(floor), Held::Floor(lock)) => floor.unlock(lock).await,
            (Client::NoLock, Held::Nothing) => Ok(()),
            _ => Err("a lock released through another client".to_owned()),
        }
    }

    /// quorumlock's counters (attempts, acquisitions), for diagnostics.
    pub fn metrics(&self) -> Option<quorumlock::LockMetrics> {
        match self {
            Client::Redlock(lock) => Some(lock.metrics()),
            Client::Single(lock) => Some(lock.metrics()),
            Client::Rslock { .. } | Client::Floor(_) | Client::NoLock => None,
        }
    }

    /// One uncontended acquire + release.
    pub async fn cycle(&self, resource: &str) -> Result<(), String> {
        let held = self.acquire(resource).await?;
        self.release(held).await
    }
}

/// The floor's requests of one round, not answered yet.
type Replies<'a, T> = Vec<Pin<Box<dyn Future<Output = redis::RedisResult<T>> + Send + 'a>>>;

/// The next reply of a round, in the order they come; `None` when none is left.
///
/// Each wake polls every pending request, as `join_all` does, rather than going through a
/// `FuturesUnordered`: that set wakes its own task after polling every future it holds,
/// and on tokio's multi-thread runtime such a wake costs a thread wake-up (two futex
/// calls) per round, which no client has to pay (rslock's `join_all` does not).
async fn next_reply<T>(replies: &mut Replies<'_, T>) -> Option<redis::RedisResult<T>> {
    if replies.is_empty() {
        return None;
    }
    futures::future::poll_fn(|cx| {
        for position in 0..replies.len() {
            if let Poll::Ready(reply) = replies[position].as_mut().poll(cx) {
                drop(replies.remove(position));
                return Poll::Ready(Some(reply));
            }
        }
        Poll::Pending
    })
    .await
}

/// Compare-and-delete, the plain form every Redlock client uses.
const UNLOCK: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"#;

/// The floor: what any Redlock client must at least do, hand-written on the same redis
/// crate quorumlock uses. One multiplexed connection per node; `SET key token NX PX ttl`
/// sent to every node at once, returning as soon as a quorum granted it (or could no longer
/// grant it); release by the compare-and-delete script (`EVALSHA`) sent to every node at
/// once, returning at a quorum of replies (see [`next_reply`]). No timeouts, no validity
/// bookkeeping, no metrics, no pub/sub, no cleanup of stragglers (their replies are
/// dropped). With one URL it is the single-node floor: `SET NX PX` + compare-and-delete on
/// one connection.
pub struct Floor {
    nodes: Vec<MultiplexedConnection>,
    quorum: usize,
    ttl_ms: u64,
    unlock: Script,
}

pub struct FloorLock {
    key: String,
    token: String,
}

impl Floor {
    pub async fn connect(urls: &[String], ttl: Duration) -> redis::RedisResult<Floor> {
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            nodes.push(client.get_multiplexed_async_connection().await?);
        }
        Ok(Floor {
            quorum: quorumlock::quorum_of(nodes.len()),
            nodes,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            unlock: Script::new(UNLOCK),
        })
    }

    /// 16 random bytes as 32 hex digits, like quorumlock's tokens.
    fn token() -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        let mut hex = String::with_capacity(32);
        for byte in bytes {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        hex
    }

    pub async fn lock(&self, key: &str) -> Result<FloorLock, String> {
        let token = Self::token();
        let mut replies: Replies<'_, _> = self
            .nodes
            .iter()
            .map(|connection| {
                let mut connection = connection.clone();
                let mut command = redis::cmd("SET");
                command
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms);
                Box::pin(async move { command.query_async::<Value>(&mut connection).await })
                    as Pin<Box<dyn Future<Output = _> + Send + '_>>
            })
            .collect();
        let mut granted = 0;
        while let Some(reply) = next_reply(&mut replies).await {
            if matches!(reply, Ok(Value::Okay)) {
                granted += 1;
            }
            if granted >= self.quorum {
                return Ok(FloorLock {
                    key: key.to_owned(),
                    token,
                });
            }
            if granted + replies.len() < self.quorum {
                break;
            }
        }
        drop(replies);
        let _ = self
            .unlock(FloorLock {
                key: key.to_owned(),
                token,
            })
            .await;
        Err(format!("floor: no quorum for {key}"))
    }

    pub async fn unlock(&self, lock: FloorLock) -> Result<(), String> {
        let mut replies: Replies<'_, i64> = self
            .nodes
            .iter()
            .map(|connection| {
                let mut connection = connection.clone();
                let mut invocation = self.unlock.key(&lock.key);
                invocation.arg(&lock.token);
                Box::pin(async move { invocation.invoke_async::<i64>(&mut connection).await })
                    as Pin<Box<dyn Future<Output = _> + Send + '_>>
            })
            .collect();
        let mut deleted = 0;
        while let Some(reply) = next_reply(&mut replies).await {
            if matches!(reply, Ok(1)) {
                deleted += 1;
            }
            if deleted >= self.quorum {
                return Ok(());
            }
            if deleted + replies.len() < self.quorum {
                break;
            }
        }
        Err(format!("floor: release of {} not confirmed", lock.key))
    }
}
