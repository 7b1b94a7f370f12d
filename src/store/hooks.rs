//! Reading stored hooks for a claim, claim-check references (R18) and ordered lanes (R10).

use super::*;

/// A hook read back for delivery.
#[derive(Debug, Clone)]
pub struct StoredHook {
    /// Body bytes, exactly as committed.
    pub body: Bytes,
    /// Producer headers (JSON object text, or empty).
    pub headers: String,
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Sink modules at commit, by index.
    pub modules: Vec<String>,
    /// The claim-check reference of the body (field `cc`), once checked in (R18).
    pub claim_ref: Option<String>,
}

impl Store {
    /// Read hooks for delivery with one pipelined round trip: `None` where a hook is gone,
    /// `Some(Err(what))` where its key holds something else than a readable hook (another
    /// type, a missing or garbage field: a malformed hook). Errors: Redis failing as a whole.
    pub async fn fetch_hooks(
        &self,
        ids: &[u64],
    ) -> Result<Vec<Option<Result<StoredHook, String>>>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for id in ids {
            let _: () = pipe.hmget(self.ks.hook(*id), HOOK_FIELDS.to_vec()).await?;
        }
        let replies = per_key_replies(pipe.try_all::<Value>().await, ids.len())?;
        Ok(replies
            .into_iter()
            .map(|r| match r {
                Ok(v) => decode_hook(v),
                Err(e) => Some(Err(e)),
            })
            .collect())
    }

    /// Record claim-check references with their hooks (field `cc`, R18) in one pipelined
    /// call. Only call it while a row of each hook is claimed, so the hook exists.
    pub async fn set_claim_refs(&self, refs: &[(u64, String)]) -> Result<(), StoreError> {
        if refs.is_empty() {
            return Ok(());
        }
        let pipe = self.client().pipeline();
        for (hook, url) in refs {
            let _: () = pipe.hset(self.ks.hook(*hook), ("cc", url.as_str())).await?;
        }
        let _: Vec<Value> = pipe.all().await?;
        Ok(())
    }

    /// The lane id of an ordered row (hook field `L<sink index at commit>`), if any (R10).
    pub async fn lane_of(&self, hook: u64, sink: u32) -> Result<Option<String>, StoreError> {
        Ok(self
            .client()
            .hget(self.ks.hook(hook), format!("L{sink}"))
            .await?)
    }
}
