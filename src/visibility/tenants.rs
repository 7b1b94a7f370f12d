//! The busiest tenants (`ankusa tenants top`) and the gauges a partition's leader publishes
//! from Redis every few seconds.

use super::*;

/// One tenant in [`tenants_top`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TenantTop {
    /// Tenant id.
    pub tenant: String,
    /// Rows in its due set (due now or later).
    pub due_rows: u64,
    /// Of those, due now.
    pub due_now: u64,
    /// Rows claimed.
    pub claimed: u64,
    /// How late its oldest row due now is, ms (0 when none is due).
    pub oldest_lag_ms: i64,
    /// Rows with failed attempts waiting (among the first [`SCAN_ROWS`]).
    pub retrying_rows: u64,
    /// Sink entries (`source/index`) with such rows.
    pub failing_sinks: Vec<String>,
    /// Body bytes of its stored hooks: rows to deliver and dead letters (what a full Redis
    /// holds for it until they are delivered or purged).
    #[serde(default)]
    pub bytes: u64,
    /// Body bytes of its delivered hooks kept for resend (they give way first when Redis is
    /// full).
    #[serde(default)]
    pub kept_bytes: u64,
}

/// How [`tenants_top_by`] orders tenants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TopBy {
    /// Most rows (due and claimed) first: who waits.
    #[default]
    Rows,
    /// Most body bytes (stored and kept) first: who holds Redis' memory.
    Bytes,
}

/// A page of [`tenants_top`]: `{"tenants": […], "more": …}`, the shape of every list the CLI
/// and the admin API answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TenantsPage {
    /// The busiest tenants, most rows first.
    pub tenants: Vec<TenantTop>,
    /// More tenants have rows than `limit`.
    pub more: bool,
}

/// `ankusa tenants top`: per tenant with rows, from Redis: due rows, claimed, oldest lag,
/// failing sinks, body bytes; most due rows first, at most `limit` (`only`: just these
/// tenants).
pub async fn tenants_top(
    store: &Store,
    only: Option<&[String]>,
    limit: usize,
) -> Result<TenantsPage, Error> {
    tenants_top_by(store, only, None, limit, TopBy::Rows).await
}

/// Body bytes per tenant over every partition, from the counts the scripts keep (two hash
/// reads per partition, whatever the number of tenants).
pub async fn tenant_bytes(
    store: &Store,
) -> Result<BTreeMap<String, crate::store::TenantBytes>, Error> {
    let mut all = BTreeMap::new();
    for p in store.all_partitions() {
        all.extend(p.tenant_bytes().await.map_err(Error::Store)?);
    }
    Ok(all)
}

/// [`tenants_top`] ordered `by`: with [`TopBy::Bytes`] the tenants holding the most body
/// bytes (stored plus kept) first, read from the byte counts, so only the `limit` listed get
/// their rows counted. `search`: only tenants whose id contains it. Either way only the
/// `limit` listed get their retrying rows read.
pub async fn tenants_top_by(
    store: &Store,
    only: Option<&[String]>,
    search: Option<&str>,
    limit: usize,
    by: TopBy,
) -> Result<TenantsPage, Error> {
    let bytes = tenant_bytes(store).await?;
    let fill = |page: &mut TenantsPage| {
        for t in &mut page.tenants {
            let b = bytes.get(&t.tenant).copied().unwrap_or_default();
            (t.bytes, t.kept_bytes) = (b.bytes, b.kept_bytes);
        }
    };
    match by {
        TopBy::Rows => {
            let mut page = rows_top(store, only, search, limit).await?;
            fill(&mut page);
            Ok(page)
        }
        TopBy::Bytes => {
            let held = |b: &crate::store::TenantBytes| b.bytes.saturating_add(b.kept_bytes);
            let mut ranked: Vec<(&String, u64)> = bytes
                .iter()
                .filter(|(t, _)| only.is_none_or(|o| o.contains(t)))
                .filter(|(t, _)| search.is_none_or(|q| t.contains(q)))
                .map(|(t, b)| (t, held(b)))
                .filter(|(_, n)| *n > 0)
                .collect();
            ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            let more = ranked.len() > limit;
            ranked.truncate(limit);
            let names: Vec<String> = ranked.into_iter().map(|(t, _)| t.clone()).collect();
            let mut page = rows_top(store, Some(&names), None, names.len()).await?;
            fill(&mut page);
            page.tenants.sort_by(|a, b| {
                (b.bytes + b.kept_bytes)
                    .cmp(&(a.bytes + a.kept_bytes))
                    .then(a.tenant.cmp(&b.tenant))
            });
            page.more = more;
            Ok(page)
        }
    }
}

