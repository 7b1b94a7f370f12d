//! A full Redis (`maxmemory` reached under `noeviction`): whether it admits commits
//! (`lua/admit.lua`), how many body bytes each tenant holds (the counts `commit.lua`,
//! `settle.lua` and `dlq_purge.lua` keep), and delivered hooks kept for resend giving way
//! (`lua/kept.lua`).

use super::*;

/// What one [`Store::trim_kept`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeptTrim {
    /// Kept hooks dropped.
    pub dropped: u64,
    /// Their body bytes.
    pub freed_bytes: u64,
    /// Body bytes of the partition's kept hooks left.
    pub kept_bytes: u64,
    /// Kept hooks left.
    pub kept_hooks: u64,
}

/// Body bytes one tenant holds in a partition ([`Store::tenant_bytes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantBytes {
    /// Bodies of its stored hooks: rows to deliver, dead letters.
    pub bytes: u64,
    /// Bodies of its delivered hooks kept for resend.
    pub kept_bytes: u64,
}

/// The bytes the memory probe carries: Redis reads as full while a commit this size would
/// be refused.
pub(super) const ADMIT_PROBE_BYTES: usize = 64 << 10;

impl Store {
    /// Whether this partition's Redis admits a commit of [`ADMIT_PROBE_BYTES`] now (one call
    /// of `lua/admit.lua`, which a full Redis refuses exactly when it refuses such a commit): `Ok(None)` it does;
    /// `Ok(Some(why))` it refuses commits for memory (Redis' `OOM …` text). Errors: Redis
    /// failing otherwise (unreachable, loading…).
    pub async fn commits_refused(&self) -> Result<Option<String>, StoreError> {
        // The probe carries a commit's worth of bytes: a full Redis that still takes a tiny
        // write but refuses a real commit reads as full.
        static PAYLOAD: std::sync::LazyLock<Bytes> =
            std::sync::LazyLock::new(|| Bytes::from(vec![0u8; ADMIT_PROBE_BYTES]));
        let args = vec![self.prefix(), Value::Bytes(PAYLOAD.clone())];
        match self.call(&self.scripts.admit, args).await {
            Ok(v) if status(&v) == "ok" => Ok(None),
            Ok(v) => Err(StoreError::protocol(
                "admit",
                format!("status {:?}", status(&v)),
            )),
            Err(e) if e.kind() == "oom" => Ok(Some(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Drop delivered hooks kept for resend (one call of `lua/kept.lua`): those kept longer
    /// than `max_age_ms` ago, then the oldest while the partition's kept bytes are over
    /// `budget` (`None`: only the aged; `Some(0)`: all), at most `limit` hooks; with
    /// `records`, their attempt records too (what a full Redis needs back).
    pub async fn trim_kept(
        &self,
        max_age_ms: u64,
        budget: Option<u64>,
        limit: u32,
        records: bool,
    ) -> Result<KeptTrim, StoreError> {
        let budget: Value = match budget {
            Some(b) => (b.min(i64::MAX as u64) as i64).into(),
            None => "".into(),
        };
        let v = self
            .call(
                &self.scripts.kept,
                vec![
                    self.prefix(),
                    (max_age_ms.min(i64::MAX as u64) as i64).into(),
                    budget,
                    i64::from(limit).into(),
                    if records { "1" } else { "" }.into(),
                ],
            )
            .await?;
        if status(&v) != "ok" {
            return Err(StoreError::protocol(
                "kept",
                format!("status {:?}", status(&v)),
            ));
        }
        let r = Reply::new("kept", &v);
        Ok(KeptTrim {
            dropped: r.count(1)?,
            freed_bytes: r.count(2)?,
            kept_bytes: r.count(3)?,
            kept_hooks: r.count(4)?,
        })
    }

    /// Body bytes per tenant in this partition, from the counts the scripts keep (hash
    /// `tenant_bytes` and `kept_bytes`, two reads whatever the number of tenants). Tenants
    /// holding none are absent; a count that is not a number reads as 0.
    pub async fn tenant_bytes(
        &self,
    ) -> Result<std::collections::BTreeMap<String, TenantBytes>, StoreError> {
        let c = self.client();
        let held: std::collections::HashMap<String, String> =
            c.hgetall(self.ks.tenant_bytes()).await?;
        let kept: std::collections::HashMap<String, String> =
            c.hgetall(self.ks.kept_bytes()).await?;
        let mut out = std::collections::BTreeMap::<String, TenantBytes>::new();
        for (t, v) in held {
            out.entry(t).or_default().bytes = v.parse::<i64>().unwrap_or(0).max(0) as u64;
        }
        for (t, v) in kept {
            out.entry(t).or_default().kept_bytes = v.parse::<i64>().unwrap_or(0).max(0) as u64;
        }
        Ok(out)
    }
}
