//! Resend: commit an ended hook again, as a new hook of its source (same body, headers and
//! event type), for one sink entry or all of them. The hook is read from Redis while Redis
//! holds it (live, dead-lettered, or kept for resend by the attempt history) and, with a
//! delivery log store, from the body the log kept when it ended (`log.keep_bodies`).
//! [`resend_range`] resends what the log says ended in a time range, paced like a dead-letter
//! replay.

use super::*;
use crate::log::{HookState, LogStore, Search};
use bytes::Bytes;

/// What [`resend`] committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Resent {
    /// The hook resent.
    pub hook: u64,
    /// The new hook (same body and headers, same source as it is now).
    pub new_hook: u64,
    /// Rows made: one per sink entry, or 1 with `sink`.
    pub rows: u32,
    /// The dead letters of the resent rows, deleted: the new hook delivers them, so a later
    /// `dlq replay` does not send them twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled_dead_letters: Vec<String>,
}

/// `ankusa hooks resend` / `POST /admin/hooks/{tenant}/{hook}/resend` without a log store:
/// [`resend_logged`] reading Redis only.
pub async fn resend(
    store: &Store,
    tenant: &str,
    hook: u64,
    sink: Option<u32>,
    max_hook_bytes: usize,
) -> Result<Resent, Error> {
    resend_logged(store, None, tenant, hook, sink, max_hook_bytes).await
}

/// Commit a delivered or dead-lettered hook again as a new hook of its source, for sink entry
/// `sink` or all of them; the resent rows' dead letters are deleted
/// ([`Resent::settled_dead_letters`]). The hook is read from Redis, else (with `log`) from
/// the body the delivery log kept. Errors: `not_found` (neither holds it: delivered longer
/// ago than `history.max_age_ms` or `log.retention_days`, a body over `log.keep_bodies`, or
/// erased), `bad_request` (a chosen row is still due, claimed or in its lane: it will be
/// delivered anyway; or the entry `sink`'s filter does not take the hook), `unknown_source`.
pub async fn resend_logged(
    store: &Store,
    log: Option<&LogStore>,
    tenant: &str,
    hook: u64,
    sink: Option<u32>,
    max_hook_bytes: usize,
) -> Result<Resent, Error> {
    // The tenant's partition holds its hooks and rows.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    check_id("tenant", tenant)?;
    let Some(h) = read_hook(store, hook).await?.filter(|h| h.tenant == tenant) else {
        // Gone from Redis: the delivery log's kept body, if any.
        let kept = match log {
            Some(log) => log.body(tenant, hook).await?,
            None => None,
        };
        let Some(b) = kept else {
            return Err(Error::NotFound(match log {
                Some(_) => format!(
                    "hook {hook} of tenant {tenant}: Redis no longer holds it and the delivery \
                     log keeps no body of it (larger than log.keep_bodies, held by claim check, \
                     erased, or older than log.retention_days)"
                ),
                None => format!(
                    "hook {hook} of tenant {tenant} (a delivered hook is kept for \
                     history.max_age_ms)"
                ),
            }));
        };
        let again = Again {
            source: &b.source,
            event_type: b.event_type,
            body: Bytes::from(b.body),
            headers: b.headers,
        };
        let (new_hook, rows) = again.commit(store, tenant, sink, max_hook_bytes).await?;
        return Ok(Resent {
            hook,
            new_hook,
            rows,
            settled_dead_letters: Vec::new(),
        });
    };
    let view = show_hook(store, tenant, hook).await?;
    for r in &view.rows {
        let chosen = sink.is_none_or(|s| s == r.sink);
        let pending = matches!(
            r.state,
            RowState::Due
                | RowState::Scheduled
                | RowState::Retrying
                | RowState::Parked
                | RowState::Claimed
                | RowState::InLane
        );
        if chosen && pending {
            return Err(Error::BadRequest(format!(
                "row {} is {}: it is still being delivered",
                r.row,
                r.state.as_str()
            )));
        }
    }
    let again = Again {
        source: &h.source,
        event_type: h.event_type.clone(),
        body: h.body.clone().unwrap_or_default(),
        headers: h.headers.clone(),
    };
    let (new_hook, rows) = again.commit(store, tenant, sink, max_hook_bytes).await?;
    // The resent rows' dead letters are settled by the new hook: deleted (with the old hook's
    // body once nothing else needs it), so a later replay cannot deliver them a second time.
    let settled: Vec<String> = view
        .rows
        .iter()
        .filter(|r| sink.is_none_or(|s| s == r.sink))
        .filter_map(|r| r.dead_letter.as_ref().map(|d| d.id.clone()))
        .collect();
    if !settled.is_empty() {
        store
            .dlq_purge(tenant, crate::store::DlqPurge::Ids(&settled))
            .await?;
    }
    Ok(Resent {
        hook,
        new_hook,
        rows,
        settled_dead_letters: settled,
    })
}

