//! Dead letters: browse, show, replay and purge.
//!
//! A tenant's dead letters are a Redis stream `dlq:<tenant>` written by `settle.lua` and
//! `dead_letter_source.lua`; the tenants that have any are in the set `dlq_tenants`. Each
//! entry names its row (`<hook>.<sink index>`), hook, source, sink index and module, reason,
//! attempts, first attempt time, last error and time. The hook (body and headers) stays in
//! Redis while a dead letter references it (hook field `d`), so a dead letter can be
//! replayed: [`replay`] puts its row back as a new due row (attempts reset, retry horizon
//! restarted) and paces itself by [`crate::ops::pressure`]. [`purge`] deletes dead letters
//! and the hook bodies nobody needs any more, by filter or by the retention of
//! [`DlqConfig`] (count per tenant and age), which the leader also applies every
//! `dlq.sweep_ms`.

use crate::config::DlqConfig;
use crate::error::Error;
use crate::model::DeadReason;
use crate::ops::{pressure, Pressure};
use crate::store::{DlqPurge, DlqReplayed, Store, StoreError};
use std::collections::BTreeMap;
use std::time::Duration;

mod purge;
pub use purge::*;

mod replay;
pub use replay::*;

/// One dead letter as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// Stream entry id `<ms>-<n>`: its time of dead-lettering (ms, Redis clock) and a sequence.
    pub id: String,
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Row id `<hook id>.<sink index>`.
    pub row: String,
    /// Hook id (absent for a malformed row).
    pub hook: Option<u64>,
    /// Sink index the row was bound to.
    pub sink: Option<u32>,
    /// Sink module (`http`, …).
    pub module: String,
    /// Why: `permanent(…)`, `retry_horizon(…)`, `max_attempts(…)`, `sink_gone(…)`,
    /// `source_gone(…)`, `malformed(…)`, `sink_disabled(…)`.
    pub reason: String,
    /// Attempts made.
    pub attempts: u32,
    /// First attempt time (ms, Redis clock), if any attempt was made.
    pub first_attempt_ms: Option<i64>,
    /// The last error, truncated.
    pub error: String,
    /// When it was dead-lettered (ms, Redis clock).
    pub at_ms: i64,
    /// The hook's event type, when its producer set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
}

impl DeadLetter {
    pub(crate) fn from_fields(id: String, fields: &BTreeMap<String, String>) -> DeadLetter {
        let get = |k: &str| fields.get(k).cloned().unwrap_or_default();
        let at = fields.get("at").and_then(|s| s.parse().ok());
        DeadLetter {
            at_ms: at.unwrap_or_else(|| id_ms(&id) as i64),
            id,
            tenant: get("tenant"),
            source: get("source"),
            row: get("row"),
            hook: fields.get("hook").and_then(|s| s.parse().ok()),
            sink: fields.get("sink").and_then(|s| s.parse().ok()),
            module: get("module"),
            reason: get("reason"),
            attempts: fields
                .get("attempts")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            first_attempt_ms: fields.get("first").and_then(|s| s.parse().ok()),
            error: get("error"),
            event_type: fields.get("et").filter(|e| !e.is_empty()).cloned(),
        }
    }

    /// A field by its stream name (`row`, `hook`, `tenant`, `source`, `sink`, `module`,
    /// `reason`, `attempts`, `first`, `error`, `at`, `et`) as text; `""` when absent.
    pub fn get(&self, field: &str) -> String {
        let opt = |v: Option<String>| v.unwrap_or_default();
        match field {
            "row" => self.row.clone(),
            "hook" => opt(self.hook.map(|h| h.to_string())),
            "tenant" => self.tenant.clone(),
            "source" => self.source.clone(),
            "sink" => opt(self.sink.map(|i| i.to_string())),
            "module" => self.module.clone(),
            "reason" => self.reason.clone(),
            "attempts" => self.attempts.to_string(),
            "first" => opt(self.first_attempt_ms.map(|f| f.to_string())),
            "error" => self.error.clone(),
            "at" => self.at_ms.to_string(),
            "et" => opt(self.event_type.clone()),
            _ => String::new(),
        }
    }

    /// The reason's kind (`permanent`, `source_gone`, …: [`DeadReason::kind_of`]); `None`
    /// for a reason of no known kind.
    pub fn reason_kind(&self) -> Option<&'static str> {
        DeadReason::kind_of(&self.reason)
    }
}

