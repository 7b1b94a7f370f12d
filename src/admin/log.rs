//! Admin endpoints of the delivery log ([`crate::log`]): `GET /admin/log/{tenant}/hooks`
//! (search), `GET /admin/log/{tenant}/hooks/{hook}/attempts`, `POST
//! /admin/log/{tenant}/resend` (by time range) and `POST /admin/log/{tenant}/erase`. Their access: [`super::access`] (a tenant token with `read`
//! reads its own tenant's log; erasure is the operator's).

use super::{AdminState, ApiError, ErrorBody};
use crate::error::Error;
use crate::log::{Erasure, HookState, LogStore, Search, SearchPage};
use crate::model::check_id;
use crate::store::AttemptRecord;
use crate::visibility::{resend_range, RangeResent, ResendRange};
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
        .routes(routes!(log_resend))
        .routes(routes!(log_body))
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
    let state = q.state.as_deref().map(parse_state).transpose()?;
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

/// `state` as a hook state, or a 400 naming the two there are.
fn parse_state(s: &str) -> Result<HookState, Error> {
    HookState::parse(s).ok_or_else(|| {
        Error::BadRequest(format!("state {s:?}: expected delivered or dead_lettered"))
    })
}

/// Body of `POST /admin/log/{tenant}/resend`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(super) struct ResendBody {
    /// Ended at or after: ms since the epoch, an RFC 3339 time or a duration ago (`2h`).
    /// Required.
    pub since: Option<String>,
    /// Ended before, as `since`. Default: now.
    pub until: Option<String>,
    /// Only hooks that ended so: `delivered` or `dead_lettered`.
    pub state: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only this sink entry (index); all of them when absent.
    pub sink: Option<u32>,
    /// Count and list the hooks; resend nothing.
    pub dry_run: bool,
    /// Pacing, as for a dead-letter replay.
    pub options: crate::dlq::ReplayOptions,
}

/// Resend every hook of a tenant the delivery log says ended in a time range (oldest first,
/// each as a new hook from the body the log kept), paced like a dead-letter replay; a hook
/// that cannot be resent is listed in `failed` and the rest go on. At most 100 000 hooks.
#[utoipa::path(post, path = "/admin/log/{tenant}/resend", tag = "visibility",
    params(("tenant" = String, Path)), request_body = ResendBody,
    responses((status = 200, body = RangeResent), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["replay"])))]
async fn log_resend(
    State(st): State<AdminState>,
    Path(tenant): Path<String>,
    body: Result<Json<ResendBody>, JsonRejection>,
) -> Result<Json<RangeResent>, ApiError> {
    let Json(b) = body?;
    check_id("tenant", &tenant).map_err(Error::from)?;
    let log = log_store(&st)?;
    let store = st.worker.store();
    let now = store.now_ms().await.map_err(Error::from)?;
    let since = b
        .since
        .as_deref()
        .ok_or_else(|| Error::BadRequest("since is required: where the range starts".into()))?;
    let range = ResendRange {
        since_ms: crate::dlq::parse_time(since, now)?,
        until_ms: match &b.until {
            Some(u) => crate::dlq::parse_time(u, now)?,
            None => now,
        },
        state: b.state.as_deref().map(parse_state).transpose()?,
        event_type: b.event_type,
        source: b.source,
        sink: b.sink,
        dry_run: b.dry_run,
    };
    let max = st.worker.config().commit.max_hook_bytes;
    Ok(Json(
        resend_range(store, log, &tenant, &range, max, &b.options, |_| {}).await?,
    ))
}

/// An ended hook's body as the delivery log kept it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LoggedBodyView {
    /// Source id.
    pub source: String,
    /// The producer's event type, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// How the hook ended: `delivered` or `dead_lettered`.
    pub state: String,
    /// Producer headers.
    pub headers: std::collections::BTreeMap<String, String>,
    /// Body size in bytes.
    pub size: u64,
    /// The body, when it is UTF-8.
    pub body: Option<String>,
    /// The body in standard base64, when it is not UTF-8.
    pub body_base64: Option<String>,
}

/// The body (and producer headers) the delivery log kept of a tenant's ended hook
/// (`log.keep_bodies`); 404 when it kept none.
#[utoipa::path(get, path = "/admin/log/{tenant}/hooks/{hook}/body", tag = "visibility",
    params(("tenant" = String, Path), ("hook" = u64, Path)),
    responses((status = 200, body = LoggedBodyView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["read"])))]
async fn log_body(
    State(st): State<AdminState>,
    Path((tenant, hook)): Path<(String, u64)>,
) -> Result<Json<LoggedBodyView>, ApiError> {
    check_id("tenant", &tenant).map_err(Error::from)?;
    let log = log_store(&st)?;
    let b = log
        .body(&tenant, hook)
        .await
        .map_err(Error::from)?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "no body of hook {hook} of tenant {tenant} in the delivery log"
            ))
        })?;
    let size = b.body.len() as u64;
    let (body, body_base64) = match String::from_utf8(b.body) {
        Ok(text) => (Some(text), None),
        Err(e) => {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
            (None, Some(b64))
        }
    };
    Ok(Json(LoggedBodyView {
        source: b.source,
        event_type: b.event_type,
        state: b.state,
        headers: serde_json::from_str(&b.headers).unwrap_or_default(),
        size,
        body,
        body_base64,
    }))
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

/// Remove a tenant's records (`all`) or some hooks' from the delivery log, with the bodies
/// it kept; the records still waiting in Redis are archived first so none arrives after.
/// `all` also deletes the tenant's dead letters. The erasure is audited (who, when, how
/// many), never the data.
#[utoipa::path(post, path = "/admin/log/{tenant}/erase", tag = "visibility",
    params(("tenant" = String, Path)), request_body = EraseBody,
    responses((status = 200, body = Erasure), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn log_erase(
    State(st): State<AdminState>,
    Path(tenant): Path<String>,
    body: Result<Json<EraseBody>, JsonRejection>,
) -> Result<Json<Erasure>, ApiError> {
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
    let batch = st.worker.config().log.batch_entries;
    Ok(Json(
        crate::log::erase(
            st.worker.store(),
            log,
            batch,
            "admin-api:operator",
            &tenant,
            hooks.as_deref(),
        )
        .await?,
    ))
}