/// A hook to commit again, wherever it was read from.
struct Again<'a> {
    source: &'a str,
    event_type: Option<String>,
    body: Bytes,
    headers: String,
}

impl Again<'_> {
    /// Commit it as a new hook (the same event type, so the entries' filters take it as they
    /// took it); with `sink`, only for that entry, refused when its filter (as it is now)
    /// would drop the hook. Returns (the new hook, rows made).
    async fn commit(
        self,
        store: &Store,
        tenant: &str,
        sink: Option<u32>,
        max_hook_bytes: usize,
    ) -> Result<(u64, u32), Error> {
        if let Some(s) = sink {
            let entry = store
                .get_source(tenant, self.source)
                .await?
                .and_then(|spec| spec.sinks.get(s as usize).cloned());
            if let Some(filter) = entry.and_then(|e| e.filter) {
                if !filter.matches_hook(self.event_type.as_deref(), &self.body, &self.headers) {
                    return Err(Error::BadRequest(format!(
                        "sink entry {s} of {tenant}/{} does not take this hook (event type \
                         {:?}; its filter: {}); change the filter to resend this hook to it",
                        self.source,
                        self.event_type.as_deref().unwrap_or(""),
                        serde_json::to_string(&filter).unwrap_or_default()
                    )));
                }
            }
        }
        let opts = CommitOptions {
            only_sink: sink,
            event_types: self.event_type.map(|e| vec![Some(e)]).unwrap_or_default(),
            ..CommitOptions::default()
        };
        let (receipt, ids) = store
            .commit_with(
                tenant,
                self.source,
                &[(self.body, self.headers)],
                max_hook_bytes,
                &opts,
            )
            .await?;
        Ok((
            ids.first().copied().unwrap_or(receipt.first_hook),
            receipt.rows_per_hook,
        ))
    }
}

/// A hook [`resend_many`] did not resend, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResendFailure {
    /// The hook.
    pub hook: u64,
    /// Why, as [`resend`] said it (`not found: …`, `bad request: … still being delivered`).
    pub error: String,
}

/// What [`resend_many`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResendReport {
    /// The hooks resent, in the order asked.
    pub resent: Vec<Resent>,
    /// The hooks not resent (gone, or a row still being delivered).
    pub failed: Vec<ResendFailure>,
    /// Times the resend paused for pressure.
    pub pauses: u64,
    /// Time spent paused, ms.
    pub paused_ms: u64,
}

/// `ankusa hooks resend TENANT HOOK…`: [`resend_logged`] each hook in turn, paced like a
/// dead-letter replay: before each hook after the first it waits for [`crate::ops::pressure`]
/// to show room (window not full, lag at most `pace.max_lag_ms`, a live leader), unless
/// `pace.pace` is false. A hook that is gone or still being delivered is reported in
/// [`ResendReport::failed`] and the others go on. Errors: a bad tenant id;
/// [`Error::Unavailable`] after pausing `pace.max_pause_ms` in one stretch, or when Redis
/// or the log store cannot answer (what was resent stays resent).
#[allow(clippy::too_many_arguments)]
pub async fn resend_many(
    store: &Store,
    log: Option<&LogStore>,
    tenant: &str,
    hooks: &[u64],
    sink: Option<u32>,
    max_hook_bytes: usize,
    pace: &crate::dlq::ReplayOptions,
    mut progress: impl FnMut(crate::dlq::ReplayProgress),
) -> Result<ResendReport, Error> {
    // The tenant's partition holds its hooks and rows.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    check_id("tenant", tenant)?;
    let total = hooks.len() as u64;
    progress(crate::dlq::ReplayProgress::Matched { total });
    let mut report = ResendReport::default();
    let mut paced = crate::dlq::ReplayReport::default();
    for (i, &hook) in hooks.iter().enumerate() {
        if pace.pace && i > 0 {
            crate::dlq::wait_for_room(store, pace, &mut paced, &mut progress, i as u64, total)
                .await?;
        }
        match resend_logged(store, log, tenant, hook, sink, max_hook_bytes).await {
            Ok(r) => report.resent.push(r),
            Err(e @ (Error::NotFound(_) | Error::BadRequest(_))) => {
                report.failed.push(ResendFailure {
                    hook,
                    error: e.to_string(),
                })
            }
            Err(e) => return Err(e),
        }
        progress(crate::dlq::ReplayProgress::Step {
            done: i as u64 + 1,
            replayed: report.resent.len() as u64,
            total,
        });
    }
    report.pauses = paced.pauses;
    report.paused_ms = paced.paused_ms;
    Ok(report)
}

