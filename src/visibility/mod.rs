//! Delivery visibility: "why didn't my webhook arrive?" (see `docs/operations.md`).
//!
//! - **Attempt history**: every attempt's [`AttemptRecord`] is appended, by the same
//!   `settle.lua` call that applies its outcome (no extra round trip), to the hook's
//!   `attempts:<hook>` list; a delivered hook is kept as `kept:<hook>` for resend. Both
//!   expire `history.max_age_ms` after the hook's last record, and the tenant's `history`
//!   index keeps at most `history.max_per_tenant` hooks (the least recently attempted lose
//!   their records and kept body first). `history.enabled = false` writes none of it.
//! - **Queries**: [`show_hook`] (a hook, its rows' states, its attempts), [`list_rows`] (a
//!   tenant's due, retrying, parked and claimed rows with their last error and next attempt),
//!   [`tenants_top`] (due rows, claimed, oldest lag, failing sinks per tenant).
//! - **Resend**: [`resend`] commits a delivered or dead-lettered hook again, as a new hook,
//!   for one or all sink entries; with a delivery log store, from the body the log kept, and
//!   [`resend_range`] resends what ended in a time range.
//! - **Cancel**: [`cancel`] cancels a scheduled hook before any of its rows is claimed.
//!
//! Everything is read from Redis, so any node (leader or not) and the CLI answer alike.

use crate::dlq::DeadLetter;
use crate::error::Error;
use crate::model::{check_id, RowId};
use crate::store::{CommitOptions, Store};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use utoipa::ToSchema;

mod read;
use read::*;

mod history;
pub use history::*;

mod tenants;
pub use tenants::*;

mod pending;
pub use pending::*;

mod health;
pub use health::*;

mod rows;
pub use rows::*;

mod resend;
pub use resend::*;

/// Rows of a tenant's due set that [`list_rows`] and [`tenants_top`] read at most.
pub const SCAN_ROWS: i64 = 10_000;
/// Dead letters (newest first) searched for a row by [`show_hook`].
const DLQ_SCAN: u64 = 10_000;

/// Where a row is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    /// Due (now or at `due_at_ms`), no attempt failed yet.
    Due,
    /// Scheduled by its producer (`deliver_at`, a delay): due at `due_at_ms`, not before;
    /// `ankusa hooks cancel` can still cancel it.
    Scheduled,
    /// At least one attempt failed; due again at `due_at_ms`.
    Retrying,
    /// Parked by its sink's breaker until `due_at_ms` (attempt count unchanged).
    Parked,
    /// Claimed: an attempt is queued or running.
    Claimed,
    /// Waiting in its ordered lane behind the head.
    InLane,
    /// Dead-lettered (see `dead_letter`).
    DeadLettered,
    /// Delivered.
    Delivered,
    /// Ended without delivery: its sink entry's filter, as it was when the row came due,
    /// no longer took the hook (a filter edited after the commit). The attempt record says
    /// so (`outcome` `dropped`, with the reason).
    Dropped,
    /// Finished with no record left (delivered or dropped before the history kept it).
    Finished,
}

impl RowState {
    /// The state's name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Due => "due",
            RowState::Scheduled => "scheduled",
            RowState::Retrying => "retrying",
            RowState::Parked => "parked",
            RowState::Claimed => "claimed",
            RowState::InLane => "in_lane",
            RowState::DeadLettered => "dead_lettered",
            RowState::Delivered => "delivered",
            RowState::Dropped => "dropped",
            RowState::Finished => "finished",
        }
    }
}

/// One row of a hook, or of [`list_rows`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RowView {
    /// Row id `<hook>.<sink index>`.
    pub row: String,
    /// Hook id.
    pub hook: u64,
    /// Sink index.
    pub sink: u32,
    /// Source id (empty when the hook is gone).
    pub source: String,
    /// The hook's event type, when its producer set one (and the hook is not gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Where the row is.
    pub state: RowState,
    /// When it is due (its next attempt), ms since the epoch (Redis clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<i64>,
    /// Attempts made: for a pending or dead-lettered row, those that failed; for a
    /// delivered one, every attempt its history records, the last one the delivery.
    pub attempts: u32,
    /// First attempt time, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt_ms: Option<i64>,
    /// The last attempt's error (truncated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Its ordered lane's id, for an ordered sink entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// For `in_lane`: members ahead of it behind the head (0 = next).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_position: Option<u64>,
    /// For `dead_lettered`: the dead letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
}

