//! The admin HTTP server (axum): `/metrics`, `/healthz`, `/readyz`, the ingest endpoint
//! `POST /v1/hooks/{tenant}/{source}`, and the operations under `/admin/*` (R20–R24, dead
//! letters). Every answer is JSON; an error is `{"error": {"code", "message"}}` with a
//! stable `code` (see [`ApiError`]). The OpenAPI document is generated from this code
//! (utoipa) and served at `/openapi.json`; [`openapi`] returns it.
//!
//! Bound to loopback by default (`admin.listen = 127.0.0.1:9187`); when `admin.token` is
//! set, `/admin/*` and `/v1/*` need `Authorization: Bearer <token>` (401 otherwise).
//! `/metrics`, `/healthz`, `/readyz` and `/openapi.json` stay open.

mod visibility;

use crate::config::Config;
use crate::dlq::{
    self, DeadLetterDetail, DlqPage, Filter, PurgeReport, PurgeScope, ReplayOptions, ReplayReport,
};
use crate::error::Error;
use crate::ops::{self, Pressure, SourceDeadLettered};
use crate::producer::{Hook, Producer};
use crate::store::CommitError;
use crate::worker::Worker;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Re-reads the worker's config for `POST /admin/reconfigure` (the file it was started with).
pub type Reload = Arc<dyn Fn() -> Result<Config, Error> + Send + Sync>;

/// Shared state of the admin server.
#[derive(Clone)]
pub struct AdminState {
    /// The worker.
    pub worker: Arc<Worker>,
    /// The producer for ingest.
    pub producer: Producer,
    /// Metrics renderer.
    pub metrics: Option<PrometheusHandle>,
    /// Bearer token, if required.
    pub token: Option<String>,
    /// How to re-read the config for `POST /admin/reconfigure`; `None` answers
    /// `no_config_source`.
    pub reload: Option<Reload>,
}

/// Headers of an ingest request that are kept with the hook (others are transport headers).
const KEPT_HEADERS: &[&str] = &["content-type", "user-agent"];

/// Deadline of `POST /admin/dead_letter_source` unless the request gives one, ms.
const DEAD_LETTER_SOURCE_TIMEOUT_MS: u64 = 30_000;

/// An error answer: `{"error": {"code", "message", "problems"?}}`.
///
/// Codes (stable): `unauthorized` 401, `bad_request` 400, `invalid_config` 400 (with
/// `problems`, one per bad key), `not_found` 404, `unknown_source` 404, `too_large` 413,
/// `unavailable` 503 (no live leader, Redis cannot answer, a deadline passed),
/// `no_config_source` 409, `evicting_redis` and `failed` 500.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

/// The JSON body of every error answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Code and message of an error answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `unavailable`.
    pub code: String,
    /// For people.
    pub message: String,
    /// For `invalid_config`: every bad key with what is wrong with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<ProblemView>,
}

/// One invalid config value.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProblemView {
    /// Dotted key path, e.g. `dispatch.tenants.acme.max_inflight`.
    pub key: String,
    /// What the value must be, e.g. `must be > 0`.
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: ErrorDetail {
                    code: code.into(),
                    message: message.into(),
                    problems: Vec::new(),
                },
            },
        }
    }

    fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        )
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let code = e.code();
        let status = match code {
            "invalid_config" | "bad_request" => StatusCode::BAD_REQUEST,
            "not_found" | "unknown_source" => StatusCode::NOT_FOUND,
            "too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut err = ApiError::new(status, code, e.to_string());
        if let Error::Config(c) = &e {
            err.body.error.problems = c
                .problems()
                .iter()
                .map(|p| ProblemView {
                    key: p.key.clone(),
                    message: p.message.clone(),
                })
                .collect();
        }
        err
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// Compare without an early exit, so the time taken does not tell how much of a guess was right.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(st: &AdminState, headers: &HeaderMap) -> bool {
    match &st.token {
        None => true,
        Some(t) => headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| same_secret(v.as_bytes(), t.as_bytes())),
    }
}

