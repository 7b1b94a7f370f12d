//! Admin endpoints of the delivery log ([`crate::log`]): `GET /admin/log/{tenant}/hooks`
//! (search), `GET /admin/log/{tenant}/hooks/{hook}/attempts` and `POST
//! /admin/log/{tenant}/erase`. Their access: [`super::access`] (a tenant token with `read`
//! reads its own tenant's log; erasure is the operator's).

use super::{AdminState, ApiError, ErrorBody};
use crate::error::Error;
use crate::log::{HookState, LogStore, Search, SearchPage};
use crate::model::check_id;
use crate::store::AttemptRecord;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of this module.
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(log_search))
        .routes(routes!(log_attempts))
        .routes(routes!(log_erase))
}

/// The worker's log store, or a 400 saying how to configure one.
fn log_store(st: &AdminState) -> Result<&LogStore, ApiError> {
    st.worker.log_store().ok_or_else(|| {
        ApiError::from(Error::BadRequest(
            "no delivery log store is configured: set [log] url on the worker".into(),
        ))
    })
}

/// Query of `GET /admin/log/{tenant}/hooks`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct SearchQuery {
    /// Ended at or after: ms since the epoch, an RFC 3339 time or a duration ago (`2h`).
    /// Default 24 h ago.
    pub since: Option<String>,
    /// Ended before, as `since`. Default: now.
    pub until: Option<String>,
    /// `delivered` or `dead_lettered`.
    pub state: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only this hook id.
    pub hook: Option<u64>,
    /// At most this many, 1..=1000 (default 50).
    pub limit: Option<u32>,
    /// The `next` of the previous page.
    pub after: Option<String>,
}

/// A tenant's ended hooks from the delivery log, newest first, one keyset page at a time.
#[utoipa::path(get, path = "/admin/log/{tenant}/hooks", tag = "visibility",
    params(("tenant" = String, Path), SearchQuery),
    responses((status = 200, body = SearchPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn log_search(
    State(st): State<AdminState>,
    Path(tenant): Path<String>,
    q: Result<Query<SearchQuery>, QueryRejection>,
) -> Result<Json<SearchPage>, ApiError> {
    let Query(q) = q?;
    check_id("tenant", &tenant).map_err(Error::from)?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(HookState::parse(s).ok_or_else(|| {
            Error::BadRequest(format!("state {s:?}: expected delivered or dead_lettered"))
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Error::BadRequest("limit must be in 1..=1000".into()).into());
    }
    let log = log_store(&st)?;
    let now = st.worker.store().now_ms().await.map_err(Error::from)?;
    let since = match &q.since {
        Some(s) => crate::dlq::parse_time(s, now)?,
        None => now - 86_400_000,
    };
    let until = q
        .until
        .as_deref()
        .map(|s| crate::dlq::parse_time(s, now))
        .transpose()?;
    let page = log
        .search(&Search {
            tenant,
            since_ms: Some(since),
            until_ms: until,
            state,
            event_type: q.event_type,
            source: q.source,
            hook: q.hook,
            limit,
            after: q.after,
        })
        .await
        .map_err(Error::from)?;
    Ok(Json(page))
}

/// Every attempt of a tenant's hook in the delivery log, oldest first.
#[utoipa::path(get, path = "/admin/log/{tenant}/hooks/{hook}/attempts", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path)),
    responses((status = 200, body = Vec<AttemptRecord>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn log_attempts(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
) -> Result<Json<Vec<AttemptRecord>>, ApiError> {
    check_id("tenant", &tenant).map_err(Error::from)?;
    let log = log_store(&st)?;
    Ok(Json(
        log.attempts(&tenant, hook).await.map_err(Error::from)?,
    ))
}

/// Body of `POST /admin/log/{tenant}/erase`: the hooks to erase, or `all`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(super) struct EraseBody {
    /// These hooks' records.
    pub hooks: Vec<u64>,
    /// Every record of the tenant (then `hooks` must be empty).
    pub all: bool,
}

/// What an erasure removed.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Erased {
    /// Tenant id.
    pub tenant: String,
    /// Records removed (attempts and ended hooks).
    pub records_erased: u64,
}

/// Remove a tenant's records (`all`) or some hooks' from the delivery log; the erasure is
/// audited (who, when, how many), never the data.
#[utoipa::path(post, path = "/admin/log/{tenant}/erase", tag = "visibility",
    params(("tenant" = String, Path)), request_body = EraseBody,
    responses((status = 200, body = Erased), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn log_erase(
    State(st): State<AdminState>,
    Path(tenant): Path<String>,
    body: Result<Json<EraseBody>, JsonRejection>,
) -> Result<Json<Erased>, ApiError> {
    let Json(b) = body?;
    check_id("tenant", &tenant).map_err(Error::from)?;
    let hooks = match (b.all, b.hooks.is_empty()) {
        (true, true) => None,
        (false, false) if b.hooks.len() <= 10_000 => Some(b.hooks),
        (false, false) => {
            return Err(Error::BadRequest("at most 10000 hooks per call".into()).into())
        }
        _ => {
            return Err(Error::BadRequest(
                "name the hooks to erase, or \"all\": true for every record of the tenant".into(),
            )
            .into())
        }
    };
    let log = log_store(&st)?;
    let n = log
        .erase("admin-api:operator", &tenant, hooks.as_deref())
        .await
        .map_err(Error::from)?;
    Ok(Json(Erased {
        tenant,
        records_erased: n,
    }))
}