/// A hook with its rows and attempts ([`show_hook`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HookView {
    /// Tenant id.
    pub tenant: String,
    /// Hook id.
    pub hook: u64,
    /// Source id.
    pub source: String,
    /// Commit time, ms (Redis clock).
    pub committed_at_ms: i64,
    /// The event type its producer set, if any: what sink entries' event filters match,
    /// delivered as the `ankusa-event-type` header or message attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// `live` (rows or dead letters need it), `kept` (delivered, kept for resend in Redis),
    /// `logged` (ended; its body kept in the delivery log) or `gone` (only its history is
    /// left).
    pub stored: String,
    /// Body size, bytes.
    pub body_bytes: u64,
    /// Producer headers, name → value (empty when none, or when the hook is gone).
    pub headers: BTreeMap<String, String>,
    /// Its rows, by sink index.
    pub rows: Vec<RowView>,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptRecord>,
}

/// `ankusa hooks show` / `GET /admin/hooks/{tenant}/{hook}`: the hook, each row's state and
/// every recorded attempt. Errors: `not_found` when neither the hook nor any record is left.
pub async fn show_hook(store: &Store, tenant: &str, hook: u64) -> Result<HookView, Error> {
    // The tenant's partition holds its hooks and rows.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    check_id("tenant", tenant)?;
    let read = read_hook(store, hook).await?;
    // Hook ids are instance-wide: another tenant's hook, or its attempts once the hook is
    // gone, must read as not found — never as this tenant's (what one tenant may see).
    let theirs = match &read {
        Some(h) => h.tenant == tenant,
        None => has_history(store, tenant, hook).await?,
    };
    let stored = read.filter(|h| h.tenant == tenant);
    let attempts = if theirs {
        read_attempts(store, hook).await?
    } else {
        Vec::new()
    };
    if stored.is_none() && attempts.is_empty() {
        return Err(Error::NotFound(format!("hook {hook} of tenant {tenant}")));
    }
    let rows = hook_rows(store, tenant, hook, stored.as_ref(), &attempts).await?;
    let (source, committed_at_ms, stored_as, body_bytes, headers) = match &stored {
        Some(h) => (
            h.source.clone(),
            h.committed_at_ms,
            if h.kept { "kept" } else { "live" },
            h.body.as_ref().map_or(0, |b| b.len() as u64),
            serde_json::from_str(&h.headers).unwrap_or_default(),
        ),
        None => (String::new(), 0, "gone", 0, BTreeMap::new()),
    };
    Ok(HookView {
        tenant: tenant.into(),
        hook,
        source,
        committed_at_ms,
        event_type: stored.as_ref().and_then(|h| h.event_type.clone()),
        stored: stored_as.into(),
        body_bytes,
        headers,
        rows,
        attempts,
    })
}

/// [`show_hook`] with the delivery log (`[log] url`): an ended hook's attempts, and a hook
/// Redis no longer holds, are read from the log store.
pub async fn show_hook_logged(
    store: &Store,
    log: Option<&crate::log::LogStore>,
    tenant: &str,
    hook: u64,
) -> Result<HookView, Error> {
    let Some(log) = log else {
        return show_hook(store, tenant, hook).await;
    };
    match show_hook(store, tenant, hook).await {
        Ok(mut v) => {
            if v.attempts.is_empty() {
                // A hook Redis holds is shown with or without its attempts: the log store
                // away costs the attempts, never the answer.
                match log.attempts(tenant, hook).await {
                    Ok(a) => v.attempts = a,
                    Err(e) => tracing::warn!(
                        error = %e,
                        hook,
                        "delivery log store unavailable; hook shown without its attempts"
                    ),
                }
            }
            Ok(v)
        }
        Err(Error::NotFound(what)) => {
            // The log's rows are the tenant's by their key: another tenant's hook id finds none.
            let attempts = log.attempts(tenant, hook).await?;
            let ended = log
                .search(&crate::log::Search {
                    tenant: tenant.into(),
                    since_ms: Some(0),
                    hook: Some(hook),
                    limit: 1,
                    ..Default::default()
                })
                .await?
                .hooks
                .into_iter()
                .next();
            if attempts.is_empty() && ended.is_none() {
                return Err(Error::NotFound(what));
            }
            let routed = store.for_tenant(tenant);
            let rows = hook_rows(&routed, tenant, hook, None, &attempts).await?;
            let kept = log.body(tenant, hook).await?;
            Ok(HookView {
                tenant: tenant.into(),
                hook,
                source: ended.as_ref().map(|e| e.source.clone()).unwrap_or_default(),
                committed_at_ms: ended.as_ref().map_or(0, |e| e.committed_ms),
                event_type: ended.and_then(|e| e.event_type),
                stored: if kept.is_some() { "logged" } else { "gone" }.into(),
                body_bytes: kept.as_ref().map_or(0, |k| k.body.len() as u64),
                headers: kept
                    .and_then(|k| serde_json::from_str(&k.headers).ok())
                    .unwrap_or_default(),
                rows,
                attempts,
            })
        }
        Err(e) => Err(e),
    }
}

