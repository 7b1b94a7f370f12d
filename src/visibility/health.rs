//! Each sink entry's health over the last hour — success rate, p50/p99 attempt duration, last
//! error — computed from the attempt history (`history.enabled`, the default) of the tenant's
//! newest hooks. The console's tenant page and the portal's endpoint list show it.

use super::*;

/// The window [`entry_health`] looks back over, ms (one hour).
pub const HEALTH_WINDOW_MS: i64 = 3_600_000;
/// Hooks of the window [`entry_health`] reads at most (newest first): a page stays ~50 ms at
/// a busy tenant; past it the figures are those of the newest hooks and say so (`more`).
pub const HEALTH_HOOKS: usize = 2_000;

/// Parked rows [`entry_health`] reads at most (the first by due time).
pub const PARKED_MAX: usize = 1_000;

/// One sink entry's attempts in the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EntryHealth {
    /// Source id.
    pub source: String,
    /// Sink entry index within the source.
    pub sink: u32,
    /// Attempts finished in the window.
    pub attempts: u64,
    /// Of those, delivered.
    pub delivered: u64,
    /// `delivered / attempts`, 0.0..=1.0.
    pub success_rate: f64,
    /// Median attempt duration, ms.
    pub p50_ms: u64,
    /// 99th percentile attempt duration, ms (nearest rank).
    pub p99_ms: u64,
    /// The newest failed attempt's error, if one failed in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When that attempt started (ms since the epoch, Redis clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at_ms: Option<i64>,
    /// The entry's circuit breaker when it is not closed: `open` (attempts held until
    /// `breaker_until_ms`, its rows parked) or `half_open` (the period is over: the next
    /// attempt probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<String>,
    /// Until when the open breaker holds attempts (ms since the epoch, Redis clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_until_ms: Option<i64>,
    /// The entry's rows parked by its breaker now (of the first rows read, as `rows list`).
    #[serde(default)]
    pub parked: u64,
}

/// `GET /admin/tenants/{tenant}/health`: the tenant's sink entries with attempts in the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TenantHealth {
    /// Tenant id.
    pub tenant: String,
    /// Start of the window (ms since the epoch, Redis clock); it ends now.
    pub since_ms: i64,
    /// Hooks whose records were read.
    pub hooks: u64,
    /// The window holds more hooks than [`HEALTH_HOOKS`]: the figures are of the newest.
    pub more: bool,
    /// Per sink entry with an attempt in the window, by source then index.
    pub entries: Vec<EntryHealth>,
}

/// The health of `tenant`'s sink entries over the last [`HEALTH_WINDOW_MS`], from the attempt
/// records of its newest [`HEALTH_HOOKS`] hooks (none with history off), with each entry's
/// breaker when it is not closed and its parked rows (an entry with either is listed even
/// without attempts in the window). Errors: a bad tenant id, Redis failing.
pub async fn entry_health(store: &Store, tenant: &str) -> Result<TenantHealth, Error> {
    check_id("tenant", tenant)?;
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    let now = store.now_ms().await?;
    let since = now - HEALTH_WINDOW_MS;
    let (hooks, more) = store.recent_attempts(tenant, since, HEALTH_HOOKS).await?;
    let mut entries = summarize(
        hooks
            .iter()
            .flat_map(|h| h.records.iter().map(move |r| (h.source.as_str(), r))),
        since,
    );
    let breakers = store.tenant_breakers(tenant).await?;
    let parked = list_rows(store, tenant, None, Some(RowFilter::Parked), PARKED_MAX)
        .await?
        .rows;
    let mut entry = |source: &str, sink: u32| -> usize {
        match entries
            .iter()
            .position(|e| e.source == source && e.sink == sink)
        {
            Some(i) => i,
            None => {
                entries.push(EntryHealth {
                    source: source.into(),
                    sink,
                    ..Default::default()
                });
                entries.len() - 1
            }
        }
    };
    let mut marks: Vec<(usize, Option<&crate::store::BreakerRead>)> = Vec::new();
    for b in &breakers {
        marks.push((entry(&b.source, b.sink), Some(b)));
    }
    for r in &parked {
        marks.push((entry(&r.source, r.sink), None));
    }
    for (i, b) in marks {
        let e = &mut entries[i];
        match b {
            Some(b) => {
                let open = b.until_ms > now;
                e.breaker = Some(if open { "open" } else { "half_open" }.into());
                e.breaker_until_ms = open.then_some(b.until_ms);
            }
            None => e.parked += 1,
        }
    }
    entries.sort_by(|a, b| (&a.source, a.sink).cmp(&(&b.source, b.sink)));
    Ok(TenantHealth {
        tenant: tenant.into(),
        since_ms: since,
        hooks: hooks.len() as u64,
        more,
        entries,
    })
}