/// Which dead letters an operation applies to; every field is optional and they combine
/// with AND. Times are ms since the Unix epoch (Redis clock) or a duration ago:
/// `90s`, `15m`, `2h`, `7d`, `500ms`.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
    utoipa::IntoParams,
)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Filter {
    /// Only this tenant (otherwise every tenant with dead letters).
    pub tenant: Option<String>,
    /// Only this source id.
    pub source: Option<String>,
    /// Only this sink: an index (`0`) or a module (`http`).
    pub sink: Option<String>,
    /// Only the dead letters of this hook id (its rows, one per sink entry).
    pub hook: Option<u64>,
    /// Only this reason: its kind (`permanent`, `source_gone`…) or the whole text
    /// (`source_gone(orders)`).
    pub reason: Option<String>,
    /// Dead-lettered at or after this time.
    pub since: Option<String>,
    /// Dead-lettered at or before this time.
    pub until: Option<String>,
}

impl Filter {
    /// True when the filter selects everything.
    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    fn matches(&self, d: &DeadLetter) -> bool {
        let source = self.source.as_ref().is_none_or(|s| *s == d.source);
        let sink = self.sink.as_ref().is_none_or(|s| match s.parse::<u32>() {
            Ok(i) => d.sink == Some(i),
            Err(_) => *s == d.module,
        });
        let reason = self
            .reason
            .as_ref()
            .is_none_or(|r| *r == d.reason || Some(r.as_str()) == d.reason_kind());
        let hook = self.hook.is_none_or(|h| d.hook == Some(h));
        source && sink && reason && hook
    }

    /// The time bounds in ms (Redis clock), from `now_ms` for relative ones.
    fn bounds(&self, now_ms: i64) -> Result<(Option<i64>, Option<i64>), Error> {
        let since = self
            .since
            .as_deref()
            .map(|s| parse_time(s, now_ms))
            .transpose()?;
        let until = self
            .until
            .as_deref()
            .map(|s| parse_time(s, now_ms))
            .transpose()?;
        Ok((since, until))
    }

    /// Check the ids and times without touching Redis.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(t) = &self.tenant {
            crate::model::check_id("tenant", t)?;
        }
        if let Some(s) = &self.source {
            crate::model::check_id("source", s)?;
        }
        self.bounds(0).map(|_| ())
    }
}

/// Parse a time bound: an RFC 3339 time (`2026-12-07T10:00:00Z`), ms since the epoch
/// (digits only) or `<n><unit>` ago, unit one of `ms`, `s`, `m`, `h`, `d`.
pub fn parse_time(s: &str, now_ms: i64) -> Result<i64, Error> {
    let s = s.trim();
    if s.contains('T') || s.contains(' ') {
        // An RFC 3339 time, e.g. 2026-12-07T10:00:00Z.
        let t = humantime::parse_rfc3339_weak(s)
            .map_err(|e| Error::BadRequest(format!("time {s:?}: {e}")))?;
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| Error::BadRequest(format!("time {s:?}: before 1970")))?
            .as_millis();
        return i64::try_from(ms)
            .map_err(|_| Error::BadRequest(format!("time {s:?}: out of range")));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map_err(|_| Error::BadRequest(format!("time {s:?}: out of range")));
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().map_err(|_| {
        Error::BadRequest(format!(
            "time {s:?}: expected ms since the epoch or a duration ago such as 15m"
        ))
    })?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(Error::BadRequest(format!(
                "time {s:?}: unit must be ms, s, m, h or d"
            )))
        }
    };
    Ok(now_ms - n.saturating_mul(ms))
}