/// Whether `tenant`'s attempt history names `hook`.
async fn has_history(store: &Store, tenant: &str, hook: u64) -> Result<bool, Error> {
    Ok(store.in_history(tenant, hook).await?)
}

/// The hook's rows: one per module at commit, or as many as the records name; each with
/// its state, its lane position or its dead letter.
async fn hook_rows(
    store: &Store,
    tenant: &str,
    hook: u64,
    stored: Option<&HookRead>,
    attempts: &[AttemptRecord],
) -> Result<Vec<RowView>, Error> {
    let now = store.now_ms().await?;
    let sinks = match stored {
        Some(h) => h.modules.len() as u32,
        None => attempts.iter().map(|a| a.sink + 1).max().unwrap_or(0),
    };
    let ids: Vec<String> = (0..sinks).map(|i| format!("{hook}.{i}")).collect();
    let reads = read_rows(store, tenant, &ids).await?;
    // A finished row whose last recorded attempt delivered has no dead letter: the search of
    // the dead-letter stream (up to DLQ_SCAN entries, ~100–250 ms) is for the others only.
    let delivered = |id: &String| {
        attempts
            .iter()
            .filter(|a| a.row == *id)
            .max_by_key(|a| a.attempt)
            .is_some_and(|a| a.outcome == "delivered")
    };
    let mut dead = if ids
        .iter()
        .zip(&reads)
        .any(|(id, r)| r.state(now).is_none() && !delivered(id))
    {
        dead_letters_of(store, tenant, hook).await?
    } else {
        HashMap::new()
    };
    let mut rows = Vec::with_capacity(ids.len());
    for (i, (id, r)) in ids.iter().zip(reads).enumerate() {
        let lane = stored.and_then(|h| h.lanes.get(i).cloned().flatten());
        let mut view = RowView {
            row: id.clone(),
            hook,
            sink: i as u32,
            source: stored.map(|h| h.source.clone()).unwrap_or_default(),
            event_type: stored.and_then(|h| h.event_type.clone()),
            state: RowState::Finished,
            due_at_ms: r.due,
            attempts: r.attempts,
            first_attempt_ms: r.first,
            last_error: r.error.clone(),
            lane: lane.clone(),
            lane_position: None,
            dead_letter: None,
        };
        view.state = match r.state(now) {
            Some(s) => s,
            None => match lane_position(store, lane.as_deref(), id).await? {
                Some(p) => {
                    view.lane_position = Some(p.max(0) as u64);
                    RowState::InLane
                }
                None => match dead.remove(id) {
                    Some(d) => {
                        view.last_error = Some(d.error.clone()).filter(|e| !e.is_empty());
                        view.attempts = d.attempts;
                        view.first_attempt_ms = d.first_attempt_ms;
                        view.dead_letter = Some(d);
                        RowState::DeadLettered
                    }
                    None => {
                        // The row hash is gone with the row: its history counts the attempts.
                        view.attempts = attempts
                            .iter()
                            .filter(|a| a.row == *id)
                            .map(|a| a.attempt)
                            .max()
                            .unwrap_or(0);
                        ended_state(id, attempts, stored)
                    }
                },
            },
        };
        rows.push(view);
    }
    Ok(rows)
}

