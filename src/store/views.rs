//! The read side's plain reads: dead-letter streams, the retry state of rows, stored and
//! kept hooks, the attempt history, the line of tenants and their due sets. `dlq/`,
//! `visibility/` and `admin/` reach Redis only through these (and the scripts' wrappers);
//! each reply is decoded here, once.

use super::*;
use std::collections::{BTreeMap, HashMap};

/// One entry of a dead-letter stream: its id (`<ms>-<n>`) and its fields as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    /// The entry id.
    pub id: String,
    /// Field → value (a value that is not UTF-8 is read lossily).
    pub fields: BTreeMap<String, String>,
}

/// The retry state of one row: claimed or not, its due score, and its row hash (`a`, `f`,
/// `e`, `p`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowRead {
    /// In the partition's `claimed` set.
    pub claimed: bool,
    /// Its score in the tenant's due set, ms (Redis clock); `None` when not due.
    pub due: Option<i64>,
    /// Attempts made (`a`).
    pub attempts: u32,
    /// First attempt, ms (`f`).
    pub first: Option<i64>,
    /// The last attempt's error (`e`), if not empty.
    pub error: Option<String>,
    /// Parked until, ms (`p`): a breaker or rate limit parked it since.
    pub parked_until: Option<i64>,
    /// Its hook's delivery time, ms (`da`): set for a scheduled hook.
    pub scheduled_at: Option<i64>,
}

/// A stored hook as the read side shows it: the live `hook:<id>` hash or the kept
/// `kept:<id>` one, with its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRecord {
    /// Read from `kept:<id>` (delivered, kept for resend) rather than the live hash.
    pub kept: bool,
    /// Tenant id (`tn`).
    pub tenant: String,
    /// Source id (`s`).
    pub source: String,
    /// Commit time, ms (`t`); 0 when unreadable.
    pub committed_at_ms: i64,
    /// Sink modules at commit, by index (`k`).
    pub modules: Vec<String>,
    /// The body: the hash's own `b` (a hook from before bodies moved apart), else the body
    /// key; `None` when neither holds one.
    pub body: Option<Bytes>,
    /// Producer headers, JSON object text (`h`), or empty.
    pub headers: String,
    /// The lane of each sink entry (`L<i>`), by index.
    pub lanes: Vec<Option<String>>,
    /// The event type the producer set (`et`), if any.
    pub event_type: Option<String>,
    /// Rows of the hook still pending or claimed (`n`).
    pub rows_left: i64,
    /// Dead letters that reference the hook (`d`).
    pub dead_letters: i64,
}

fn int(v: &Value) -> Option<i64> {
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// A hook's attempt records with what identifies it ([`Store::recent_attempts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookAttempts {
    /// Hook id.
    pub hook: u64,
    /// Its source (empty when the hook and its kept copy are gone).
    pub source: String,
    /// Its event type, when its producer set one (and it is not gone).
    pub event_type: Option<String>,
    /// Its attempt records, oldest first.
    pub records: Vec<AttemptRecord>,
}

/// A tenant's due set in brief ([`Store::due_summaries`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DueSummary {
    /// Rows in the due set (due now or later).
    pub rows: u64,
    /// Of those, due now.
    pub due_now: u64,
    /// The earliest row's due time, ms; none when the set is empty.
    pub earliest_ms: Option<i64>,
}