async fn require_token(State(st): State<AdminState>, req: Request, next: Next) -> Response {
    if authorized(&st, req.headers()) {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`admin.token`; required only when it is set"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ankusa admin API",
        description = "Operations of an ankusa instance (R20–R24), dead letters, ingest and health. \
Errors are `{\"error\": {\"code\", \"message\"}}` with a stable code. When `admin.token` is set, \
`/admin/*` and `/v1/*` need `Authorization: Bearer <token>`."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "operations", description = "pressure, tick, reconfigure, dead_letter_source, validate_config"),
        (name = "dead letters", description = "browse, show, replay, purge"),
        (name = "visibility", description = "hooks, their rows and attempts, retrying rows, resend, tenants"),
        (name = "sources", description = "the source registry (R19)"),
        (name = "ingest", description = "commit hooks over HTTP (R1)"),
        (name = "health", description = "liveness, readiness, metrics")
    )
)]
struct ApiDoc;

fn api() -> OpenApiRouter<AdminState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
}

fn protected() -> OpenApiRouter<AdminState> {
    api()
        .routes(routes!(pressure))
        .routes(routes!(tick))
        .routes(routes!(reconfigure))
        .routes(routes!(dead_letter_source))
        .routes(routes!(config_check))
        .routes(routes!(dlq_list))
        .routes(routes!(dlq_show))
        .routes(routes!(dlq_replay))
        .routes(routes!(dlq_purge))
        .routes(routes!(state))
        .routes(routes!(ingest))
        .merge(visibility::routes())
}

fn open() -> OpenApiRouter<AdminState> {
    api()
        .routes(routes!(metrics))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

/// The OpenAPI document of the admin API, generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    open().merge(protected()).into_openapi()
}

/// The router.
pub fn router(st: AdminState) -> Router {
    let (protected, _) = protected()
        .route_layer(middleware::from_fn_with_state(st.clone(), require_token))
        .split_for_parts();
    let (open, _) = open().split_for_parts();
    let doc = openapi();
    open.merge(protected)
        .route(
            "/openapi.json",
            axum::routing::get(move || async move { Json(doc) }),
        )
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .with_state(st)
}

/// Prometheus metrics (R27).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
async fn metrics(State(st): State<AdminState>) -> Response {
    match &st.metrics {
        Some(h) => ([("content-type", "text/plain; version=0.0.4")], h.render()).into_response(),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_recorder",
            "metrics recorder not installed",
        )
        .into_response(),
    }
}

/// Health of a worker process.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Healthy {
    /// Always true in a 200 answer.
    pub healthy: bool,
    /// This process's node id (unique per start).
    pub node_id: String,
}

/// Liveness (R25): 200 while the process runs and its scheduler is not known to be stuck;
/// 503 `unhealthy` after a failed leader self-check, until this process leads again.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = Healthy), (status = 503, body = ErrorBody)))]
async fn healthz(State(st): State<AdminState>) -> Result<Json<Healthy>, ApiError> {
    match st.worker.health().problem() {
        None => Ok(Json(Healthy {
            healthy: true,
            node_id: st.worker.node_id().to_string(),
        })),
        Some(reason) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unhealthy",
            reason,
        )),
    }
}

/// Readiness of a worker.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ready {
    /// Redis answers.
    pub ready: bool,
    /// This worker leads.
    pub leader: bool,
    /// The fencing epoch of this worker's current or last term (0 before its first).
    pub epoch: u64,
    /// This process's node id (unique per start).
    pub node_id: String,
}

/// Readiness (R25): 200 when Redis answers and this process leads or is a ready standby;
/// 503 while Redis cannot be reached (`unavailable`), after a failed self-check
/// (`unhealthy`) or during a graceful shutdown (`draining`).
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = Ready), (status = 503, body = ErrorBody)))]
async fn readyz(State(st): State<AdminState>) -> Result<Json<Ready>, ApiError> {
    let w = &st.worker;
    if w.health().draining() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "shutting down",
        ));
    }
    if let Some(reason) = w.health().problem() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unhealthy",
            reason,
        ));
    }
    match w.store().now_ms().await {
        Ok(_) => {
            let state = w.state();
            Ok(Json(Ready {
                ready: true,
                leader: state.leading,
                epoch: state.epoch,
                node_id: w.node_id().to_string(),
            }))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )),
    }
}

