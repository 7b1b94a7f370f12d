//! Tenant tokens in Redis ([`crate::tokens`]): one hash per token under the instance's own
//! keys (`token:<id>`: the token's SHA-256 and its record, `PEXPIREAT` a week past its
//! expiry, so its holder can be told it expired) and the set of ids (`tokens`), for
//! listing. Plain commands, no script: a token is usable only
//! when its hash exists with the right digest and expiry, so each sequence below fails
//! closed when it stops half way (a record without its index entry is still verified and
//! revocable by id; an index entry without a record is dropped at the next list).

use super::*;
use crate::tokens::{Scope, TokenInfo};
use std::collections::HashMap;

/// How long a token's record is kept past its expiry, ms (7 days): long enough for its
/// holder to be told the token expired rather than that it is wrong, and for `token list`
/// to show it expired; it opens nothing then.
const EXPIRED_TOKEN_KEPT_MS: i64 = 7 * 24 * 3600 * 1000;

/// A token's record as read back, with the digest it must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// SHA-256 of the token, lowercase hex.
    pub digest: String,
    /// The record.
    pub info: TokenInfo,
}

impl Store {
    /// Store a minted token's record and digest, expiring at `info.expires_at_ms`.
    pub async fn put_token(&self, info: &TokenInfo, digest: &str) -> Result<(), StoreError> {
        let key = self.ks.token(&info.id);
        let pipe = self.client().pipeline();
        let fields: Vec<(&str, String)> = vec![
            ("h", digest.to_string()),
            ("tenant", info.tenant.clone()),
            ("scopes", crate::tokens::scopes_csv(&info.scopes)),
            ("name", info.name.clone()),
            ("created", info.created_at_ms.to_string()),
            ("expires", info.expires_at_ms.to_string()),
        ];
        let _: () = pipe.hset(&key, fields).await?;
        let kept_until = info.expires_at_ms.saturating_add(EXPIRED_TOKEN_KEPT_MS);
        let _: () = pipe.pexpire_at(&key, kept_until, None).await?;
        let _: () = pipe.sadd(self.ks.tokens(), info.id.as_str()).await?;
        let _: Vec<Value> = pipe.all().await?;
        Ok(())
    }

    /// The record of token `id`, `None` when there is none (never minted, revoked, expired,
    /// or a record this build cannot read: a token is refused rather than half-understood).
    pub async fn token(&self, id: &str) -> Result<Option<StoredToken>, StoreError> {
        let h: HashMap<String, String> = self.client().hgetall(self.ks.token(id)).await?;
        Ok(decode_token(id, &h))
    }

    /// Every token's record (of `tenant` only, when given), by tenant then creation time;
    /// ids whose record is gone (expired) are dropped from the index.
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenInfo>, StoreError> {
        let ids: Vec<String> = self.client().smembers(self.ks.tokens()).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for id in &ids {
            let _: () = pipe.hgetall(self.ks.token(id)).await?;
        }
        let records: Vec<HashMap<String, String>> = pipe.all().await?;
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (id, h) in ids.iter().zip(records) {
            match decode_token(id, &h) {
                Some(t) => out.push(t.info),
                None if h.is_empty() => gone.push(id.clone()),
                None => tracing::warn!(id, "token record unreadable; it opens nothing"),
            }
        }
        if !gone.is_empty() {
            let _: i64 = self.client().srem(self.ks.tokens(), gone).await?;
        }
        out.retain(|t| tenant.is_none_or(|want| t.tenant == want));
        out.sort_by(|a, b| (&a.tenant, a.created_at_ms).cmp(&(&b.tenant, b.created_at_ms)));
        Ok(out)
    }

    /// Revoke token `id`: its record is deleted, so it opens nothing from the next check on
    /// (workers that verified it within `admin::TOKEN_CACHE` may accept it that much longer).
    /// `false` when there was no such token.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, StoreError> {
        let deleted: i64 = self.client().del(self.ks.token(id)).await?;
        let _: i64 = self.client().srem(self.ks.tokens(), id).await?;
        Ok(deleted > 0)
    }
}

/// A record read back; `None` when a field is missing or malformed.
fn decode_token(id: &str, h: &HashMap<String, String>) -> Option<StoredToken> {
    let scopes = h
        .get("scopes")?
        .split(',')
        .map(str::parse::<Scope>)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(StoredToken {
        digest: h.get("h")?.clone(),
        info: TokenInfo {
            id: id.to_string(),
            tenant: h.get("tenant")?.clone(),
            scopes,
            name: h.get("name").cloned().unwrap_or_default(),
            created_at_ms: h.get("created")?.parse().ok()?,
            expires_at_ms: h.get("expires")?.parse().ok()?,
        },
    })
}