/// The dead letters of `hook` among the tenant's newest [`DLQ_SCAN`], by row id.
async fn dead_letters_of(
    store: &Store,
    tenant: &str,
    hook: u64,
) -> Result<HashMap<String, DeadLetter>, Error> {
    let mut dead = HashMap::new();
    for e in store.dlq_newest(tenant, DLQ_SCAN).await? {
        let d = DeadLetter::from_fields(e.id, &e.fields);
        if d.hook == Some(hook) {
            dead.entry(d.row.clone()).or_insert(d);
        }
    }
    Ok(dead)
}

/// The row's place in its ordered lane, if it has a lane and waits in it.
async fn lane_position(store: &Store, lane: Option<&str>, id: &str) -> Result<Option<i64>, Error> {
    match lane {
        Some(l) => Ok(store.lane_position(l, id).await?),
        None => Ok(None),
    }
}

/// A row neither pending, in a lane nor dead-lettered: dropped or delivered as its last
/// record says (a hook kept for resend had its rows delivered unless a record says
/// otherwise), else finished.
fn ended_state(id: &str, attempts: &[AttemptRecord], stored: Option<&HookRead>) -> RowState {
    let last = attempts.iter().rev().find(|a| a.row == id);
    if last.is_some_and(|a| a.outcome == "dropped") {
        return RowState::Dropped;
    }
    let delivered = last.is_some_and(|a| a.outcome == "delivered");
    if delivered || stored.is_some_and(|h| h.kept) {
        RowState::Delivered
    } else {
        RowState::Finished
    }
}

/// The states [`list_rows`] filters on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RowFilter {
    /// Rows with a failed attempt waiting for the next (backoff or breaker): `retrying` and
    /// `parked` rows that have attempts.
    Retrying,
    /// Rows parked by a breaker.
    Parked,
    /// Rows due with no failed attempt.
    Due,
    /// Rows of scheduled hooks, not due yet.
    Scheduled,
    /// Claimed rows.
    Claimed,
    /// Delivered rows of the newest hooks with attempt history (`attempts` counts every
    /// attempt, the last the delivery); none with `history.enabled = false`.
    Delivered,
}

impl RowFilter {
    fn matches(self, r: &RowView) -> bool {
        match self {
            RowFilter::Retrying => {
                r.attempts > 0 && matches!(r.state, RowState::Retrying | RowState::Parked)
            }
            RowFilter::Parked => r.state == RowState::Parked,
            RowFilter::Due => r.state == RowState::Due,
            RowFilter::Scheduled => r.state == RowState::Scheduled,
            RowFilter::Claimed => r.state == RowState::Claimed,
            RowFilter::Delivered => r.state == RowState::Delivered,
        }
    }
}

/// A page of [`list_rows`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RowsPage {
    /// The rows, claimed first, then by due time.
    pub rows: Vec<RowView>,
    /// More rows matched than `limit`.
    pub more: bool,
}

/// `n` and its noun, singular for one: "1 row", "3 rows".
fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HistoryConfig;

    #[test]
    fn one_row_is_a_row_and_two_are_rows() {
        assert_eq!(counted(1u32, "row", "rows"), "1 row");
        assert_eq!(counted(0u32, "row", "rows"), "0 rows");
        assert_eq!(counted(3u32, "attempt", "attempts"), "3 attempts");
    }

    #[test]
    fn no_history_argument_when_history_is_off() {
        let cfg = HistoryConfig {
            enabled: false,
            ..HistoryConfig::default()
        };
        assert_eq!(history_arg(&cfg, std::iter::empty()), None);
        let on = history_arg(&HistoryConfig::default(), std::iter::empty()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&on).unwrap();
        assert_eq!(v["age"], 86_400_000);
        assert_eq!(v["keep"], true);
        assert_eq!(v["rec"], serde_json::json!([]));
    }

    #[test]
    fn history_argument_carries_each_record_as_json_text() {
        let rec = |row: &str, error: Option<&str>| AttemptRecord {
            row: row.into(),
            sink: 0,
            attempt: 1,
            started_ms: 1,
            duration_ms: 2,
            outcome: "retry".into(),
            status: Some(500),
            error_kind: Some("http_status".into()),
            error: error.map(Into::into),
            next_attempt_ms: Some(3),
            reason: None,
        };
        // A receiver's answer is hostile text: quotes, backslashes, newlines, non-ASCII.
        let (a, b) = (rec("7.0", Some("\"a\\b\"\n\u{2028}é")), rec("8.1", None));
        let arg = history_arg(
            &HistoryConfig::default(),
            [(0, 7, &a), (3, 8, &b)].into_iter(),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&arg).unwrap();
        assert_eq!(v["max"], 10_000);
        assert_eq!(v["kb"], 67_108_864);
        let recs = v["rec"].as_array().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(
            (recs[0][0].as_u64(), recs[0][1].as_u64()),
            (Some(0), Some(7))
        );
        assert_eq!(
            (recs[1][0].as_u64(), recs[1][1].as_u64()),
            (Some(3), Some(8))
        );
        let back: AttemptRecord = serde_json::from_str(recs[0][2].as_str().unwrap()).unwrap();
        assert_eq!(back, a);
        let back: AttemptRecord = serde_json::from_str(recs[1][2].as_str().unwrap()).unwrap();
        assert_eq!(back, b);
    }
}