/// Fold attempt records (with their hook's source) started at or after `since_ms` into one
/// [`EntryHealth`] per `(source, sink)`.
pub fn summarize<'a>(
    records: impl Iterator<Item = (&'a str, &'a AttemptRecord)>,
    since_ms: i64,
) -> Vec<EntryHealth> {
    let mut by: BTreeMap<(String, u32), (EntryHealth, Vec<u64>)> = BTreeMap::new();
    for (source, r) in records.filter(|(_, r)| r.started_ms >= since_ms) {
        let (e, durations) = by.entry((source.to_string(), r.sink)).or_default();
        e.attempts += 1;
        durations.push(r.duration_ms);
        if r.outcome == "delivered" {
            e.delivered += 1;
        } else if e.last_error_at_ms.is_none_or(|at| r.started_ms >= at) {
            e.last_error = r.error.clone();
            e.last_error_at_ms = Some(r.started_ms);
        }
    }
    by.into_iter()
        .map(|((source, sink), (mut e, mut durations))| {
            durations.sort_unstable();
            e.source = source;
            e.sink = sink;
            e.success_rate = e.delivered as f64 / e.attempts.max(1) as f64;
            e.p50_ms = rank(&durations, 0.50);
            e.p99_ms = rank(&durations, 0.99);
            e
        })
        .collect()
}

/// The nearest-rank `q` quantile of sorted `v` (0 when empty).
fn rank(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// [`list_rows`] with [`RowFilter::Delivered`]: the delivered rows of the tenant's newest
/// hooks with history (at most [`HEALTH_HOOKS`] hooks read), newest hook first, optionally of
/// one source; at most `limit`. Empty with history off.
pub(super) async fn delivered_rows(
    store: &Store,
    tenant: &str,
    source: Option<&str>,
    limit: usize,
) -> Result<RowsPage, Error> {
    let (mut hooks, _) = store.recent_attempts(tenant, 0, HEALTH_HOOKS).await?;
    // The history orders hooks by their last record's time; the list promises hook ids,
    // newest first (a retried older hook can record after a newer one).
    hooks.sort_unstable_by_key(|h| std::cmp::Reverse(h.hook));
    let mut page = RowsPage::default();
    for h in hooks {
        if source.is_some_and(|s| s != h.source) {
            continue;
        }
        let mut last: BTreeMap<u32, &AttemptRecord> = BTreeMap::new();
        for r in &h.records {
            if last.get(&r.sink).is_none_or(|l| r.attempt >= l.attempt) {
                last.insert(r.sink, r);
            }
        }
        for (sink, r) in last.into_iter().filter(|(_, r)| r.outcome == "delivered") {
            if page.rows.len() >= limit {
                page.more = true;
                return Ok(page);
            }
            let first = h
                .records
                .iter()
                .filter(|a| a.sink == sink)
                .map(|a| a.started_ms)
                .min();
            page.rows.push(RowView {
                row: r.row.clone(),
                hook: h.hook,
                sink,
                source: h.source.clone(),
                event_type: h.event_type.clone(),
                state: RowState::Delivered,
                due_at_ms: None,
                attempts: r.attempt,
                first_attempt_ms: first,
                last_error: None,
                lane: None,
                lane_position: None,
                dead_letter: None,
            });
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sink: u32, started_ms: i64, duration_ms: u64, ok: bool) -> AttemptRecord {
        AttemptRecord {
            row: format!("1.{sink}"),
            sink,
            attempt: 1,
            started_ms,
            duration_ms,
            outcome: if ok { "delivered" } else { "retry" }.into(),
            status: (!ok).then_some(503),
            error_kind: None,
            error: (!ok).then(|| format!("http 503 at {started_ms}")),
            next_attempt_ms: None,
            reason: None,
        }
    }

    #[test]
    fn rates_quantiles_and_the_newest_error_per_entry_inside_the_window() {
        let mut rs: Vec<AttemptRecord> = (1..=100)
            .map(|i| record(0, 1_000 + i, i as u64, true))
            .collect();
        rs.push(record(1, 2_000, 7, false));
        rs.push(record(1, 2_500, 9, false));
        rs.push(record(1, 2_100, 5, true));
        rs.push(record(1, 10, 1_000_000, false)); // before the window: not counted
        let got = summarize(rs.iter().map(|r| ("orders", r)), 1_000);
        assert_eq!(got.len(), 2);
        let (a, b) = (&got[0], &got[1]);
        assert_eq!((a.attempts, a.delivered, a.success_rate), (100, 100, 1.0));
        assert_eq!((a.p50_ms, a.p99_ms), (50, 99));
        assert_eq!(a.last_error, None);
        assert_eq!((b.attempts, b.delivered), (3, 1));
        assert!((b.success_rate - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!((b.p50_ms, b.p99_ms), (7, 9));
        assert_eq!(b.last_error.as_deref(), Some("http 503 at 2500"));
        assert_eq!(b.last_error_at_ms, Some(2_500));
        assert!(summarize(std::iter::empty(), 0).is_empty());
    }
}
