//! Admin endpoints of delivery visibility ([`crate::visibility`]) and of the source
//! registry over HTTP: `GET /admin/hooks/{tenant}/{hook}`, `GET …/body`, `POST …/resend`, `POST …/cancel`,
//! `GET /admin/rows`, `GET /admin/tenants/top`, `GET /admin/tenants/{tenant}/health`, `GET/PUT/DELETE /admin/sources/{tenant}/{source}`
//! and `GET /admin/sources`. Their access: [`super::access`].

use super::{AdminState, ApiError, ErrorBody};
use crate::error::Error;
use crate::model::{check_id, SourceSpec};
use crate::visibility::{
    self, CancelAnswer, HookView, Resent, RowFilter, RowsPage, TenantHealth, TenantsPage,
};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of this module (their access: [`super::access`]).
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(hook_show))
        .routes(routes!(hook_body))
        .routes(routes!(hook_resend))
        .routes(routes!(hook_cancel))
        .routes(routes!(rows_list))
        .routes(routes!(tenants_top))
        .routes(routes!(tenant_health))
        .routes(routes!(source_get, source_put, source_delete))
        .routes(routes!(sources_list))
        .merge(super::log::routes())
}

/// A hook, its rows' states and its attempts (`ankusa hooks show`).
#[utoipa::path(get, path = "/admin/hooks/{tenant}/{hook}", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path)),
    responses((status = 200, body = HookView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn hook_show(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
) -> Result<Json<HookView>, ApiError> {
    Ok(Json(
        visibility::show_hook_logged(st.worker.store(), st.worker.log_store(), &tenant, hook)
            .await?,
    ))
}

/// A hook's body, wherever it is still kept.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct HookBody {
    /// Where it was read: `live` (rows or dead letters need the hook), `kept` (delivered,
    /// kept in Redis for resend) or `logged` (ended, kept by the delivery log).
    pub stored: String,
    /// Body size in bytes.
    pub size: u64,
    /// The body, when it is UTF-8.
    pub body: Option<String>,
    /// The body in standard base64, when it is not UTF-8.
    pub body_base64: Option<String>,
}

/// A hook's body: from Redis while it holds the hook (pending, dead-lettered, or delivered
/// and kept for resend), else from the delivery log when it kept the body
/// (`log.keep_bodies`); 404 when neither has it, or the hook is another tenant's.
#[utoipa::path(get, path = "/admin/hooks/{tenant}/{hook}/body", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path)),
    responses((status = 200, body = HookBody), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn hook_body(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
) -> Result<Json<HookBody>, ApiError> {
    check_id("tenant", &tenant).map_err(Error::from)?;
    let routed = st.worker.store().for_tenant(&tenant);
    let record = routed
        .hook_record_or_kept(hook)
        .await
        .map_err(Error::Store)?
        // Hook ids are instance-wide: another tenant's hook reads as missing.
        .filter(|r| r.tenant == tenant);
    let found = match record.and_then(|r| Some((r.kept, r.body?))) {
        Some((kept, body)) => Some((if kept { "kept" } else { "live" }, body.to_vec())),
        None => match st.worker.log_store() {
            Some(log) => log
                .body(&tenant, hook)
                .await
                .map_err(Error::from)?
                .map(|b| ("logged", b.body)),
            None => None,
        },
    };
    let (stored, body) = found.ok_or_else(|| {
        Error::NotFound(format!("no body of hook {hook} of tenant {tenant} is kept"))
    })?;
    let size = body.len() as u64;
    let (body, body_base64) = match String::from_utf8(body) {
        Ok(text) => (Some(text), None),
        Err(e) => {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
            (None, Some(b64))
        }
    };
    Ok(Json(HookBody {
        stored: stored.into(),
        size,
        body,
        body_base64,
    }))
}

/// Query of `POST /admin/hooks/{tenant}/{hook}/resend`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ResendQuery {
    /// Only this sink entry (index); all of them when absent.
    pub sink: Option<u32>,
}

/// Commit a delivered or dead-lettered hook again, as a new hook, for one or all sink entries.
#[utoipa::path(post, path = "/admin/hooks/{tenant}/{hook}/resend", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path), ResendQuery),
    responses((status = 200, body = Resent), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["replay"])))]
async fn hook_resend(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
    q: Result<Query<ResendQuery>, QueryRejection>,
) -> Result<Json<Resent>, ApiError> {
    let Query(q) = q?;
    let max = st.worker.config().commit.max_hook_bytes;
    Ok(Json(
        visibility::resend_logged(
            st.worker.store(),
            st.worker.log_store(),
            &tenant,
            hook,
            q.sink,
            max,
        )
        .await?,
    ))
}