/// The answer of [`cancel`] (`ankusa hooks cancel`, `POST /admin/hooks/{tenant}/{hook}/cancel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelAnswer {
    /// Tenant id.
    pub tenant: String,
    /// Hook id.
    pub hook: u64,
    /// Whether the hook was cancelled: it will never be delivered.
    pub cancelled: bool,
    /// `cancelled`; or why not: `not_scheduled` (it was due at its commit), `claimed` (a
    /// row is being or was attempted), `finished` (a row was delivered, dead-lettered or
    /// dropped).
    pub outcome: String,
    /// Rows removed (0 when not cancelled).
    pub rows: u32,
    /// The row that was claimed, for `claimed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// The outcome in words.
    pub message: String,
}

/// Cancel `tenant`'s scheduled hook `hook` before it is claimed, atomically
/// ([`Store::cancel_hook`]): every row removed and the hook deleted, or nothing changed and
/// the answer says why. Errors: a bad tenant id (`bad_request`), `not_found` when neither
/// the hook nor any record of it is left for the tenant, the store failing.
pub async fn cancel(store: &Store, tenant: &str, hook: u64) -> Result<CancelAnswer, Error> {
    use crate::store::Cancelled;
    check_id("tenant", tenant)?;
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    let answer = |cancelled: bool, outcome: &str, rows: u32, row: Option<String>, message| {
        Ok(CancelAnswer {
            tenant: tenant.into(),
            hook,
            cancelled,
            outcome: outcome.into(),
            rows,
            row,
            message,
        })
    };
    match store.cancel_hook(tenant, hook).await? {
        Cancelled::Cancelled { rows } => answer(
            true,
            "cancelled",
            rows,
            None,
            format!(
                "hook {hook} cancelled: {} removed, it will not be delivered",
                counted(rows, "row", "rows")
            ),
        ),
        Cancelled::NotScheduled => answer(
            false,
            "not_scheduled",
            0,
            None,
            format!("hook {hook} not cancelled: it was due at its commit, not scheduled"),
        ),
        Cancelled::Claimed { row, attempts } => {
            let what = if attempts > 0 {
                format!(
                    "row {row} was attempted already ({} failed)",
                    counted(attempts, "attempt", "attempts")
                )
            } else {
                format!("row {row} is claimed: its delivery is under way")
            };
            answer(
                false,
                "claimed",
                0,
                Some(row),
                format!("hook {hook} not cancelled: {what}"),
            )
        }
        Cancelled::Finished { made, left } => answer(
            false,
            "finished",
            0,
            None,
            format!(
                "hook {hook} not cancelled: {} of its {} finished already (delivered, dead-lettered or dropped)",
                made.saturating_sub(left),
                counted(made, "row", "rows")
            ),
        ),
        Cancelled::NotFound => {
            // A delivered hook kept for resend, or one whose history is left, is this
            // tenant's and finished; anything else is not found (another tenant's hook
            // reads as not found too).
            let kept = read_hook(store, hook)
                .await?
                .is_some_and(|h| h.tenant == tenant);
            if kept || has_history(store, tenant, hook).await? {
                answer(
                    false,
                    "finished",
                    0,
                    None,
                    format!("hook {hook} not cancelled: its delivery is finished"),
                )
            } else {
                Err(Error::NotFound(format!("hook {hook} of tenant {tenant}")))
            }
        }
    }
}
