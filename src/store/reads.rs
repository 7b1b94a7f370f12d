//! Plain reads: totals, counts, Redis time, the earliest due row, the eviction policy, and
//! the published window (R21, R23).

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
    /// Rows dropped because their hook was gone.
    pub dropped: u64,
}

impl Store {
    /// The running totals of the instance.
    pub async fn totals(&self) -> Result<Totals, StoreError> {
        let v: Vec<Option<u64>> = self
            .client()
            .hmget(
                self.ks.stats(),
                vec!["committed", "delivered", "dead_lettered", "dropped"],
            )
            .await?;
        let g = |i: usize| v.get(i).copied().flatten().unwrap_or(0);
        Ok(Totals {
            committed: g(0),
            delivered: g(1),
            dead_lettered: g(2),
            dropped: g(3),
        })
    }

    /// Rows claimed right now (all epochs).
    pub async fn claimed_count(&self) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.claimed()).await?)
    }

    /// Redis server time (ms).
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        let cmd = fred::types::CustomCommand::new_static(
            "TIME",
            fred::types::ClusterHash::FirstKey,
            false,
        );
        let t: Vec<String> = self.client().custom(cmd, Vec::<String>::new()).await?;
        let s: i64 = t.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let us: i64 = t.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        Ok(s * 1000 + us / 1000)
    }

    /// The earliest place in line of any active tenant (ms), if any tenant has rows.
    pub async fn earliest_due_ms(&self) -> Result<Option<i64>, StoreError> {
        let v: Value = self
            .client()
            .zrange(self.ks.tenants(), 0, 0, None, false, None, true)
            .await?;
        Ok(first_score(&v))
    }

    /// True when nothing is claimed and no row is due by Redis time (R23's idle condition).
    pub async fn idle(&self) -> Result<bool, StoreError> {
        let v = self.call(&self.scripts.idle, vec![self.prefix()]).await?;
        let n = |i: usize| v.get(i).and_then(Value::int).unwrap_or(0);
        Ok(n(0) == 0 && (n(1) < 0 || n(1) > n(2)))
    }

    /// Rows waiting in a tenant's due set (due now or later).
    pub async fn pending_count(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.due(tenant)).await?)
    }

    /// The Redis `maxmemory-policy`, read from `INFO memory` (field `maxmemory_policy`), which
    /// servers answer also where `CONFIG` is renamed away, as managed services do (issue
    /// 17.9). `None` only when the server does not report it. Errors: Redis unreachable.
    pub async fn maxmemory_policy(&self) -> Result<Option<String>, StoreError> {
        let info: String = self
            .client()
            .info(Some(fred::types::InfoKind::Memory))
            .await?;
        Ok(info.lines().find_map(|l| {
            l.trim()
                .strip_prefix("maxmemory_policy:")
                .map(|p| p.trim().to_string())
        }))
    }

    /// Publish the leader's window state with a short TTL, for `pressure()` from anywhere
    /// (R21), fenced by the lease `token` like every write (`lua/window.lua`), so a deposed
    /// leader cannot overwrite its successor's state. Errors: [`StoreError::Fenced`].
    pub async fn publish_window(
        &self,
        token: &str,
        json: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        let args = vec![
            self.prefix(),
            token.into(),
            json.into(),
            (ttl_ms as i64).into(),
        ];
        let v = self.call(&self.scripts.window, args).await?;
        match status(&v) {
            "ok" => Ok(()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol("window", format!("status {other:?}"))),
        }
    }
}
