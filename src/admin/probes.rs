//! The probes of a worker: `GET /metrics` (Prometheus), `/healthz` (liveness) and `/readyz`
//! (readiness). Open: they need no token.

use super::{AdminState, ApiError, ErrorBody};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of this module.
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(metrics))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
async fn metrics(State(st): State<AdminState>) -> Response {
    match &st.metrics {
        Some(h) => {
            crate::metrics::collect_process();
            ([("content-type", "text/plain; version=0.0.4")], h.render()).into_response()
        }
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

/// Liveness: 200 while the process runs and its scheduler is not known to be stuck, Redis
/// reachable or not (a restart would not bring Redis back); 503 `unhealthy` after a failed
/// leader self-check, until this process leads again.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = Healthy), (status = 503, body = ErrorBody)))]
async fn healthz(State(st): State<AdminState>) -> Result<Json<Healthy>, ApiError> {
    match st.worker.health().wedged() {
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
    /// The state of each broker connection this process opened (`[connections.<name>]`),
    /// by name: `"up"` or `"down: <why>"`. A detail only: a broker that is down never
    /// makes the worker unready (it still ingests and delivers to every other sink) and
    /// shows in `ankusa_connection_up`. Absent when the config names no connection.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub connections: std::collections::BTreeMap<String, String>,
    /// The delivery log's archiving where it is not keeping up, one line per partition led
    /// here (`partition 0: delivery log store unavailable: …; 120 stream entries (1.5 of
    /// 256.0 MiB) waiting`, archiving behind, records dropped at the stream's bound). A
    /// detail only, like `connections`: delivery goes on. Absent when all is well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
    /// This worker's clock more than 30 s from Redis', in words (`this worker's clock is
    /// 7200 s ahead of Redis' …`). A detail only: deliveries, their `webhook-timestamp` and
    /// schedules run on Redis' clock; the console's times, token expiry and portal links
    /// read this one. Absent while the two agree; `ankusa_clock_offset_seconds` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
}

/// Readiness: 200 when Redis answers and this process leads or is a ready standby;
/// 503 while Redis cannot be reached, refuses the writes this node needs or may evict keys
/// (`unavailable`, the message says which), while Redis is out of memory and refuses
/// commits (`redis_full`: liveness stays 200, the worker drains the backlog), after a failed
/// self-check (`unhealthy`) or during a graceful shutdown (`draining`).
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
    if let Some(reason) = w.health().wedged() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unhealthy",
            reason,
        ));
    }
    if let Some(reason) = w.health().problem() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            reason,
        ));
    }
    if let Some(reason) = w.health().redis_full() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "redis_full",
            reason,
        ));
    }
    // Bounded below a probe's usual 1 s timeout: a Redis that stopped answering must give
    // the documented 503, not a probe timeout (the command timeout is 5 s).
    let answered = tokio::time::timeout(READY_CHECK_TIMEOUT, w.store().now_ms()).await;
    let Ok(answered) = answered else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!(
                "redis did not answer TIME within {} ms",
                READY_CHECK_TIMEOUT.as_millis()
            ),
        ));
    };
    match answered {
        Ok(_) => {
            let state = w.state();
            Ok(Json(Ready {
                ready: true,
                leader: state.leading,
                epoch: state.epoch,
                node_id: w.node_id().to_string(),
                connections: crate::sinks::connections::states(),
                log: w.health().log_state(),
                clock: w.health().clock(),
            }))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("redis: {}", e.readable()),
        )),
    }
}

/// How long `/readyz` waits for Redis' `TIME` before it answers 503.
const READY_CHECK_TIMEOUT: Duration = Duration::from_millis(800);
