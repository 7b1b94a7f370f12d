//! Dead letters: per-tenant Redis streams written by `settle.lua` (R8, R9, R19).

use crate::store::{Store, StoreError};
use fred::prelude::*;
use fred::types::Value;
use std::collections::BTreeMap;

/// One dead letter as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetter {
    /// Stream entry id (`<ms>-<n>`).
    pub id: String,
    /// Fields: row, hook, tenant, source, sink, module, reason, attempts, first, error, at.
    pub fields: BTreeMap<String, String>,
}

impl DeadLetter {
    /// A field, or "".
    pub fn get(&self, k: &str) -> &str {
        self.fields.get(k).map(String::as_str).unwrap_or("")
    }
}

/// Tenants that have dead letters.
pub async fn tenants(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut t: Vec<String> = store
        .client()
        .smembers(store.keyspace().dlq_tenants())
        .await?;
    t.sort();
    Ok(t)
}

/// Up to `limit` dead letters of `tenant`, oldest first.
pub async fn list(store: &Store, tenant: &str, limit: u64) -> Result<Vec<DeadLetter>, StoreError> {
    let v: Value = store
        .client()
        .xrange(store.keyspace().dlq(tenant), "-", "+", Some(limit))
        .await?;
    let mut out = Vec::new();
    if let Value::Array(entries) = v {
        for e in entries {
            let Value::Array(pair) = e else { continue };
            let mut it = pair.into_iter();
            let (Some(id), Some(Value::Array(kv))) = (it.next(), it.next()) else {
                continue;
            };
            let mut fields = BTreeMap::new();
            for c in kv.chunks_exact(2) {
                fields.insert(
                    c[0].as_string().unwrap_or_default(),
                    c[1].as_string().unwrap_or_default(),
                );
            }
            out.push(DeadLetter {
                id: id.as_string().unwrap_or_default(),
                fields,
            });
        }
    }
    Ok(out)
}

/// Number of dead letters of `tenant`.
pub async fn count(store: &Store, tenant: &str) -> Result<u64, StoreError> {
    Ok(store.client().xlen(store.keyspace().dlq(tenant)).await?)
}
