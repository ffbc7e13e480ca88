//! The sections `quorumlock status` adds for the lock family: the readers of the name's
//! read-write lock (and whether a writer waits), and, with `--permits K`, who holds each
//! of the K permits of the name's semaphore.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use quorumlock::protocol::keys;
use quorumlock::quorum_of;
use serde_json::{json, Value};

use crate::args::GlobalArgs;
use crate::duration::{format_duration, millis};
use crate::exit::CliError;
use crate::nodes::lock_key;

use super::read::read_node;
use super::view::{verdict, NodeView, Verdict};

/// Why a cluster or Sentinel member's readers and permits are not shown.
const NOT_READ: &str = "not read on a cluster or Sentinel member";

/// What one node says about the readers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Readers {
    /// The live reader entries, with their time left, and whether a writer waits.
    Listed {
        entries: Vec<(String, Option<Duration>)>,
        writer_waits: bool,
    },
    /// The node did not answer properly.
    Failed(String),
}

/// The lock family's part of the report.
#[derive(Debug)]
pub struct ReadersAndPermits {
    readers: Vec<Readers>,
    quorum: usize,
    /// Each slot's nodes and verdict, with `--permits`.
    permits: Option<Vec<(Vec<NodeView>, Verdict)>>,
}

impl ReadersAndPermits {
    /// Reads the readers of `key` (the name's lock key) on every node of `clients`, and with
    /// `permits` each permit slot of `resource`. A member without a client (a Redis Cluster or
    /// a Sentinel-managed master) is reported as not read: these sections read one server's
    /// keys directly.
    pub async fn read(
        global: &GlobalArgs,
        resource: &str,
        key: &str,
        permits: Option<u32>,
        clients: &[Option<redis::Client>],
        budget: Duration,
    ) -> Result<Self, CliError> {
        let quorum = quorum_of(clients.len());
        let readers = join_all(
            clients
                .iter()
                .map(|client| read_readers(client.clone(), key, budget)),
        )
        .await;
        let permits = match permits {
            None => None,
            Some(permits) => {
                let mut slots = Vec::new();
                for slot in 0..permits {
                    let slot_key = lock_key(global, &keys::permit_resource(resource, slot))?;
                    let views = join_all(clients.iter().map(|client| async {
                        match client {
                            Some(client) => read_node(client.clone(), &slot_key, budget).await,
                            None => NodeView::Failed(NOT_READ.to_owned()),
                        }
                    }))
                    .await;
                    let verdict = verdict(&views, quorum);
                    slots.push((views, verdict));
                }
                Some(slots)
            }
        };
        Ok(ReadersAndPermits {
            readers,
            quorum,
            permits,
        })
    }
}

/// The reader list of `key`, each listed entry's `PTTL` and the writer's mark, within
/// `budget`; entries gone (`PTTL` -2) are readers that left.
async fn read_readers(client: Option<redis::Client>, key: &str, budget: Duration) -> Readers {
    let Some(client) = client else {
        return Readers::Failed(NOT_READ.to_owned());
    };
    let query = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        let (listed, waiting): (Vec<(String, f64)>, i64) = redis::pipe()
            .cmd("ZRANGE")
            .arg(keys::readers_key(key))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("PTTL")
            .arg(keys::writer_waiting_key(key))
            .query_async(&mut connection)
            .await?;
        // Readers only (score 0): the list also names the name's permits, scored with K.
        let listed: Vec<String> = listed
            .into_iter()
            .filter(|(_, score)| *score == 0.0)
            .map(|(entry, _)| entry)
            .collect();
        let mut pipe = redis::pipe();
        for entry in &listed {
            pipe.cmd("PTTL").arg(entry);
        }
        let ttls: Vec<i64> = if listed.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut connection).await?
        };
        let entries = listed
            .into_iter()
            .zip(ttls)
            .filter(|(_, ttl)| *ttl != -2)
            .map(|(entry, ttl)| (entry, u64::try_from(ttl).ok().map(Duration::from_millis)))
            .collect();
        Ok::<_, redis::RedisError>(Readers::Listed {
            entries,
            writer_waits: waiting != -2,
        })
    };
    match tokio::time::timeout(budget, query).await {
        Err(_) => Readers::Failed(format!("timed out after {}", format_duration(budget))),
        Ok(Err(error)) => Readers::Failed(error.to_string()),
        Ok(Ok(readers)) => readers,
    }
}

impl ReadersAndPermits {
    /// Each live reader entry with the number of nodes it is on.
    fn entries(&self) -> BTreeMap<&str, usize> {
        let mut entries = BTreeMap::new();
        for readers in &self.readers {
            if let Readers::Listed {
                entries: listed, ..
            } = readers
            {
                for (entry, _) in listed {
                    *entries.entry(entry.as_str()).or_default() += 1;
                }
            }
        }
        entries
    }