/// The ms part of a stream entry id.
fn id_ms(id: &str) -> u64 {
    id.split('-')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// `(ms, seq)` of a stream entry id, for ordering.
fn id_key(id: &str) -> (u64, u64) {
    let (m, s) = id.split_once('-').unwrap_or((id, "0"));
    (m.parse().unwrap_or(0), s.parse().unwrap_or(0))
}

/// Tenants that have dead letters, in every partition, sorted.
pub async fn tenants(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut t: Vec<String> = Vec::new();
    for p in store.all_partitions() {
        t.extend(p.dlq_tenants().await?);
    }
    t.sort();
    Ok(t)
}

/// Number of dead letters of `tenant`.
pub async fn count(store: &Store, tenant: &str) -> Result<u64, StoreError> {
    let store = store.for_tenant(tenant);
    store.dlq_len(tenant).await
}

fn dead_letters(entries: Vec<crate::store::StreamEntry>) -> Vec<DeadLetter> {
    entries
        .into_iter()
        .map(|e| DeadLetter::from_fields(e.id, &e.fields))
        .collect()
}

/// `XRANGE dlq:<tenant> start end COUNT count`.
async fn range(
    store: &Store,
    tenant: &str,
    start: &str,
    end: &str,
    count: u64,
) -> Result<Vec<DeadLetter>, Error> {
    let store = store.for_tenant(tenant);
    Ok(dead_letters(
        store.dlq_range(tenant, start, end, count).await?,
    ))
}

/// The tenants a filter covers.
async fn filter_tenants(store: &Store, filter: &Filter) -> Result<Vec<String>, Error> {
    Ok(match &filter.tenant {
        Some(t) => vec![t.clone()],
        None => tenants(store).await?,
    })
}

/// One tenant's walk over the entries a filter selects, in stream order, from a snapshot
/// of the stream's end: entries added after the walk began (a replayed row that failed
/// again) are not visited, so a replay or purge always ends.
#[derive(Clone)]
struct Walk {
    tenant: String,
    after: Option<String>,
    start: String,
    end: String,
    done: bool,
}

impl Walk {
    async fn new(
        store: &Store,
        tenant: &str,
        bounds: (Option<i64>, Option<i64>),
    ) -> Result<Walk, Error> {
        let store = store.for_tenant(tenant);
        let last = store
            .dlq_newest(tenant, 1)
            .await?
            .into_iter()
            .next()
            .map(|e| e.id);
        let mut end = last.clone().unwrap_or_else(|| "0-0".into());
        if let Some(u) = bounds.1 {
            if (u.max(0) as u64) < id_ms(&end) {
                end = u.max(0).to_string();
            }
        }
        Ok(Walk {
            tenant: tenant.to_string(),
            after: None,
            start: bounds.0.map_or("-".to_string(), |s| s.max(0).to_string()),
            end,
            done: last.is_none() || bounds.0.zip(bounds.1).is_some_and(|(s, u)| s > u),
        })
    }

    /// The next page of at most `count` entries read (before filtering), filtered.
    async fn next(
        &mut self,
        store: &Store,
        filter: &Filter,
        count: u64,
    ) -> Result<Option<Vec<DeadLetter>>, Error> {
        if self.done {
            return Ok(None);
        }
        let start = match &self.after {
            Some(a) => format!("({a}"),
            None => self.start.clone(),
        };
        let page = range(store, &self.tenant, &start, &self.end, count).await?;
        if (page.len() as u64) < count {
            self.done = true;
        }
        match page.last() {
            Some(l) => {
                if id_key(&l.id) >= id_key(&self.end) {
                    self.done = true;
                }
                self.after = Some(l.id.clone());
            }
            None => return Ok(None),
        }
        Ok(Some(
            page.into_iter().filter(|d| filter.matches(d)).collect(),
        ))
    }
}

/// Entries read per stream page.
const PAGE: u64 = 500;

/// A page of [`list`].
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct DlqPage {
    /// The dead letters, tenant by tenant (sorted), oldest first within a tenant.
    pub dead_letters: Vec<DeadLetter>,
    /// More dead letters match beyond `limit`.
    pub more: bool,
}

/// Up to `limit` dead letters of `tenant`, oldest first (no other filter).
pub async fn list(store: &Store, tenant: &str, limit: u64) -> Result<Vec<DeadLetter>, Error> {
    range(store, tenant, "-", "+", limit).await
}

/// Up to `limit` dead letters that `filter` selects, tenant by tenant: what `dlq list` and
/// `GET /admin/dlq` show. Errors: a malformed filter ([`Error::BadRequest`],
/// [`Error::BadId`]); the store failing.
pub async fn browse(store: &Store, filter: &Filter, limit: u64) -> Result<DlqPage, Error> {
    filter.check()?;
    let bounds = filter.bounds(store.now_ms().await?)?;
    let mut out = DlqPage::default();
    for t in filter_tenants(store, filter).await? {
        let mut walk = Walk::new(store, &t, bounds).await?;
        while let Some(page) = walk.next(store, filter, PAGE).await? {
            for d in page {
                if out.dead_letters.len() as u64 >= limit {
                    out.more = true;
                    return Ok(out);
                }
                out.dead_letters.push(d);
            }
        }
    }
    Ok(out)
}

/// The hook a dead letter references, as stored. Named `DeadLetterHook` in the OpenAPI
/// document, apart from the `HookView` of `hooks show`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = DeadLetterHook)]
pub struct HookView {
    /// Commit time (ms, Redis clock).
    pub committed_at_ms: i64,
    /// Producer headers.
    pub headers: BTreeMap<String, String>,
    /// Body size in bytes.
    pub size: u64,
    /// The body, when it is UTF-8.
    pub body: Option<String>,
    /// The body in standard base64, when it is not UTF-8.
    pub body_base64: Option<String>,
    /// Rows of the hook still pending or claimed.
    pub rows_left: i64,
    /// Dead letters that reference the hook.
    pub dead_letters: i64,
}

/// One dead letter with its hook.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DeadLetterDetail {
    /// The dead letter.
    #[serde(flatten)]
    pub dead_letter: DeadLetter,
    /// Its hook; absent when gone (then it cannot be replayed).
    pub hook_body: Option<HookView>,
}

