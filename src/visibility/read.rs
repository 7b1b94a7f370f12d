//! Raw reads of rows, hooks and attempts behind `hooks show`, `rows list` and `tenants top`.

use super::*;

pub(super) fn store_err(e: fred::error::Error) -> Error {
    Error::Store(StoreError::from(e))
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        Value::Double(d) => Some(*d as i64),
        Value::String(s) => s.parse::<f64>().ok().map(|f| f as i64),
        Value::Bytes(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map(|f| f as i64),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

pub(super) fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// `(member, score)` pairs of a `ZRANGE … WITHSCORES` reply, flat (RESP2) or nested (RESP3).
pub(super) fn scored(v: Value) -> Vec<(String, i64)> {
    let a = items(v);
    if a.first().is_some_and(|x| matches!(x, Value::Array(_))) {
        a.into_iter()
            .filter_map(|p| {
                let p = items(p);
                Some((text(p.first()?)?, int(p.get(1)?)?))
            })
            .collect()
    } else {
        a.chunks_exact(2)
            .filter_map(|c| Some((text(&c[0])?, int(&c[1])?)))
            .collect()
    }
}

/// The retry state of rows, read in one pipelined round trip: claimed or not, due score,
/// and the row hash (`a`, `f`, `e`, `p`).
pub(super) struct RowRead {
    pub(super) claimed: bool,
    pub(super) due: Option<i64>,
    pub(super) attempts: u32,
    pub(super) first: Option<i64>,
    pub(super) error: Option<String>,
    pub(super) parked_until: Option<i64>,
}

pub(super) async fn read_rows(
    store: &Store,
    tenant: &str,
    rows: &[String],
) -> Result<Vec<RowRead>, Error> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ks = store.keyspace();
    let pipe = store.client().pipeline();
    for r in rows {
        let _: () = pipe
            .zscore(ks.claimed(), format!("{tenant}/{r}"))
            .await
            .map_err(store_err)?;
        let _: () = pipe.zscore(ks.due(tenant), r).await.map_err(store_err)?;
        let _: () = pipe
            .hmget(ks.row(r), vec!["a", "f", "e", "p"])
            .await
            .map_err(store_err)?;
    }
    let replies: Vec<Value> = pipe.all().await.map_err(store_err)?;
    Ok(replies
        .chunks(3)
        .map(|c| {
            let h = c.get(2).cloned().map(items).unwrap_or_default();
            let f = |i: usize| h.get(i).cloned().unwrap_or(Value::Null);
            RowRead {
                claimed: c.first().is_some_and(|v| !matches!(v, Value::Null)),
                due: c.get(1).and_then(int),
                attempts: int(&f(0)).unwrap_or(0).max(0) as u32,
                first: int(&f(1)),
                error: text(&f(2)).filter(|e| !e.is_empty()),
                parked_until: int(&f(3)),
            }
        })
        .collect())
}

impl RowRead {
    /// The state of a row found in the due set or the claimed set; `None` when in neither.
    pub(super) fn state(&self, now: i64) -> Option<RowState> {
        if self.claimed {
            return Some(RowState::Claimed);
        }
        let due = self.due?;
        Some(
            if (self.attempts > 0 && self.parked_until == Some(due))
                || (self.attempts == 0 && due > now)
            {
                RowState::Parked
            } else if self.attempts > 0 {
                RowState::Retrying
            } else {
                RowState::Due
            },
        )
    }
}

/// The fields of a stored hook (live `hook:<id>` or kept `kept:<id>`) read by the queries.
pub(super) struct HookRead {
    pub(super) stored: &'static str,
    pub(super) tenant: String,
    pub(super) source: String,
    pub(super) committed_at_ms: i64,
    pub(super) modules: Vec<String>,
    pub(super) body: bytes::Bytes,
    pub(super) headers: String,
    pub(super) lanes: Vec<Option<String>>,
    /// The event type the producer set (`et`, P9), if any.
    pub(super) event_type: Option<String>,
}

pub(super) async fn read_hook(store: &Store, hook: u64) -> Result<Option<HookRead>, Error> {
    let ks = store.keyspace();
    for (key, body_key, stored) in [
        (ks.hook(hook), ks.body(hook), "live"),
        (ks.kept(hook), ks.kept_body(hook), "kept"),
    ] {
        let v: Result<HashMap<String, Value>, _> = store.client().hgetall(&key).await;
        let Ok(f) = v else { continue }; // another type than a hash: not a readable hook
        if f.is_empty() {
            continue;
        }
        let s = |k: &str| f.get(k).and_then(text).unwrap_or_default();
        let modules: Vec<String> = s("k")
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        let lanes = (0..modules.len())
            .map(|i| f.get(&format!("L{i}")).and_then(text))
            .collect();
        // The body apart (issue 12); a hook from before keeps it in `b`.
        let body = match f.get("b") {
            Some(Value::Bytes(b)) => b.clone(),
            Some(Value::String(t)) => bytes::Bytes::copy_from_slice(t.as_bytes()),
            _ => match store
                .client()
                .get::<Option<bytes::Bytes>, _>(&body_key)
                .await
            {
                Ok(b) => b.unwrap_or_default(),
                // Another type than a string: shown empty, like a hash without `b`.
                Err(e) if e.details().starts_with("WRONGTYPE") => bytes::Bytes::new(),
                Err(e) => return Err(store_err(e)),
            },
        };
        return Ok(Some(HookRead {
            stored,
            tenant: s("tn"),
            source: s("s"),
            committed_at_ms: f.get("t").and_then(int).unwrap_or(0),
            modules,
            body,
            headers: s("h"),
            lanes,
            event_type: f.get("et").and_then(text).filter(|e| !e.is_empty()),
        }));
    }
    Ok(None)
}

/// A hook's attempt records, oldest first (records that do not parse are left out).
pub(super) async fn read_attempts(store: &Store, hook: u64) -> Result<Vec<AttemptRecord>, Error> {
    let v: Vec<String> = store
        .client()
        .lrange(store.keyspace().attempts(hook), 0, -1)
        .await
        .map_err(store_err)?;
    Ok(v.iter()
        .filter_map(|r| serde_json::from_str(r).ok())
        .collect())
}
