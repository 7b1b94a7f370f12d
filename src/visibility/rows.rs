//! `ankusa rows list` / `GET /admin/rows`: a tenant's rows read a page at a time.

use super::*;

/// `ankusa rows list` / `GET /admin/rows`: a tenant's claimed and due rows (the first
/// [`SCAN_ROWS`] by due time), optionally of one source and in one state, each with its last
/// error and next attempt time; at most `limit`.
pub async fn list_rows(
    store: &Store,
    tenant: &str,
    source: Option<&str>,
    state: Option<RowFilter>,
    limit: usize,
) -> Result<RowsPage, Error> {
    // The tenant's partition holds its hooks and rows.
    let routed = store.for_tenant(tenant);
    let store = &*routed;
    check_id("tenant", tenant)?;
    if let Some(s) = source {
        check_id("source", s)?;
    }
    if state == Some(RowFilter::Delivered) {
        return delivered_rows(store, tenant, source, limit).await;
    }
    let now = store.now_ms().await?;
    let prefix = format!("{tenant}/");
    let claimed = store.claimed_members().await?;
    let mut ids: Vec<String> = claimed
        .into_iter()
        .filter_map(|m| m.strip_prefix(&prefix).map(str::to_string))
        .collect();
    let want = Want {
        source,
        state,
        limit,
    };
    // The due set is read a page at a time and the reading stops at `limit + 1` matches: a
    // console page of 50 rows reads ~100 rows, not the first SCAN_ROWS (0.5–1 s at 10 000).
    let chunk = (limit as i64 + 1).clamp(100, SCAN_ROWS);
    let mut page = RowsPage::default();
    let mut read = 0i64;
    loop {
        if !ids.is_empty() && add_rows(store, tenant, now, &ids, want, &mut page).await? {
            break;
        }
        if read >= SCAN_ROWS {
            break;
        }
        let due = store
            .due_range(tenant, read, chunk.min(SCAN_ROWS - read))
            .await?;
        if due.is_empty() {
            break;
        }
        read += due.len() as i64;
        ids = due.into_iter().map(|(r, _)| r).collect();
    }
    Ok(page)
}

/// What a [`list_rows`] caller asked for.
#[derive(Clone, Copy)]
struct Want<'a> {
    source: Option<&'a str>,
    state: Option<RowFilter>,
    limit: usize,
}

/// Read rows `ids` of `tenant` and add those `want` selects to `page`; true once `page` is
/// full and one more matched (`page.more`).
async fn add_rows(
    store: &Store,
    tenant: &str,
    now: i64,
    ids: &[String],
    want: Want<'_>,
    page: &mut RowsPage,
) -> Result<bool, Error> {
    let reads = read_rows(store, tenant, ids).await?;
    let parsed: Vec<Option<RowId>> = ids.iter().map(|r| RowId::parse(r)).collect();
    let hooks = store
        .hook_sources(parsed.iter().flatten().map(|r| r.hook))
        .await?;
    for ((id, r), rid) in ids.iter().zip(reads).zip(parsed) {
        let Some(row_state) = r.state(now) else {
            continue;
        };
        let (hook, sink) = rid.map_or((0, 0), |r| (r.hook, r.sink));
        let (hook_source, event_type) = hooks.get(&hook).cloned().unwrap_or_default();
        let view = RowView {
            row: id.clone(),
            hook,
            sink,
            source: hook_source,
            event_type,
            state: row_state,
            due_at_ms: r.due,
            attempts: r.attempts,
            first_attempt_ms: r.first,
            last_error: r.error,
            lane: None,
            lane_position: None,
            dead_letter: None,
        };
        if want.source.is_some_and(|s| s != view.source) {
            continue;
        }
        if let Some(f) = want.state {
            if !f.matches(&view) {
                continue;
            }
        }
        if page.rows.len() >= want.limit {
            page.more = true;
            return Ok(true);
        }
        page.rows.push(view);
    }
    Ok(false)
}
