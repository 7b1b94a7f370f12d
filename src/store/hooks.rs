//! Reading stored hooks for a claim, claim-check references and ordered lanes.

use super::*;

/// A hook read back for delivery.
#[derive(Debug, Clone)]
pub struct StoredHook {
    /// Body bytes, exactly as committed.
    pub body: Bytes,
    /// Producer headers, decoded once here for every attempt and sink of the hook.
    pub headers: crate::sinks::ProducerHeaders,
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Sink modules at commit, by index.
    pub modules: Vec<String>,
    /// The claim-check reference of the body (field `cc`), once checked in.
    pub claim_ref: Option<String>,
    /// The event type the producer set (field `et`), delivered with every attempt.
    pub event_type: Option<String>,
}

impl Store {
    /// Read hooks for delivery with `lua/hooks.lua` (the hash and the body key of each):
    /// `None` where a hook is gone, `Some(Err(what))` where its keys hold something else
    /// than a readable hook (another type, a missing or garbage field: a malformed hook).
    /// Each call stops once 3/5 of `budget` has passed (`dispatch.script_budget_ms`) and
    /// the rest is read by the next, so no call of a big page blocks Redis for long; `None`
    /// reads the page in one call. Errors: Redis failing as a whole;
    /// [`StoreError::Protocol`] for a reply of another shape.
    pub async fn fetch_hooks(
        &self,
        ids: &[u64],
        budget: Option<std::time::Duration>,
    ) -> Result<Vec<Option<Result<StoredHook, String>>>, StoreError> {
        let budget_us = budget.map_or(0, |b| b.as_micros().clamp(1, i64::MAX as u128) as i64);
        let mut out = Vec::with_capacity(ids.len());
        let mut left = ids;
        while !left.is_empty() {
            let mut args: Vec<Value> = Vec::with_capacity(3 + HOOK_FIELDS.len() + left.len());
            args.extend([
                self.prefix(),
                budget_us.into(),
                (HOOK_FIELDS.len() as i64).into(),
            ]);
            args.extend(HOOK_FIELDS.iter().map(|f| Value::from(*f)));
            args.extend(left.iter().map(|id| Value::from(*id as i64)));
            let v = self.call(&self.scripts.hooks, args).await?;
            if v.is_empty() || v.len() > left.len() {
                return Err(StoreError::protocol(
                    "hooks",
                    format!("{} hooks answered for {}", v.len(), left.len()),
                ));
            }
            if v.len() < left.len() {
                metrics::counter!("ankusa_script_budget_stops_total", "script" => "hooks")
                    .increment(1);
            }
            left = &left[v.len()..];
            for h in v {
                out.push(decode_hook_reply(h)?);
            }
        }
        Ok(out)
    }

    /// Record claim-check references with their hooks (field `cc`) in one call of
    /// `lua/claim_refs.lua`, fenced by the lease `token`. Returns the references
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

    /// The lane id of an ordered row (hook field `L<sink index at commit>`), if any.
    pub async fn lane_of(&self, hook: u64, sink: u32) -> Result<Option<String>, StoreError> {
        Ok(self
            .client()
            .hget(self.ks.hook(hook), format!("L{sink}"))
            .await?)
    }
}