/// A committed hook.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Committed {
    /// Its id.
    pub hook_id: u64,
    /// Rows made (one per sink entry).
    pub rows: u32,
}

/// Commit the request body as one hook of `tenant/source` (R1). `content-type`,
/// `user-agent` and `x-*` headers are kept with the hook. With an `Idempotency-Key` header,
/// a repeat within `commit.idempotency_ms` answers the first hook's id and writes nothing.
#[utoipa::path(post, path = "/v1/hooks/{tenant}/{source}", tag = "ingest",
    params(("tenant" = String, Path), ("source" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 202, body = Committed), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn ingest(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Committed>), ApiError> {
    let mut hook = Hook::new(body);
    if let Some(k) = headers.get("idempotency-key") {
        let k = k.to_str().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "Idempotency-Key is not visible ASCII",
            )
        })?;
        hook = hook.idempotency_key(k);
    }
    for (name, value) in &headers {
        let n = name.as_str();
        if KEPT_HEADERS.contains(&n) || n.starts_with("x-") {
            if let Ok(v) = value.to_str() {
                hook = hook.header(n, v);
            }
        }
    }
    match st.producer.commit(&tenant, &source, hook).await {
        Ok(r) => Ok((
            StatusCode::ACCEPTED,
            Json(Committed {
                hook_id: r.first_hook,
                rows: r.rows_per_hook,
            }),
        )),
        Err(e @ CommitError::Store(_)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )),
        Err(e) => Err(Error::Commit(e).into()),
    }
}

/// The answer of `tick`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ticked {
    /// Rows settled (delivered, dead-lettered or dropped) during the call.
    pub settled: u64,
}

/// tick (R23): block until nothing is claimed, running or due; the rows settled meanwhile.
#[utoipa::path(post, path = "/admin/tick", tag = "operations",
    responses((status = 200, body = Ticked), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn tick(State(st): State<AdminState>) -> Result<Json<Ticked>, ApiError> {
    Ok(Json(Ticked {
        settled: st.worker.tick().await?,
    }))
}

/// pressure (R21): lag of the oldest due row and whether the leader's window is full.
/// `unavailable` (503) when no leader is live or Redis cannot answer.
#[utoipa::path(get, path = "/admin/pressure", tag = "operations",
    responses((status = 200, body = Pressure), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn pressure(State(st): State<AdminState>) -> Result<Json<Pressure>, ApiError> {
    Ok(Json(st.worker.pressure().await?))
}

/// The limits in force after `reconfigure`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Limits {
    /// `dispatch.concurrency`.
    pub concurrency: usize,
    /// `dispatch.sink_concurrency`.
    pub sink_concurrency: usize,
    /// `dispatch.tenants`: tenant id → `{max_inflight, max_inflight_bytes, concurrency}`.
    #[schema(value_type = Object)]
    pub tenants: BTreeMap<String, crate::config::TenantLimits>,
}

impl Limits {
    fn of(c: &Config) -> Limits {
        Limits {
            concurrency: c.dispatch.concurrency,
            sink_concurrency: c.dispatch.sink_concurrency,
            tenants: c.dispatch.tenants.clone(),
        }
    }
}

/// reconfigure (R22): re-read this worker's config file and take `dispatch.concurrency`,
/// `dispatch.sink_concurrency` and `dispatch.tenants` from it without a restart. Each worker
/// of a pool holds its own config: call every worker. An invalid file changes nothing
/// (`invalid_config`, naming each key).
#[utoipa::path(post, path = "/admin/reconfigure", tag = "operations",
    responses((status = 200, body = Limits), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
async fn reconfigure(State(st): State<AdminState>) -> Result<Json<Limits>, ApiError> {
    let Some(reload) = &st.reload else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_config_source",
            "this server has no config to re-read",
        ));
    };
    let config = reload()?;
    st.worker.reconfigure(&config)?;
    Ok(Json(Limits::of(&st.worker.config())))
}

