//! The admin HTTP server (axum): `/metrics`, `/healthz`, `/readyz`, the ingest endpoint
//! `POST /v1/hooks/{tenant}/{source}`, and `/admin/*` operations.
//! Bound to loopback by default; when `admin.token` is set, `/admin/*` and `/v1/*`
//! need `Authorization: Bearer <token>`.

use crate::producer::{Hook, Producer};
use crate::store::CommitError;
use crate::worker::Worker;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use std::sync::Arc;

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
}

/// Headers of an ingest request that are kept with the hook (others are transport headers).
const KEPT_HEADERS: &[&str] = &["content-type", "user-agent"];

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}

fn authorized(st: &AdminState, headers: &HeaderMap) -> bool {
    match &st.token {
        None => true,
        Some(t) => headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.strip_prefix("Bearer ") == Some(t.as_str())),
    }
}

/// The router.
pub fn router(st: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/v1/hooks/{tenant}/{source}", post(ingest))
        .route("/admin/tick", post(tick))
        .route("/admin/pressure", get(pressure))
        .route("/admin/state", get(state))
        .with_state(st)
}

async fn metrics(State(st): State<AdminState>) -> Response {
    match &st.metrics {
        Some(h) => ([("content-type", "text/plain; version=0.0.4")], h.render()).into_response(),
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_recorder",
            "metrics recorder not installed",
        ),
    }
}

async fn readyz(State(st): State<AdminState>) -> Response {
    match st.worker.store().now_ms().await {
        Ok(_) => Json(json!({"ready": true, "leader": st.worker.is_leader()})).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "redis_unavailable",
            e.to_string(),
        ),
    }
}

async fn ingest(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&st, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
    }
    let mut hook = Hook::new(body);
    for (name, value) in &headers {
        let n = name.as_str();
        if KEPT_HEADERS.contains(&n) || n.starts_with("x-") {
            if let Ok(v) = value.to_str() {
                hook = hook.header(n, v);
            }
        }
    }
    match st.producer.commit(&tenant, &source, hook).await {
        Ok(r) => (
            StatusCode::ACCEPTED,
            Json(json!({"hook_id": r.first_hook, "rows": r.rows_per_hook})),
        )
            .into_response(),
        Err(e @ CommitError::UnknownSource { .. }) => {
            error(StatusCode::NOT_FOUND, "unknown_source", e.to_string())
        }
        Err(e @ CommitError::TooLarge { .. }) => {
            error(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.to_string())
        }
        Err(e @ CommitError::BadRequest(_)) => {
            error(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
        }
        Err(e @ CommitError::Store(_)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}

async fn tick(State(st): State<AdminState>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
    }
    match st.worker.tick().await {
        Ok(n) => Json(json!({"settled": n})).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}

async fn pressure(State(st): State<AdminState>, headers: HeaderMap) -> Response {
    if !authorized(&st, &headers) {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
    }
    match st.worker.pressure().await {
        Ok(p) => Json(p).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}

async fn state(State(st): State<AdminState>) -> Response {
    Json(json!({"node_id": st.worker.node_id(), "state": st.worker.state()})).into_response()
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
