//! Partitions: one store addresses every partition of its instance over one
//! pool; the partition count is recorded in Redis at first start; `heartbeat.lua` tells
//! every worker who else is alive and how many partitions each leads.

use super::*;
use crate::keyspace::partition_of;
use std::borrow::Cow;

/// A live worker as its last heartbeat said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    /// Its node id.
    pub node: String,
    /// Partitions it leads.
    pub leads: u32,
}

/// What one heartbeat answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkersSeen {
    /// Redis time of the heartbeat (ms).
    pub now_ms: i64,
    /// Every live worker, sorted by node id.
    pub workers: Vec<LiveWorker>,
}

impl Store {
    /// This store for an instance of `partitions` partitions (`partitions` of the config):
    /// [`Store::for_tenant`] routes by it. It stays on its current partition.
    pub fn with_partitions(mut self, partitions: u32) -> Store {
        self.partitions = partitions.max(1);
        self
    }

    /// The instance's partition count this store routes by.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The partition this store addresses.
    pub fn partition_index(&self) -> u32 {
        self.ks.partition()
    }

    /// The same store on partition `n` (same pool, same scripts: a cheap clone).
    pub fn partition(&self, n: u32) -> Store {
        let mut s = self.clone();
        s.ks = self.ks.with_partition(n);
        s
    }

    /// The store of every partition, in order (for operations over the whole instance).
    pub fn all_partitions(&self) -> Vec<Store> {
        (0..self.partitions).map(|n| self.partition(n)).collect()
    }

    /// The store of `tenant`'s partition ([`partition_of`]): this one when it is already there
    /// (always with one partition).
    pub fn for_tenant(&self, tenant: &str) -> Cow<'_, Store> {
        let p = partition_of(tenant, self.partitions);
        if p == self.ks.partition() {
            Cow::Borrowed(self)
        } else {
            Cow::Owned(self.partition(p))
        }
    }

    /// Check this store's partition count against the one recorded in Redis; `record`
    /// (a worker's start) records it when none is (`SET NX`: the instance's first start).
    /// Errors: [`PartitionsError::Mismatch`] when they differ (the message says how to
    /// change it); a recorded value that is no count is a [`StoreError`] naming the key.
    pub async fn check_partitions(&self, record: bool) -> Result<(), PartitionsError> {
        let key = self.ks.partition_count();
        let c = self.client();
        // Read first: a full Redis (maxmemory under noeviction) still answers reads, and a
        // leader must still be elected on it to drain it.
        let mut recorded: Option<String> = c.get(&key).await.map_err(StoreError::from)?;
        if recorded.is_none() && record {
            let set: Result<Option<String>, StoreError> = c
                .set(
                    &key,
                    self.partitions.to_string(),
                    None,
                    Some(fred::types::SetOptions::NX),
                    false,
                )
                .await
                .map_err(StoreError::from);
            match set {
                Ok(Some(_)) => return Ok(()),
                // Someone recorded it meanwhile: compare with theirs.
                Ok(None) => recorded = c.get(&key).await.map_err(StoreError::from)?,
                // Full: nothing can be routed wrongly before someone records it.
                Err(e) if e.kind() == "oom" => {
                    tracing::warn!(%key, "redis is full: the partition count is recorded by a later start");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let Some(recorded) = recorded else {
            return Ok(()); // not recorded (yet): a worker's first start records it
        };
        let recorded: u32 = recorded.trim().parse().map_err(|_| {
            StoreError::protocol(
                "partitions",
                format!("{key} holds {recorded:?}, not a count"),
            )
        })?;
        if recorded == self.partitions {
            return Ok(());
        }
        Err(PartitionsError::Mismatch {
            instance: self.ks.instance().to_string(),
            configured: self.partitions,
            recorded,
            key,
        })
    }

    /// `heartbeat.lua`: announce `node` as alive for `ttl_ms` (0: it leaves) leading `leads`
    /// partitions, and read every live worker.
    pub async fn heartbeat(
        &self,
        node: &str,
        ttl_ms: u64,
        leads: u32,
    ) -> Result<WorkersSeen, StoreError> {
        let prefix = format!("ankusa:{{{}}}:", self.ks.instance());
        let args = vec![
            Value::from(prefix),
            node.into(),
            (ttl_ms as i64).into(),
            i64::from(leads).into(),
        ];
        let keys = vec![self.ks.workers(), self.ks.leads()];
        let v = self.call_keys(&self.scripts.heartbeat, keys, args).await?;
        if status(&v) != "ok" {
            return Err(StoreError::protocol(
                "heartbeat",
                format!("status {:?}", status(&v)),
            ));
        }
        let r = Reply::new("heartbeat", &v);
        let now_ms = r.int(1)?;
        let mut workers = Vec::new();
        let mut i = 2;
        while i + 1 < v.len() {
            workers.push(LiveWorker {
                node: r.text(i)?,
                leads: r.count(i + 1)? as u32,
            });
            i += 2;
        }
        workers.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(WorkersSeen { now_ms, workers })
    }
}