/// Cancel a scheduled hook before it is due (`ankusa hooks cancel`): atomically, only while
/// none of its rows is claimed. 200 either way: `cancelled` says whether it was, `outcome`
/// and `message` why not (`not_scheduled`, `claimed`, `finished`). 404 when neither the
/// hook nor any record of it is left for the tenant. The `ingest` scope: whoever may commit
/// a tenant's hooks may cancel them.
#[utoipa::path(post, path = "/admin/hooks/{tenant}/{hook}/cancel", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path)),
    responses((status = 200, body = CancelAnswer), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["ingest"])))]
async fn hook_cancel(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
) -> Result<Json<CancelAnswer>, ApiError> {
    Ok(Json(
        visibility::cancel(st.worker.store(), &tenant, hook).await?,
    ))
}

/// Query of `GET /admin/rows`.
#[derive(Debug, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct RowsQuery {
    /// Tenant id.
    pub tenant: String,
    /// Only this source.
    #[serde(default)]
    pub source: Option<String>,
    /// Only rows in this state.
    #[serde(default)]
    pub state: Option<RowFilter>,
    /// At most this many (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A tenant's due, retrying, parked and claimed rows with their last error and next attempt.
#[utoipa::path(get, path = "/admin/rows", tag = "visibility", params(RowsQuery),
    responses((status = 200, body = RowsPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn rows_list(
    State(st): State<AdminState>,
    q: Result<Query<RowsQuery>, QueryRejection>,
) -> Result<Json<RowsPage>, ApiError> {
    let Query(q) = q?;
    Ok(Json(
        visibility::list_rows(
            st.worker.store(),
            &q.tenant,
            q.source.as_deref(),
            q.state,
            q.limit.unwrap_or(100),
        )
        .await?,
    ))
}

/// Query of `GET /admin/tenants/top`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct TopQuery {
    /// Only this tenant (a tenant token sees only its own line).
    pub tenant: Option<String>,
    /// Only tenants whose id contains this text (the console's search box), searched over
    /// every tenant with rows before `limit` applies.
    pub q: Option<String>,
    /// At most this many tenants (default 20).
    pub limit: Option<usize>,
    /// `rows` (default): most rows first; `bytes`: most body bytes (stored and kept) first.
    pub by: Option<visibility::TopBy>,
}

/// Tenants with rows: due rows, claimed, oldest lag, failing sinks, body bytes; most rows
/// first, or most bytes with `by=bytes` (only `tenant`, when given).
#[utoipa::path(get, path = "/admin/tenants/top", tag = "visibility", params(TopQuery),
    responses((status = 200, body = TenantsPage), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn tenants_top(
    State(st): State<AdminState>,
    q: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TenantsPage>, ApiError> {
    let Query(q) = q?;
    let only = q.tenant.map(|t| vec![t]);
    Ok(Json(
        visibility::tenants_top_by(
            st.worker.store(),
            only.as_deref(),
            q.q.as_deref(),
            q.limit.unwrap_or(20),
            q.by.unwrap_or_default(),
        )
        .await?,
    ))
}

/// Each sink entry's health over the last hour: attempts, success rate, p50/p99 attempt
/// duration, last error; from the attempt history of the tenant's newest hooks (empty with
/// `history.enabled = false`).
#[utoipa::path(get, path = "/admin/tenants/{tenant}/health", tag = "visibility",
    params(("tenant" = String, Path)),
    responses((status = 200, body = TenantHealth), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn tenant_health(
    State(st): State<AdminState>,
    Path(tenant): Path<String>,
) -> Result<Json<TenantHealth>, ApiError> {
    Ok(Json(
        visibility::entry_health(st.worker.store(), &tenant).await?,
    ))
}

/// A registered source.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub(super) struct SourceView {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Incremented by every put.
    pub version: u64,
    /// Its sink entries (secret references `${env:…}` as written, never resolved).
    #[schema(value_type = Object)]
    pub spec: SourceSpec,
}

fn no_source(tenant: &str, source: &str) -> ApiError {
    Error::NotFound(format!("source {tenant}/{source}")).into()
}

/// A source's spec and version.
#[utoipa::path(get, path = "/admin/sources/{tenant}/{source}", tag = "sources",
    params(("tenant" = String, Path), ("source" = String, Path)),
    responses((status = 200, body = SourceView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["sources"])))]
async fn source_get(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
) -> Result<Json<SourceView>, ApiError> {
    check_id("tenant", &tenant).map_err(Error::from)?;
    check_id("source", &source).map_err(Error::from)?;
    let store = st.worker.store();
    let spec = store
        .get_source(&tenant, &source)
        .await
        .map_err(Error::from)?
        .ok_or_else(|| no_source(&tenant, &source))?;
    let version = store
        .for_tenant(&tenant)
        .source_version(&tenant, &source)
        .await
        .map_err(Error::Store)?;
    Ok(Json(SourceView {
        tenant,
        source,
        version: version.unwrap_or(0),
        spec,
    }))
}

/// The answer of a put.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct SourcePut {
    /// The source's new version.
    pub version: u64,
    /// Its sink entries.
    pub sinks: usize,
    /// What the spec does that will not work as it reads, though it is stored: a filter
    /// reading a header ingest does not keep (`admin.forward_headers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The query of a source put.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct SourcePutQuery {
    /// Store a spec with no sinks: its hooks are stored and go nowhere. Refused without it,
    /// as `ankusa source put` refuses without `--allow-no-sinks`.
    pub allow_no_sinks: bool,
}