/// `(member, score)` pairs of a `ZRANGE … WITHSCORES` reply, flat (RESP2) or nested (RESP3).
fn scored(v: Value) -> Vec<(String, i64)> {
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

/// The entries of an `XRANGE` / `XREVRANGE` reply; malformed entries are left out.
pub(super) fn stream_entries(v: Value) -> Vec<StreamEntry> {
    let mut out = Vec::new();
    let Value::Array(entries) = v else { return out };
    for e in entries {
        let Value::Array(pair) = e else { continue };
        let mut it = pair.into_iter();
        let (Some(id), Some(kv)) = (it.next(), it.next()) else {
            continue;
        };
        let Value::Array(kv) = kv else { continue };
        let mut fields = BTreeMap::new();
        for c in kv.chunks_exact(2) {
            fields.insert(
                c[0].as_string().unwrap_or_default(),
                c[1].as_string().unwrap_or_default(),
            );
        }
        out.push(StreamEntry {
            id: id.as_string().unwrap_or_default(),
            fields,
        });
    }
    out
}

impl Store {
    /// Tenants with dead letters in this partition (`dlq_tenants`), unordered.
    pub async fn dlq_tenants(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.client().smembers(self.ks.dlq_tenants()).await?)
    }

    /// Number of dead letters of `tenant` in this partition (`XLEN`).
    pub async fn dlq_len(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(self.client().xlen(self.ks.dlq(tenant)).await?)
    }

    /// `XRANGE dlq:<tenant> start end COUNT count`, oldest first.
    pub async fn dlq_range(
        &self,
        tenant: &str,
        start: &str,
        end: &str,
        count: u64,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        let v: Value = self
            .client()
            .xrange(self.ks.dlq(tenant), start, end, Some(count))
            .await?;
        Ok(stream_entries(v))
    }

    /// The newest `count` dead letters of `tenant`, newest first (`XREVRANGE`).
    pub async fn dlq_newest(
        &self,
        tenant: &str,
        count: u64,
    ) -> Result<Vec<StreamEntry>, StoreError> {
        let v: Value = self
            .client()
            .xrevrange(self.ks.dlq(tenant), "+", "-", Some(count))
            .await?;
        Ok(stream_entries(v))
    }

    /// The retry state of `rows` of `tenant`, in one pipelined round trip.
    pub async fn row_reads(
        &self,
        tenant: &str,
        rows: &[String],
    ) -> Result<Vec<RowRead>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ks = &self.ks;
        let pipe = self.client().pipeline();
        for r in rows {
            let _: () = pipe.zscore(ks.claimed(), format!("{tenant}/{r}")).await?;
            let _: () = pipe.zscore(ks.due(tenant), r).await?;
            let _: () = pipe.hmget(ks.row(r), vec!["a", "f", "e", "p"]).await?;
            // The hook's `da` (a malformed row id reads hook 0, which does not exist).
            let hook = crate::model::RowId::parse(r).map_or(0, |id| id.hook);
            let _: () = pipe.hget(ks.hook(hook), "da").await?;
        }
        let replies: Vec<Value> = pipe.all().await?;
        Ok(replies
            .chunks(4)
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
                    scheduled_at: c.get(3).and_then(int),
                }
            })
            .collect())
    }

    /// The live hook `hook` (`hook:<id>` and its body), `None` when gone. Errors: Redis
    /// failing, or either key holding another type.
    pub async fn hook_record(&self, hook: u64) -> Result<Option<HookRecord>, StoreError> {
        let f: HashMap<String, Value> = self.client().hgetall(self.ks.hook(hook)).await?;
        if f.is_empty() {
            return Ok(None);
        }
        let body = match hash_body(&f) {
            Some(b) => Some(b),
            None => self.client().get(self.ks.body(hook)).await?,
        };
        Ok(Some(decode_hook_hash(&f, body, false)))
    }

    /// The hook `hook` as `hooks show` finds it: live, else kept for resend; `None` when
    /// neither. A hash of another type is passed over, a body key of another type reads as
    /// an empty body.
    pub async fn hook_record_or_kept(&self, hook: u64) -> Result<Option<HookRecord>, StoreError> {
        for (key, body_key, kept) in [
            (self.ks.hook(hook), self.ks.body(hook), false),
            (self.ks.kept(hook), self.ks.kept_body(hook), true),
        ] {
            let v: Result<HashMap<String, Value>, _> = self.client().hgetall(&key).await;
            let Ok(f) = v else { continue }; // another type than a hash: not a readable hook
            if f.is_empty() {
                continue;
            }
            let body = match hash_body(&f) {
                Some(b) => b,
                None => match self.client().get::<Option<Bytes>, _>(&body_key).await {
                    Ok(b) => b.unwrap_or_default(),
                    // Another type than a string: shown empty, like a hash without `b`.
                    Err(e) if e.details().starts_with("WRONGTYPE") => Bytes::new(),
                    Err(e) => return Err(e.into()),
                },
            };
            return Ok(Some(decode_hook_hash(&f, Some(body), kept)));
        }
        Ok(None)
    }

    /// A hook's attempt records, oldest first (records that do not parse are left out).
    pub async fn attempts_of(&self, hook: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        let v: Vec<String> = self.client().lrange(self.ks.attempts(hook), 0, -1).await?;
        Ok(v.iter()
            .filter_map(|r| serde_json::from_str(r).ok())
            .collect())
    }

    /// The attempt records of `tenant`'s hooks with a record at or after `since_ms`, newest
    /// hooks first, at most `max_hooks` of them, each with its source and event type (of the
    /// live or the kept hook hash; empty when both are gone); and whether older hooks of the
    /// window were left unread. Two pipelined round trips whatever the number of hooks.
    pub async fn recent_attempts(
        &self,
        tenant: &str,
        since_ms: i64,
        max_hooks: usize,
    ) -> Result<(Vec<HookAttempts>, bool), StoreError> {
        let ids: Vec<String> = self
            .client()
            .zrevrangebyscore(
                self.ks.history(tenant),
                f64::INFINITY,
                since_ms as f64,
                false,
                Some((0, max_hooks as i64 + 1)),
            )
            .await?;
        let more = ids.len() > max_hooks;
        let hooks: Vec<u64> = ids
            .iter()
            .take(max_hooks)
            .filter_map(|h| h.parse().ok())
            .collect();
        if hooks.is_empty() {
            return Ok((Vec::new(), more));
        }
        let pipe = self.client().pipeline();
        for h in &hooks {
            let _: () = pipe.lrange(self.ks.attempts(*h), 0, -1).await?;
            let _: () = pipe.hmget(self.ks.hook(*h), vec!["s", "et"]).await?;
            let _: () = pipe.hmget(self.ks.kept(*h), vec!["s", "et"]).await?;
        }
        let replies: Vec<Result<Value, _>> = pipe.try_all().await;
        let mut out = Vec::with_capacity(hooks.len());
        for (hook, chunk) in hooks.into_iter().zip(replies.chunks(3)) {
            let [records, live, kept] = chunk else { break };
            // A key of another type answers an error: read as empty, like a gone hook.
            let records: Vec<AttemptRecord> = match records {
                Ok(Value::Array(a)) => a
                    .iter()
                    .filter_map(text)
                    .filter_map(|r| serde_json::from_str(&r).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let fields = [live, kept]
                .into_iter()
                .filter_map(|v| match v {
                    Ok(Value::Array(f)) => Some(f),
                    _ => None,
                })
                .find(|f| f.first().and_then(text).is_some());
            let field = |i: usize| fields.and_then(|f| f.get(i)).and_then(text);
            out.push(HookAttempts {
                hook,
                source: field(0).unwrap_or_default(),
                event_type: field(1).filter(|e| !e.is_empty()),
                records,
            });
        }
        Ok((out, more))
    }

    /// Whether `tenant`'s attempt history (`history:<tenant>`) names `hook`.
    pub async fn in_history(&self, tenant: &str, hook: u64) -> Result<bool, StoreError> {
        Ok(self
            .client()
            .zscore::<Option<f64>, _, _>(self.ks.history(tenant), hook.to_string())
            .await?
            .is_some())
    }

    /// The place of `row` in the ordered lane `lane` behind its head, if it waits there.
    pub async fn lane_position(&self, lane: &str, row: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .client()
            .lpos(self.ks.lane(lane), row, None, None, None)
            .await?)
    }

    /// Every member of the partition's `claimed` set (`<tenant>/<row id>`).
    pub async fn claimed_members(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .client()
            .zrange(self.ks.claimed(), 0, -1, None, false, None, false)
            .await?)
    }

    /// Rows claimed in the partition (`ZCARD claimed`).
    pub async fn claimed_len(&self) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.claimed()).await?)
    }

    /// The tenants in the partition's line (`tenants`), first in line first: the first
    /// `limit`, or all of them.
    pub async fn line(&self, limit: Option<i64>) -> Result<Vec<String>, StoreError> {
        let stop = limit.map_or(-1, |n| n - 1);
        Ok(self
            .client()
            .zrange(self.ks.tenants(), 0, stop, None, false, None, false)
            .await?)
    }

    /// Tenants in the partition's line.
    pub async fn line_len(&self) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.tenants()).await?)
    }

    /// Hooks waiting behind their lane's head in the partition (`lane_members`).
    pub async fn lane_members(&self) -> Result<u64, StoreError> {
        Ok(self
            .client()
            .get::<Option<i64>, _>(self.ks.lane_members())
            .await?
            .unwrap_or(0)
            .max(0) as u64)
    }

    /// The first `count` rows of `tenant`'s due set with their due times (ms), earliest first.
    pub async fn due_page(
        &self,
        tenant: &str,
        count: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        self.due_range(tenant, 0, count).await
    }

    /// `count` rows of `tenant`'s due set from position `start` (0-based, by due time), with
    /// their due times (ms).
    pub async fn due_range(
        &self,
        tenant: &str,
        start: i64,
        count: i64,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let v: Value = self
            .client()
            .zrange(
                self.ks.due(tenant),
                start,
                start + count - 1,
                None,
                false,
                None,
                true,
            )
            .await?;
        Ok(scored(v))
    }

    /// Per tenant of `tenants` (all of this partition), in order: rows in its due set, of
    /// those due at or before `now_ms`, and the due time of its earliest (ms); one pipelined
    /// round trip for them all (a console page over 10 000 tenants made 30 000 before).
    pub async fn due_summaries(
        &self,
        tenants: &[String],
        now_ms: i64,
    ) -> Result<Vec<DueSummary>, StoreError> {
        if tenants.is_empty() {
            return Ok(Vec::new());
        }
        let pipe = self.client().pipeline();
        for t in tenants {
            let k = self.ks.due(t);
            let _: () = pipe.zcard(k.clone()).await?;
            let _: () = pipe
                .zcount(k.clone(), f64::NEG_INFINITY, now_ms as f64)
                .await?;
            let _: () = pipe.zrange(k, 0, 0, None, false, None, true).await?;
        }
        let replies: Vec<Result<Value, _>> = pipe.try_all().await;
        let mut out = Vec::with_capacity(tenants.len());
        let mut it = replies.into_iter();
        for _ in tenants {
            let (Some(rows), Some(now), Some(first)) = (it.next(), it.next(), it.next()) else {
                break;
            };
            out.push(DueSummary {
                rows: int(&rows?).unwrap_or(0).max(0) as u64,
                due_now: int(&now?).unwrap_or(0).max(0) as u64,
                earliest_ms: scored(first?).first().map(|(_, at)| *at),
            });
        }
        Ok(out)
    }

    /// Rows in `tenant`'s due set.
    pub async fn due_len(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(self.client().zcard(self.ks.due(tenant)).await?)
    }

    /// Each live hook's source and event type (`s`, `et`), one pipelined round trip; a hook
    /// that is gone or not a hash is left out.
    pub async fn hook_sources(
        &self,
        hooks: impl Iterator<Item = u64>,
    ) -> Result<HashMap<u64, (String, Option<String>)>, StoreError> {
        let mut ids: Vec<u64> = hooks.collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let pipe = self.client().pipeline();
        for h in &ids {
            let _: () = pipe.hmget(self.ks.hook(*h), vec!["s", "et"]).await?;
        }
        let replies: Vec<Result<Value, _>> = pipe.try_all().await;
        Ok(ids
            .into_iter()
            .zip(replies)
            .filter_map(|(h, v)| {
                // A hook of another type than a hash answers an error: left out, as if gone.
                let Value::Array(f) = v.ok()? else {
                    return None;
                };
                let source = text(f.first()?)?;
                let et = f.get(1).and_then(text).filter(|e| !e.is_empty());
                Some((h, (source, et)))
            })
            .collect())
    }

    /// The `version` of a stored source, if it has one.
    pub async fn source_version(
        &self,
        tenant: &str,
        source: &str,
    ) -> Result<Option<u64>, StoreError> {
        Ok(self
            .client()
            .hget(self.ks.source(tenant, source), "version")
            .await?)
    }

    /// The partition's `committed` and `unmatched` hook counts (`stats`), 0 when unset.
    pub async fn hook_counts(&self) -> Result<(u64, u64), StoreError> {
        let v: Vec<Option<u64>> = self
            .client()
            .hmget(self.ks.stats(), vec!["committed", "unmatched"])
            .await?;
        Ok((
            v.first().copied().flatten().unwrap_or(0),
            v.get(1).copied().flatten().unwrap_or(0),
        ))
    }
}

