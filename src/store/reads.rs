//! Plain reads: totals, counts, Redis time, the earliest due row, the eviction policy, and
//! the published window.

use super::*;

/// Running totals kept by the scripts in the stats hash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    /// Hooks committed.
    pub committed: u64,
    /// Rows delivered.
    pub delivered: u64,
    /// Rows dead-lettered.
    pub dead_lettered: u64,
    /// Rows dropped: their hook was gone, or their sink entry's filter, edited after the
    /// commit, no longer takes their hook.
    pub dropped: u64,
    /// Hooks committed with a delivery time ahead (`deliver_at`, a delay).
    pub scheduled: u64,
    /// Scheduled hooks cancelled before they were claimed.
    pub cancelled: u64,
}

/// A sink entry's breaker as the leader keeps it in the `breakers` hash (one field per
/// breaker not closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerRead {
    /// Source id.
    pub source: String,
    /// Sink entry index.
    pub sink: u32,
    /// Until when it holds attempts (ms since the epoch, Redis clock); past it, the next
    /// attempt probes (half-open).
    pub until_ms: i64,
    /// How many times it has opened in a row.
    pub opens: u32,
}

impl Store {
    /// The breakers of `tenant`'s sink entries that are not closed, from its partition's
    /// `breakers` hash (call on the tenant's partition). Fields that do not parse are left
    /// out.
    pub async fn tenant_breakers(&self, tenant: &str) -> Result<Vec<BreakerRead>, StoreError> {
        let mut out = Vec::new();
        for (field, snap) in self.load_breakers().await? {
            let mut parts = field.split('\n');
            let (Some(t), Some(source), Some(sink), Some(_module), None) = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            ) else {
                continue;
            };
            if t != tenant {
                continue;
            }
            let Some((until, opens)) = snap.split_once(':') else {
                continue;
            };
            let (Ok(sink), Ok(until_ms), Ok(opens)) = (
                sink.parse::<u32>(),
                until.parse::<i64>(),
                opens.parse::<u32>(),
            ) else {
                continue;
            };
            out.push(BreakerRead {
                source: source.into(),
                sink,
                until_ms,
                opens,
            });
        }
        out.sort_by(|a, b| (&a.source, a.sink).cmp(&(&b.source, b.sink)));
        Ok(out)
    }

    /// The running totals of the instance: the sum over its partitions.
    pub async fn totals(&self) -> Result<Totals, StoreError> {
        let mut sum = Totals::default();
        for p in self.all_partitions() {
            let t = p.partition_totals().await?;
            sum.committed += t.committed;
            sum.delivered += t.delivered;
            sum.dead_lettered += t.dead_lettered;
            sum.dropped += t.dropped;
            sum.scheduled += t.scheduled;
            sum.cancelled += t.cancelled;
        }
        Ok(sum)
    }

    /// The running totals of this store's partition.
    pub async fn partition_totals(&self) -> Result<Totals, StoreError> {
        let v: Vec<Option<u64>> = self
            .client()
            .hmget(
                self.ks.stats(),
                vec![
                    "committed",
                    "delivered",
                    "dead_lettered",
                    "dropped",
                    "scheduled",
                    "cancelled",
                ],
            )
            .await?;
        let g = |i: usize| v.get(i).copied().flatten().unwrap_or(0);
        Ok(Totals {
            committed: g(0),
            delivered: g(1),
            dead_lettered: g(2),
            dropped: g(3),
            scheduled: g(4),
            cancelled: g(5),
        })
    }

    /// Rows claimed right now (all epochs).
    pub async fn claimed_count(&self) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.claimed()).await?)
    }

    /// Redis server time (ms), of the server holding the partition (on a cluster, the
    /// primary of its slot: the clock its scripts read).
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        let slot = fred::util::redis_keyslot(self.ks.lease().as_bytes());
        let cmd = fred::types::CustomCommand::new_static(
            "TIME",
            fred::types::ClusterHash::Custom(slot),
            false,
        );
        let t: Vec<Value> = self.client().custom(cmd, Vec::<String>::new()).await?;
        let r = Reply::new("TIME", &t);
        Ok(r.int(0)? * 1000 + r.int(1)? / 1000)
    }

    /// The earliest place in line of any active tenant (ms), if any tenant has rows.
    pub async fn earliest_due_ms(&self) -> Result<Option<i64>, StoreError> {
        let v: Value = self
            .client()
            .zrange(self.ks.tenants(), 0, 0, None, false, None, true)
            .await?;
        Ok(first_score(&v))
    }

    /// True when nothing is claimed and no row is due by Redis time (the idle condition).
    pub async fn idle(&self) -> Result<bool, StoreError> {
        let v = self.call(&self.scripts.idle, vec![self.prefix()]).await?;
        let r = Reply::new("idle", &v);
        let (claimed, earliest, now) = (r.int(0)?, r.int(1)?, r.int(2)?);
        Ok(claimed == 0 && (earliest < 0 || earliest > now))
    }

    /// Rows waiting in a tenant's due set (due now or later).
    pub async fn pending_count(&self, tenant: &str) -> Result<u64, StoreError> {
        // The tenant's partition.
        let this = self.for_tenant(tenant);
        Ok(this.client().zcard(this.ks.due(tenant)).await?)
    }

    /// The Redis `maxmemory-policy`, read from `INFO memory` (field `maxmemory_policy`), which
    /// servers answer also where `CONFIG` is renamed away, as managed services do (issue
    /// 17.9). `None` only when the server does not report it. Errors: Redis unreachable.
    ///
    /// On a cluster every primary is asked (each holds some partitions): the first one with
    /// an evicting policy answers `"<policy> on <host:port>"`, else `"noeviction"`; `None`
    /// when no primary reports it. Errors also when no primary is connected.
    pub async fn maxmemory_policy(&self) -> Result<Option<String>, StoreError> {
        let client = self.client();
        if self.topology != Topology::Cluster {
            let info: String = client.info(Some(fred::types::InfoKind::Memory)).await?;
            return Ok(policy_of(&info));
        }
        let primaries = client.active_connections();
        if primaries.is_empty() {
            return Err(StoreError::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Routing,
                "no cluster primary is connected",
            )));
        }
        let mut seen = None;
        for server in primaries {
            let info: String = client
                .with_cluster_node(server.clone())
                .info(Some(fred::types::InfoKind::Memory))
                .await?;
            match policy_of(&info) {
                Some(p) if p != "noeviction" => return Ok(Some(format!("{p} on {server}"))),
                Some(p) => seen = Some(p),
                None => {}
            }
        }
        Ok(seen)
    }

    /// Write breaker snapshots for the next term (`lua/breakers.lua`):
    /// `(sink key, snapshot)`, an empty snapshot deleting the key's entry; fenced by the lease
    /// `token`. Errors: [`StoreError::Fenced`].
    pub async fn save_breakers(
        &self,
        token: &str,
        changes: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut args = vec![self.prefix(), token.into()];
        for (k, v) in changes {
            args.push(k.as_str().into());
            args.push(v.as_str().into());
        }
        let v = self.call(&self.scripts.breakers, args).await?;
        match status(&v) {
            "ok" => Ok(()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol(
                "breakers",
                format!("status {other:?}"),
            )),
        }
    }

    /// Every breaker snapshot kept for a new term: `(sink key, snapshot)`.
    pub async fn load_breakers(&self) -> Result<Vec<(String, String)>, StoreError> {
        let m: std::collections::HashMap<String, String> =
            self.client().hgetall(self.ks.breakers()).await?;
        Ok(m.into_iter().collect())
    }

    /// Publish the leader's window state with a short TTL, for `pressure()` from anywhere
    ///, fenced by the lease `token` like every write (`lua/window.lua`), so a deposed
    /// leader cannot overwrite its successor's state; an empty `json` writes the settings
    /// only. `settings` (name, value) go to the partition's `settings` hash, which the scripts
    /// read instead of trusting their callers (`max_hook_bytes` for commit, `cc_retention_ms`
    /// for settle). Errors: [`StoreError::Fenced`].
    pub async fn publish_window(
        &self,
        token: &str,
        json: &str,
        ttl_ms: u64,
        settings: &[(&str, u64)],
    ) -> Result<(), StoreError> {
        let mut args = vec![
            self.prefix(),
            token.into(),
            json.into(),
            (ttl_ms as i64).into(),
        ];
        for (name, value) in settings {
            args.push((*name).into());
            args.push((*value as i64).into());
        }
        let v = self.call(&self.scripts.window, args).await?;
        match status(&v) {
            "ok" => Ok(()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol("window", format!("status {other:?}"))),
        }
    }
}

/// The `maxmemory_policy` field of an `INFO memory` reply.
fn policy_of(info: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.trim()
            .strip_prefix("maxmemory_policy:")
            .map(|p| p.trim().to_string())
    })
}