/// Register or replace a source, with the validation and versioning of `ankusa source
/// put`: the body is the JSON spec `{"sinks": [{"module": "http", "opts": {"url": …}}]}`.
/// A spec with no sinks is refused unless `allow_no_sinks=true`.
#[utoipa::path(put, path = "/admin/sources/{tenant}/{source}", tag = "sources",
    params(("tenant" = String, Path), ("source" = String, Path), SourcePutQuery),
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, body = SourcePut), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["sources"])))]
async fn source_put(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
    q: Result<Query<SourcePutQuery>, QueryRejection>,
    body: Bytes,
) -> Result<Json<SourcePut>, ApiError> {
    let Query(q) = q?;
    let spec: SourceSpec =
        serde_json::from_slice(&body).map_err(|e| Error::InvalidSource(e.to_string()))?;
    if spec.sinks.is_empty() && !q.allow_no_sinks {
        return Err(Error::InvalidSource(format!(
            "no sinks: hooks committed to {tenant}/{source} would be stored and go nowhere; \
             add a sink, or pass allow_no_sinks=true if that is what you want"
        ))
        .into());
    }
    let version = st
        .worker
        .store()
        .put_source(&tenant, &source, &spec)
        .await
        .map_err(Error::from)?;
    Ok(Json(SourcePut {
        version,
        sinks: spec.sinks.len(),
        warnings: super::ingest::unforwarded_filter_headers(&spec, &st.forward_headers),
    }))
}

/// The answer of a delete.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct SourceDeleted {
    /// Always true (a missing source is `not_found`).
    pub deleted: bool,
}

/// Delete a source; its pending rows are dead-lettered `source_gone` when claimed.
#[utoipa::path(delete, path = "/admin/sources/{tenant}/{source}", tag = "sources",
    params(("tenant" = String, Path), ("source" = String, Path)),
    responses((status = 200, body = SourceDeleted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["sources"])))]
async fn source_delete(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
) -> Result<Json<SourceDeleted>, ApiError> {
    check_id("tenant", &tenant).map_err(Error::from)?;
    check_id("source", &source).map_err(Error::from)?;
    if st
        .worker
        .store()
        .delete_source(&tenant, &source)
        .await
        .map_err(Error::from)?
    {
        Ok(Json(SourceDeleted { deleted: true }))
    } else {
        Err(no_source(&tenant, &source))
    }
}

/// Query of `GET /admin/sources`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct SourcesQuery {
    /// Only this tenant's sources.
    pub tenant: Option<String>,
}

/// One entry of the source list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct SourceRef {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
}

/// The source list: `{"sources": […]}`, wrapped like every other list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct SourceList {
    /// The sources, sorted by tenant then source.
    pub sources: Vec<SourceRef>,
}

/// Every registered source (of one tenant), sorted.
#[utoipa::path(get, path = "/admin/sources", tag = "sources", params(SourcesQuery),
    responses((status = 200, body = SourceList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["sources"])))]
async fn sources_list(
    State(st): State<AdminState>,
    q: Result<Query<SourcesQuery>, QueryRejection>,
) -> Result<Json<SourceList>, ApiError> {
    let Query(q) = q?;
    Ok(Json(SourceList {
        sources: st
            .worker
            .store()
            .list_sources()
            .await
            .map_err(Error::from)?
            .into_iter()
            .filter(|(t, _)| q.tenant.as_deref().is_none_or(|want| want == t))
            .map(|(tenant, source)| SourceRef { tenant, source })
            .collect(),
    }))
}