/// The body of `dead_letter_source`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterSourceRequest {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Deadline of the call, ms (default 30000): past it, `unavailable`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// dead_letter_source (R20): dead-letter every pending row of the source as
/// `source_gone(<source>)`; `count` is R20's count, `dropped` the rows whose hook was gone.
#[utoipa::path(post, path = "/admin/dead_letter_source", tag = "operations",
    request_body = DeadLetterSourceRequest,
    responses((status = 200, body = SourceDeadLettered), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn dead_letter_source(
    State(st): State<AdminState>,
    body: Result<Json<DeadLetterSourceRequest>, JsonRejection>,
) -> Result<Json<SourceDeadLettered>, ApiError> {
    let Json(req) = body?;
    let deadline = Duration::from_millis(req.timeout_ms.unwrap_or(DEAD_LETTER_SOURCE_TIMEOUT_MS));
    Ok(Json(
        ops::dead_letter_source(st.worker.store(), &req.tenant, &req.source, deadline).await?,
    ))
}

/// The answer of a valid config.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConfigOk {
    /// Always true.
    pub ok: bool,
}

/// validate_config (R24): check a config file (TOML, the request body; defaults for missing
/// keys). An invalid one answers `invalid_config` with one problem per bad key.
#[utoipa::path(post, path = "/admin/config/check", tag = "operations",
    request_body(content = String, content_type = "application/toml"),
    responses((status = 200, body = ConfigOk), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn config_check(body: Bytes) -> Result<Json<ConfigOk>, ApiError> {
    let text = std::str::from_utf8(&body).map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the body is not UTF-8 TOML",
        )
    })?;
    ops::validate_config_toml(text).map_err(Error::Config)?;
    Ok(Json(ConfigOk { ok: true }))
}

/// Query of `GET /admin/dlq`: the [`Filter`] fields and a limit.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DlqQuery {
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only this source.
    pub source: Option<String>,
    /// Only this sink: index or module.
    pub sink: Option<String>,
    /// Only this reason: kind or whole text.
    pub reason: Option<String>,
    /// At or after: ms since the epoch, or a duration ago (`15m`).
    pub since: Option<String>,
    /// At or before: ms since the epoch, or a duration ago.
    pub until: Option<String>,
    /// At most this many (default 100).
    pub limit: Option<u64>,
}