/// The body a hook hash holds itself (`b`, hooks from before bodies moved apart).
fn hash_body(f: &HashMap<String, Value>) -> Option<Bytes> {
    match f.get("b") {
        Some(Value::Bytes(b)) => Some(b.clone()),
        Some(Value::String(t)) => Some(Bytes::copy_from_slice(t.as_bytes())),
        _ => None,
    }
}

/// The one decoding of a hook hash read whole (`HGETALL`) on the read side.
fn decode_hook_hash(f: &HashMap<String, Value>, body: Option<Bytes>, kept: bool) -> HookRecord {
    let s = |k: &str| f.get(k).and_then(text).unwrap_or_default();
    let modules: Vec<String> = s("k")
        .split(',')
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    let lanes = (0..modules.len())
        .map(|i| f.get(&format!("L{i}")).and_then(text))
        .collect();
    HookRecord {
        kept,
        tenant: s("tn"),
        source: s("s"),
        committed_at_ms: f.get("t").and_then(int).unwrap_or(0),
        modules,
        body,
        headers: s("h"),
        lanes,
        event_type: f.get("et").and_then(text).filter(|e| !e.is_empty()),
        rows_left: f.get("n").and_then(int).unwrap_or(0),
        dead_letters: f.get("d").and_then(int).unwrap_or(0),
    }
}