    /// How many readers hold the lock: those whose entry is on a quorum.
    fn holding_readers(&self) -> usize {
        let quorum = self.quorum;
        self.entries()
            .values()
            .filter(|&&nodes| nodes >= quorum)
            .count()
    }

    fn writer_waits(&self) -> usize {
        self.readers
            .iter()
            .filter(|readers| {
                matches!(
                    readers,
                    Readers::Listed {
                        writer_waits: true,
                        ..
                    }
                )
            })
            .count()
    }

    /// Adds `readers` (and `permits`) to the JSON report.
    pub fn add_json(&self, report: &mut Value, names: &[String]) {
        let nodes: Vec<Value> = names
            .iter()
            .zip(&self.readers)
            .map(|(name, readers)| match readers {
                Readers::Listed {
                    entries,
                    writer_waits,
                } => json!({
                    "node": name,
                    "readers": entries.iter().map(|(entry, ttl)| json!({
                        "entry": entry, "ttl_ms": ttl.map(millis),
                    })).collect::<Vec<_>>(),
                    "writer_waits": writer_waits,
                    "error": null,
                }),
                Readers::Failed(error) => json!({
                    "node": name, "readers": [], "writer_waits": null, "error": error,
                }),
            })
            .collect();
        report["readers"] = json!({
            "holding": self.holding_readers(),
            "entries": self.entries().iter().map(|(entry, nodes)| json!({
                "entry": entry, "nodes": nodes,
            })).collect::<Vec<_>>(),
            "writer_waits_on": self.writer_waits(),
            "nodes": nodes,
        });
        if let Some(slots) = &self.permits {
            let slots: Vec<Value> = slots
                .iter()
                .enumerate()
                .map(|(slot, (_, verdict))| {
                    let (holder, holding) = match verdict {
                        Verdict::Held { token, nodes } => (Some(token.as_str()), *nodes),
                        _ => (None, 0),
                    };
                    json!({
                        "slot": slot, "verdict": verdict.name(),
                        "holder": holder, "holding_nodes": holding,
                    })
                })
                .collect();
            report["permits"] = json!({
                "permits": slots.len(),
                "in_use": self.permits_in_use(),
                "slots": slots,
            });
        }
    }

    /// Who holds the name other than an exclusive holder, for the verdict: its readers,
    /// and its permits when they were read (`--permits K`); `None` when nobody does.
    pub fn holders(&self) -> Option<String> {
        let mut holders = Vec::new();
        let readers = self.holding_readers();
        if readers > 0 {
            holders.push(format!("{readers} reader(s)"));
        }
        if let Some(slots) = self.permits.as_ref().filter(|_| self.permits_in_use() > 0) {
            holders.push(format!(
                "{} of {} permits",
                self.permits_in_use(),
                slots.len()
            ));
        }
        (!holders.is_empty()).then(|| format!("held by {}", holders.join(" and ")))
    }

    /// Whether the permits were read (`--permits K`).
    pub fn permits_read(&self) -> bool {
        self.permits.is_some()
    }

    fn permits_in_use(&self) -> usize {
        self.permits.as_ref().map_or(0, |slots| {
            slots
                .iter()
                .filter(|(_, verdict)| matches!(verdict, Verdict::Held { .. }))
                .count()
        })
    }

    /// Adds the readers (when there are any, or a writer waits) and the permits to the
    /// text report.
    pub fn add_text(&self, text: &mut String) {
        let entries = self.entries();
        let waits = self.writer_waits();
        if !entries.is_empty() || waits > 0 {
            text.push_str(&format!(
                "\nreaders: {} holding (an entry on a quorum of {})",
                self.holding_readers(),
                self.quorum
            ));
            for (entry, nodes) in &entries {
                text.push_str(&format!("\n  {entry}  on {nodes} node(s)"));
            }
            if waits > 0 {
                text.push_str(&format!(
                    "\n  a writer waits (marked on {waits} node(s)): new readers are kept out"
                ));
            }
        }
        if let Some(slots) = &self.permits {
            text.push_str(&format!(
                "\npermits: {} of {} in use",
                self.permits_in_use(),
                slots.len()
            ));
            for (slot, (_, verdict)) in slots.iter().enumerate() {
                let state = match verdict {
                    Verdict::Held { token, nodes } => format!("held by {token} on {nodes} node(s)"),
                    other => other.name().to_owned(),
                };
                text.push_str(&format!("\n  permit {slot}  {state}"));
            }
        }
    }
}