/// List dead letters, filtered by tenant, source, sink, reason and time.
#[utoipa::path(get, path = "/admin/dlq", tag = "dead letters", params(DlqQuery),
    responses((status = 200, body = DlqPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn dlq_list(
    State(st): State<AdminState>,
    q: Result<Query<DlqQuery>, QueryRejection>,
) -> Result<Json<DlqPage>, ApiError> {
    let Query(q) = q?;
    let filter = Filter {
        tenant: q.tenant,
        source: q.source,
        sink: q.sink,
        reason: q.reason,
        since: q.since,
        until: q.until,
    };
    Ok(Json(
        dlq::browse(st.worker.store(), &filter, q.limit.unwrap_or(100)).await?,
    ))
}

/// One dead letter with its hook (body, headers).
#[utoipa::path(get, path = "/admin/dlq/{tenant}/{id}", tag = "dead letters",
    params(("tenant" = String, Path), ("id" = String, Path, description = "stream entry id `<ms>-<n>`")),
    responses((status = 200, body = DeadLetterDetail), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn dlq_show(
    State(st): State<AdminState>,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<Json<DeadLetterDetail>, ApiError> {
    Ok(Json(dlq::show(st.worker.store(), &tenant, &id).await?))
}

/// The body of `replay`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayRequest {
    /// Which dead letters (all when empty).
    pub filter: Filter,
    /// Pacing and limit.
    pub options: ReplayOptions,
}

/// Replay dead letters: each selected one becomes a new due row (attempts reset, retry
/// horizon restarted), paced by `pressure` (pauses while the window is full or the lag is
/// over `max_lag_ms`). Answers when done; `unavailable` after pausing `max_pause_ms`.
#[utoipa::path(post, path = "/admin/dlq/replay", tag = "dead letters", request_body = ReplayRequest,
    responses((status = 200, body = ReplayReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn dlq_replay(
    State(st): State<AdminState>,
    body: Result<Json<ReplayRequest>, JsonRejection>,
) -> Result<Json<ReplayReport>, ApiError> {
    let Json(req) = body?;
    Ok(Json(
        dlq::replay(st.worker.store(), &req.filter, &req.options, |_| {}).await?,
    ))
}

/// The body of `purge`.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PurgeRequest {
    /// Which dead letters to delete. Empty (and `all` false): apply the retention of
    /// `[dlq]` (`max_age_ms`, `max_per_tenant`) instead.
    pub filter: Filter,
    /// Delete every dead letter.
    pub all: bool,
}

/// Purge dead letters and the hook bodies only they kept: by filter, everything (`all`),
/// or what the configured retention does not keep (an empty request).
#[utoipa::path(post, path = "/admin/dlq/purge", tag = "dead letters", request_body = PurgeRequest,
    responses((status = 200, body = PurgeReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn dlq_purge(
    State(st): State<AdminState>,
    body: Result<Json<PurgeRequest>, JsonRejection>,
) -> Result<Json<PurgeReport>, ApiError> {
    let Json(req) = body?;
    let scope = if req.filter.is_empty() && !req.all {
        PurgeScope::Retention {
            retention: (&st.worker.config().dlq).into(),
            tenant: None,
        }
    } else {
        PurgeScope::Matching(req.filter)
    };
    Ok(Json(dlq::purge(st.worker.store(), &scope).await?))
}

/// What `GET /admin/state` shows.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StateView {
    /// This process's node id.
    pub node_id: String,
    /// The scheduler's state: leading, epoch, claimed rows and bytes, running, window_full.
    #[schema(value_type = Object)]
    pub state: crate::scheduler::SchedulerState,
    /// The limits in force (R22).
    pub limits: Limits,
}

/// This worker's scheduler state and limits.
#[utoipa::path(get, path = "/admin/state", tag = "operations",
    responses((status = 200, body = StateView), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn state(State(st): State<AdminState>) -> Json<StateView> {
    Json(StateView {
        node_id: st.worker.node_id().to_string(),
        state: st.worker.state(),
        limits: Limits::of(&st.worker.config()),
    })
}

/// Serve the admin API on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    st: AdminState,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(st))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_every_operation_with_bearer_auth() {
        let doc = openapi();
        let json = serde_json::to_value(&doc).expect("serialises");
        for (path, method) in [
            ("/admin/pressure", "get"),
            ("/admin/tick", "post"),
            ("/admin/reconfigure", "post"),
            ("/admin/dead_letter_source", "post"),
            ("/admin/config/check", "post"),
            ("/admin/dlq", "get"),
            ("/admin/dlq/{tenant}/{id}", "get"),
            ("/admin/dlq/replay", "post"),
            ("/admin/dlq/purge", "post"),
            ("/admin/state", "get"),
            ("/v1/hooks/{tenant}/{source}", "post"),
            ("/metrics", "get"),
            ("/healthz", "get"),
            ("/readyz", "get"),
        ] {
            assert!(
                json["paths"][path][method].is_object(),
                "{method} {path} missing"
            );
        }
        assert!(json["paths"]["/admin/pressure"]["get"]["security"].is_array());
        assert!(json["paths"]["/healthz"]["get"]["security"].is_null());
        assert_eq!(
            json["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        for schema in [
            "Pressure",
            "SourceDeadLettered",
            "DeadLetter",
            "ReplayReport",
            "ErrorBody",
            "Filter",
        ] {
            assert!(
                json["components"]["schemas"][schema].is_object(),
                "schema {schema} missing"
            );
        }
    }

    #[test]
    fn a_token_is_compared_whole() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3cre"));
        assert!(!same_secret(b"s3cret", b"s3cres"));
        assert!(!same_secret(b"", b"x"));
    }
}