/// The dead letter `id` of `tenant` with its hook. Errors: [`Error::NotFound`].
pub async fn show(store: &Store, tenant: &str, id: &str) -> Result<DeadLetterDetail, Error> {
    crate::model::check_id("tenant", tenant)?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return Err(Error::BadRequest(format!(
            "dead letter id {id:?}: expected <ms>-<n>"
        )));
    }
    let d = range(store, tenant, id, id, 1)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| Error::NotFound(format!("dead letter {tenant}/{id}")))?;
    // The hook is in the tenant's partition.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    let hook_body = match d.hook {
        None => None,
        Some(h) => {
            // A hook without a body (neither its own `b` nor its body key) shows as gone.
            match store.hook_record(h).await? {
                Some(record) => record.body.clone().map(|body| hook_view(&record, body)),
                None => None,
            }
        }
    };
    Ok(DeadLetterDetail {
        dead_letter: d,
        hook_body,
    })
}

/// A dead letter's hook as `dlq show` shows it: the body as text when it is UTF-8, else in
/// base64.
fn hook_view(record: &crate::store::HookRecord, body: bytes::Bytes) -> HookView {
    let headers = Some(record.headers.as_str())
        .filter(|s| !s.is_empty())
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let (utf8, b64) = match std::str::from_utf8(&body) {
        Ok(s) => (Some(s.to_string()), None),
        Err(_) => {
            use base64::Engine;
            (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&body)),
            )
        }
    };
    HookView {
        committed_at_ms: record.committed_at_ms,
        headers,
        size: body.len() as u64,
        body: utf8,
        body_base64: b64,
        rows_left: record.rows_left,
        dead_letters: record.dead_letters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_bounds_are_epoch_ms_or_a_duration_ago() {
        let now = 1_000_000_000;
        assert_eq!(parse_time("123", now).unwrap(), 123);
        assert_eq!(parse_time("15m", now).unwrap(), now - 900_000);
        assert_eq!(parse_time("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(parse_time("500ms", now).unwrap(), now - 500);
        assert_eq!(parse_time("7d", now).unwrap(), now - 7 * 86_400_000);
        for bad in ["", "m", "5y", "-5m", "1.5h", "yesterday"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }

    fn dl(source: &str, sink: u32, module: &str, reason: &str) -> DeadLetter {
        DeadLetter {
            id: "1-0".into(),
            tenant: "t".into(),
            source: source.into(),
            row: format!("1.{sink}"),
            hook: Some(1),
            sink: Some(sink),
            module: module.into(),
            reason: reason.into(),
            attempts: 1,
            first_attempt_ms: None,
            error: String::new(),
            at_ms: 1,
            event_type: None,
        }
    }

    #[test]
    fn a_filter_matches_source_sink_by_index_or_module_and_reason_by_kind_or_text() {
        let d = dl("orders", 1, "http", "source_gone(orders)");
        let f = |source: Option<&str>, sink: Option<&str>, reason: Option<&str>| Filter {
            source: source.map(Into::into),
            sink: sink.map(Into::into),
            reason: reason.map(Into::into),
            ..Default::default()
        };
        assert!(f(None, None, None).matches(&d));
        assert!(f(Some("orders"), Some("1"), Some("source_gone")).matches(&d));
        assert!(f(None, Some("http"), Some("source_gone(orders)")).matches(&d));
        assert!(!f(Some("billing"), None, None).matches(&d));
        assert!(!f(None, Some("0"), None).matches(&d));
        assert!(!f(None, Some("sqs"), None).matches(&d));
        assert!(!f(None, None, Some("source")).matches(&d));
        assert!(!f(None, None, Some("permanent")).matches(&d));
        let hook = |h: u64| Filter {
            hook: Some(h),
            ..Default::default()
        };
        assert_eq!(
            (
                hook(d.hook.unwrap()).matches(&d),
                hook(d.hook.unwrap() + 1).matches(&d)
            ),
            (true, false)
        );
    }
}
