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
    /// Read hooks for delivery with one pipelined round trip (the hash and the body key of
    /// each): `None` where a hook is gone, `Some(Err(what))` where its keys hold something
    /// else than a readable hook (another type, a missing or garbage field: a malformed
    /// hook). Errors: Redis failing as a whole.
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
            let _: () = pipe.get(self.ks.body(*id)).await?;
        }
        let replies = per_key_replies(pipe.try_all::<Value>().await, 2 * ids.len())?;
        let mut replies = replies.into_iter();
        let mut out = Vec::with_capacity(ids.len());
        while let (Some(hash), Some(body)) = (replies.next(), replies.next()) {
            out.push(match hash {
                Ok(v) => decode_hook(v, body),
                Err(e) => Some(Err(e)),
            });
        }
        Ok(out)
    }

    /// Record claim-check references with their hooks (field `cc`, R18) in one call of
    /// `lua/claim_refs.lua`, fenced by the lease `token` (issue 17.12). Returns the references
    /// whose hook is gone (not recorded: the caller deletes those blobs).
    /// Errors: [`StoreError::Fenced`] for a deposed leader.
    pub async fn set_claim_refs(
        &self,
        token: &str,
        refs: &[(u64, String)],
    ) -> Result<Vec<String>, StoreError> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = Vec::with_capacity(2 + 2 * refs.len());
        args.extend([self.prefix(), token.into()]);
        for (hook, url) in refs {
            args.push((*hook as i64).into());
            args.push(url.as_str().into());
        }
        let v = self.call(&self.scripts.claim_refs, args).await?;
        match status(&v) {
            "ok" => Ok(v.iter().skip(1).map(Value::text).collect()),
            "fenced" => Err(StoreError::Fenced),
            other => Err(StoreError::protocol(
                "claim_refs",
                format!("status {other:?}"),
            )),
        }
    }

    /// The lane id of an ordered row (hook field `L<sink index at commit>`), if any (R10).
    pub async fn lane_of(&self, hook: u64, sink: u32) -> Result<Option<String>, StoreError> {
        Ok(self
            .client()
            .hget(self.ks.hook(hook), format!("L{sink}"))
            .await?)
    }
}