/// One call of `SLOWLOG GET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowCall {
    /// How long it ran, µs.
    pub micros: u64,
    /// The command and its arguments, as texts (a binary argument is left out).
    pub args: Vec<String>,
}

impl Store {
    /// `SLOWLOG GET -1`: every slow call the server logged (for the benchmark's per-script
    /// report); an entry of another shape is skipped.
    pub async fn slowlog(&self) -> Result<Vec<SlowCall>, StoreError> {
        use fred::interfaces::ClientLike;
        use fred::types::CustomCommand;
        let v: Value = self
            .client()
            .custom(
                CustomCommand::new_static("SLOWLOG", None, false),
                vec!["GET", "-1"],
            )
            .await?;
        let Value::Array(entries) = v else {
            return Ok(Vec::new());
        };
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                let Value::Array(f) = e else { return None };
                let micros = f.get(2).and_then(|d| d.as_u64()).unwrap_or(0);
                let args = match f.get(3) {
                    Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_string()).collect(),
                    _ => Vec::new(),
                };
                Some(SlowCall { micros, args })
            })
            .collect())
    }

    /// `SLOWLOG RESET`.
    pub async fn slowlog_reset(&self) -> Result<(), StoreError> {
        use fred::interfaces::ClientLike;
        use fred::types::CustomCommand;
        let _: Value = self
            .client()
            .custom(
                CustomCommand::new_static("SLOWLOG", None, false),
                vec!["RESET"],
            )
            .await?;
        Ok(())
    }
}