/// The row counts of [`tenants_top`], most rows first.
async fn rows_top(
    store: &Store,
    only: Option<&[String]>,
    search: Option<&str>,
    limit: usize,
) -> Result<TenantsPage, Error> {
    let now = store.now_ms().await?;
    // Every partition's claimed rows and line of tenants.
    let mut per: BTreeMap<String, TenantTop> = BTreeMap::new();
    for p in store.all_partitions() {
        let claimed = p.claimed_members().await?;
        for m in &claimed {
            if let Some((t, _)) = m.split_once('/') {
                per.entry(t.to_string()).or_default().claimed += 1;
            }
        }
        let active = p.line(None).await?;
        for t in active {
            per.entry(t).or_default();
        }
    }
    if let Some(only) = only {
        per.retain(|t, _| only.contains(t));
        for t in only {
            per.entry(t.clone()).or_default();
        }
    }
    if let Some(q) = search.filter(|q| !q.is_empty()) {
        per.retain(|t, _| t.contains(q));
    }
    // The due sets in brief, one pipelined round trip per partition for every tenant.
    let mut by_partition: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for t in per.keys() {
        by_partition
            .entry(store.for_tenant(t).partition_index())
            .or_default()
            .push(t.clone());
    }
    for names in by_partition.values() {
        let home = store.for_tenant(&names[0]);
        for (t, d) in names.iter().zip(home.due_summaries(names, now).await?) {
            if let Some(top) = per.get_mut(t) {
                top.due_rows = d.rows;
                top.due_now = d.due_now;
                top.oldest_lag_ms = d.earliest_ms.map_or(0, |at| (now - at).max(0));
            }
        }
    }
    let mut out: Vec<TenantTop> = per
        .into_iter()
        .map(|(tenant, top)| TenantTop { tenant, ..top })
        .collect();
    out.sort_by(|a, b| {
        (b.due_rows + b.claimed)
            .cmp(&(a.due_rows + a.claimed))
            .then(a.tenant.cmp(&b.tenant))
    });
    let more = out.len() > limit;
    out.truncate(limit);
    // Rows retrying and the sinks failing (row reads) for the tenants listed only.
    for top in &mut out {
        let page = list_rows(
            store,
            &top.tenant,
            None,
            Some(RowFilter::Retrying),
            SCAN_ROWS as usize,
        )
        .await?;
        top.retrying_rows = page.rows.len() as u64;
        let mut sinks: Vec<String> = page
            .rows
            .iter()
            .map(|r| format!("{}/{}", r.source, r.sink))
            .collect();
        sinks.sort();
        sinks.dedup();
        top.failing_sinks = sinks;
    }
    Ok(TenantsPage { tenants: out, more })
}

/// What the partition's leader publishes every few seconds from Redis: the partition's hook
/// counts (`ankusa_partition_hooks_*_total`, every producer's commits) and the
/// `ankusa_tenant_*{tenant}` gauges of `tenants` (config `history.metrics_tenants`; none when
/// empty) from [`tenants_top`]. A failed read leaves the last values and is logged.
pub async fn publish_tenant_gauges(store: &Store, tenants: &[String]) {
    match store.hook_counts().await {
        Ok((committed, unmatched)) => {
            crate::metrics::publish_partition_totals(store.partition_index(), committed, unmatched)
        }
        Err(e) => tracing::warn!(error = %e, "partition hook counts not updated"),
    }
    if tenants.is_empty() {
        return;
    }
    match tenants_top(store, Some(tenants), tenants.len()).await {
        Ok(top) => {
            for t in top.tenants {
                let l = [("tenant", t.tenant.clone())];
                metrics::gauge!("ankusa_tenant_due_rows", &l).set(t.due_rows as f64);
                metrics::gauge!("ankusa_tenant_claimed_rows", &l).set(t.claimed as f64);
                metrics::gauge!("ankusa_tenant_retrying_rows", &l).set(t.retrying_rows as f64);
                metrics::gauge!("ankusa_tenant_oldest_lag_seconds", &l)
                    .set(t.oldest_lag_ms as f64 / 1000.0);
                metrics::gauge!("ankusa_tenant_failing_sinks", &l)
                    .set(t.failing_sinks.len() as f64);
            }
        }
        Err(e) => tracing::warn!(error = %e, "per-tenant gauges not updated"),
    }
}
