//! Erasure of a tenant's or some hooks' data, everywhere it lives once they ended: the
//! records still waiting in the tenant's partition stream are archived first (so none
//! reaches the log store after the erasure), then the log store's records and kept bodies go,
//! and for a whole tenant its dead letters (with the bodies only they held) too. The erasure
//! is audited without the data.

use super::archiver::archive_pass;
use super::LogStore;
use crate::error::Error;
use crate::store::Store;

/// Passes of the archiver run before an erasure at most (each moves up to 50 batches).
const DRAIN_PASSES: usize = 20;

/// What [`erase`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Erasure {
    /// Tenant id.
    pub tenant: String,
    /// Records removed from the log store (attempts and ended hooks; their kept bodies with
    /// them).
    pub records_erased: u64,
    /// Dead letters deleted (a whole tenant only), with the hook bodies only they held.
    pub dead_letters_purged: u64,
}

/// Erase `tenant`'s data (all of it with `hooks` `None`, else those hooks') as `actor`.
/// Errors: a bad tenant id; `unavailable` when Redis or the log store cannot answer (then
/// nothing is reported erased, and running it again finishes it).
pub async fn erase(
    store: &Store,
    log: &LogStore,
    batch_entries: u64,
    actor: &str,
    tenant: &str,
    hooks: Option<&[u64]>,
) -> Result<Erasure, Error> {
    crate::model::check_id("tenant", tenant)?;
    let routed = store.for_tenant(tenant);
    // What waits in the stream is archived now, so the erasure below sees it.
    for _ in 0..DRAIN_PASSES {
        let pass = archive_pass(&routed, log, batch_entries).await?;
        if pass.backlog == 0 {
            break;
        }
    }
    let mut out = Erasure {
        tenant: tenant.into(),
        ..Erasure::default()
    };
    if hooks.is_none() {
        let filter = crate::dlq::Filter {
            tenant: Some(tenant.into()),
            ..crate::dlq::Filter::default()
        };
        out.dead_letters_purged =
            crate::dlq::purge(store, &crate::dlq::PurgeScope::Matching(filter))
                .await?
                .purged;
    }
    out.records_erased = log.erase(actor, tenant, hooks).await?;
    Ok(out)
}
