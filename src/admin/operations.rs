//! `/admin/*` operations: tick, pressure, reconfigure, dead_letter_source, config check
//! (the operations of an instance), dead letters, and this worker's state.

use super::*;

/// The operation routes (their access: [`super::access`]).
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
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
        .routes(routes!(source_enable))
        .routes(routes!(events_list))
}

/// Enable a sink entry disabled after prolonged failure; see `ops::enable_sink`.
#[utoipa::path(post, path = "/admin/sources/{tenant}/{source}/sinks/{index}/enable", tag = "sources",
    params(("tenant" = String, Path), ("source" = String, Path), ("index" = u32, Path)),
    responses((status = 200, body = ops::SinkEnabled), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["sources"])))]
async fn source_enable(
    State(st): State<AdminState>,
    Path((tenant, source, index)): Path<(String, String, u32)>,
) -> Result<Json<ops::SinkEnabled>, ApiError> {
    let max_len = st.worker.config().operator.events_max_len;
    Ok(Json(
        ops::enable_sink(st.worker.store(), &tenant, &source, index, max_len).await?,
    ))
}

/// The event list: `{"events": […]}`, wrapped like every other list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(super) struct EventList {
    /// The last operational events, oldest first.
    pub events: Vec<crate::store::SinkEvent>,
}

/// The last operational events, oldest first.
#[utoipa::path(get, path = "/admin/events", tag = "operations",
    responses((status = 200, body = EventList), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn events_list(State(st): State<AdminState>) -> Result<Json<EventList>, ApiError> {
    Ok(Json(EventList {
        events: st
            .worker
            .store()
            .sink_events(100)
            .await
            .map_err(Error::from)?,
    }))
}

/// Deadline of `POST /admin/dead_letter_source` unless the request gives one, ms.
const DEAD_LETTER_SOURCE_TIMEOUT_MS: u64 = 30_000;
/// The answer of `tick`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ticked {
    /// Rows settled (delivered, dead-lettered or dropped) during the call.
    pub settled: u64,
}

/// tick: block until nothing is claimed, running or due; the rows settled meanwhile.
#[utoipa::path(post, path = "/admin/tick", tag = "operations",
    responses((status = 200, body = Ticked), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn tick(State(st): State<AdminState>) -> Result<Json<Ticked>, ApiError> {
    Ok(Json(Ticked {
        settled: st.worker.tick().await?,
    }))
}

/// pressure: lag of the oldest due row and whether the leader's window is full.
/// `unavailable` (503) when no leader is live or Redis cannot answer.
#[utoipa::path(get, path = "/admin/pressure", tag = "operations",
    responses((status = 200, body = Pressure), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
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

/// reconfigure: re-read this worker's config file and take `dispatch.concurrency`,
/// `dispatch.sink_concurrency` and `dispatch.tenants` from it without a restart. Each worker
/// of a pool holds its own config: call every worker. An invalid file changes nothing
/// (`invalid_config`, naming each key).
#[utoipa::path(post, path = "/admin/reconfigure", tag = "operations",
    responses((status = 200, body = Limits), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
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

/// dead_letter_source: dead-letter every pending row of the source as
/// `source_gone(<source>)`; `count` is how many were dead-lettered, `dropped` the rows whose hook was gone.
#[utoipa::path(post, path = "/admin/dead_letter_source", tag = "operations",
    request_body = DeadLetterSourceRequest,
    responses((status = 200, body = SourceDeadLettered), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
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

/// validate_config: check a config file (TOML, the request body; defaults for missing
/// keys). An invalid one answers `invalid_config` with one problem per bad key.
#[utoipa::path(post, path = "/admin/config/check", tag = "operations",
    request_body(content = String, content_type = "application/toml"),
    responses((status = 200, body = ConfigOk), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
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
    /// Only the dead letters of this hook id.
    pub hook: Option<u64>,
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
    security(("bearer" = ["read"])))]
async fn dlq_list(
    State(st): State<AdminState>,
    q: Result<Query<DlqQuery>, QueryRejection>,
) -> Result<Json<DlqPage>, ApiError> {
    let Query(q) = q?;
    let filter = Filter {
        tenant: q.tenant,
        source: q.source,
        sink: q.sink,
        hook: q.hook,
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
    security(("bearer" = ["read"])))]
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
    security(("bearer" = ["replay"])))]
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
    security(("bearer" = ["operator"])))]
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
    pub state: crate::dispatch::SchedulerState,
    /// The partitions this worker leads now, of the instance's `partitions`.
    pub led_partitions: Vec<u32>,
    /// The instance's partition count.
    pub partitions: u32,
    /// The limits in force.
    pub limits: Limits,
}

/// This worker's scheduler state and limits.
#[utoipa::path(get, path = "/admin/state", tag = "operations",
    responses((status = 200, body = StateView), (status = 401, body = ErrorBody)),
    security(("bearer" = ["operator"])))]
async fn state(State(st): State<AdminState>) -> Json<StateView> {
    Json(StateView {
        node_id: st.worker.node_id().to_string(),
        state: st.worker.state(),
        led_partitions: st.worker.led_partitions(),
        partitions: st.worker.config().partitions,
        limits: Limits::of(&st.worker.config()),
    })
}
