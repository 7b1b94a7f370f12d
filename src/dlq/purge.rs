//! Purging dead letters by scope, and the retention applied by the leader (`[dlq]`).

use super::*;

/// The retention of dead letters (and so of their hook bodies).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct Retention {
    /// Dead letters older than this are purged, ms; 0: no age limit.
    pub max_age_ms: u64,
    /// Most dead letters kept per tenant, the oldest beyond it purged; 0: no limit.
    pub max_per_tenant: u64,
}

impl From<&DlqConfig> for Retention {
    fn from(c: &DlqConfig) -> Self {
        Retention {
            max_age_ms: c.max_age_ms,
            max_per_tenant: c.max_per_tenant,
        }
    }
}

/// What [`purge`] deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeScope {
    /// What the retention does not keep, in every tenant (or `tenant` only).
    Retention {
        /// The retention.
        retention: Retention,
        /// Only this tenant.
        tenant: Option<String>,
    },
    /// Every dead letter the filter selects (an empty filter: all of them).
    Matching(Filter),
}

/// What a [`purge`] did.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
pub struct PurgeReport {
    /// Dead letters deleted (with the hook bodies no row or dead letter needed any more).
    pub purged: u64,
}

/// Delete dead letters and the hook bodies only they kept (`dlq_purge.lua`, bounded calls).
/// Errors: a malformed filter; the store failing.
pub async fn purge(store: &Store, scope: &PurgeScope) -> Result<PurgeReport, Error> {
    let mut report = PurgeReport::default();
    match scope {
        PurgeScope::Retention { retention, tenant } => {
            if let Some(t) = tenant {
                crate::model::check_id("tenant", t)?;
            }
            if retention.max_age_ms == 0 && retention.max_per_tenant == 0 {
                return Ok(report);
            }
            let ts = match tenant {
                Some(t) => vec![t.clone()],
                None => tenants(store).await?,
            };
            for t in ts {
                loop {
                    let what = DlqPurge::Retain {
                        max_age_ms: retention.max_age_ms,
                        max_entries: retention.max_per_tenant,
                        limit: PAGE,
                    };
                    let (n, more) = store.dlq_purge(&t, what).await?;
                    report.purged += n;
                    if !more {
                        break;
                    }
                }
            }
        }
        PurgeScope::Matching(filter) => {
            filter.check()?;
            let bounds = filter.bounds(store.now_ms().await?)?;
            for t in filter_tenants(store, filter).await? {
                let mut walk = Walk::new(store, &t, bounds).await?;
                while let Some(page) = walk.next(store, filter, PAGE).await? {
                    let ids: Vec<String> = page.into_iter().map(|d| d.id).collect();
                    if !ids.is_empty() {
                        report.purged += store.dlq_purge(&t, DlqPurge::Ids(&ids)).await?.0;
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Apply `config`'s retention to every tenant; the leader calls this every `dlq.sweep_ms`.
pub async fn apply_retention(store: &Store, config: &DlqConfig) -> Result<u64, Error> {
    let scope = PurgeScope::Retention {
        retention: config.into(),
        tenant: None,
    };
    Ok(purge(store, &scope).await?.purged)
}