/// Most hooks one [`resend_range`] takes: a wider range is refused with the count, to be
/// split.
pub const RESEND_RANGE_MAX: u64 = 100_000;

/// Which ended hooks [`resend_range`] resends: what the delivery log says ended in
/// `[since_ms, until_ms)`, narrowed by state, event type and source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResendRange {
    /// Ended at or after, ms.
    pub since_ms: i64,
    /// Ended before, ms.
    pub until_ms: i64,
    /// Only hooks that ended so.
    pub state: Option<HookState>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only this sink entry (index).
    pub sink: Option<u32>,
    /// Count and list what would be resent; resend nothing.
    pub dry_run: bool,
}

/// What [`resend_range`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RangeResent {
    /// Hooks the log holds in the range.
    pub matched: u64,
    /// Nothing was resent (`dry_run`).
    pub dry_run: bool,
    /// With `dry_run`: the hooks that would be resent, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<u64>,
    /// What was resent (empty with `dry_run`).
    #[serde(flatten)]
    pub report: ResendReport,
}

/// `ankusa hooks resend TENANT --since … --until …` / `POST /admin/log/{tenant}/resend`:
/// every hook of `tenant` the delivery log says ended in the range (oldest first), resent
/// like [`resend_many`] (paced, each failure reported and the rest go on). Errors:
/// `bad_request` for an empty range or one holding more than [`RESEND_RANGE_MAX`] hooks;
/// what the log store or Redis answer.
#[allow(clippy::too_many_arguments)]
pub async fn resend_range(
    store: &Store,
    log: &LogStore,
    tenant: &str,
    range: &ResendRange,
    max_hook_bytes: usize,
    pace: &crate::dlq::ReplayOptions,
    progress: impl FnMut(crate::dlq::ReplayProgress),
) -> Result<RangeResent, Error> {
    check_id("tenant", tenant)?;
    if range.until_ms <= range.since_ms {
        return Err(Error::BadRequest(format!(
            "the range ends ({}) at or before it starts ({}): nothing is in it",
            range.until_ms, range.since_ms
        )));
    }
    let mut hooks = Vec::new();
    let mut q = Search {
        tenant: tenant.into(),
        since_ms: Some(range.since_ms),
        until_ms: Some(range.until_ms),
        state: range.state,
        event_type: range.event_type.clone(),
        source: range.source.clone(),
        hook: None,
        limit: 1000,
        after: None,
    };
    loop {
        let page = log.search(&q).await?;
        hooks.extend(page.hooks.iter().map(|h| h.hook));
        if hooks.len() as u64 > RESEND_RANGE_MAX {
            return Err(Error::BadRequest(format!(
                "more than {RESEND_RANGE_MAX} hooks ended in this range: split it (a narrower \
                 --since/--until, or --state, --event-type, --source)"
            )));
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => break,
        }
    }
    // Oldest first, as they happened.
    hooks.reverse();
    let mut out = RangeResent {
        matched: hooks.len() as u64,
        dry_run: range.dry_run,
        ..RangeResent::default()
    };
    if range.dry_run {
        out.hooks = hooks;
        return Ok(out);
    }
    out.report = resend_many(
        store,
        Some(log),
        tenant,
        &hooks,
        range.sink,
        max_hook_bytes,
        pace,
        progress,
    )
    .await?;
    Ok(out)
}
