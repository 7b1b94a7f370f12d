//! The admin HTTP server (axum): `/metrics`, `/healthz`, `/readyz`, the ingest endpoint
//! `POST /v1/hooks/{tenant}/{source}`, and the operations under `/admin/*`. Every answer is
//! JSON; an error is `{"error": {"code", "message"}}` with a stable `code` (see
//! [`ApiError`]). The OpenAPI document is generated from this code (utoipa) and served at
//! `/openapi.json`; [`openapi`] returns it.
//!
//! Bound to loopback by default (`admin.listen = 127.0.0.1:9187`); a non-loopback address
//! needs `admin.token` (`ankusa worker` refuses to start without it). Who may call which
//! route is [`access`]: the operator token, the ingest token, tenant tokens by scope, each
//! route's scope named by its `security` in the document. Every request, open routes
//! included, must come with a `Host` the worker answers to and from no other site
//! ([`browser`]). [`serve`] bounds the server: `admin.header_timeout_ms`,
//! `admin.request_timeout_ms` (every request's body too, [`bounds`]), `admin.max_connections`
//! and `admin.max_connections_per_client` (see `docs/security.md`).

use crate::config::AdminConfig;

pub mod access;
pub mod bounds;
pub mod browser;
pub mod console;
mod ingest;
mod log;
mod operations;
mod probes;
mod tokens;
mod visibility;

pub use crate::config::split_host;
pub use access::{Access, Authenticator, Principal, TOKEN_CACHE};
pub use ingest::{unforwarded_filter_headers, Committed, ForwardHeaders};
pub use operations::{
    ConfigOk, DeadLetterSourceRequest, DlqQuery, Limits, PurgeRequest, ReplayRequest, StateView,
    Ticked,
};
pub use probes::{Healthy, Ready};
pub use tokens::check_known_tenant;

use crate::config::Config;
use crate::dlq::{
    self, DeadLetterDetail, DlqPage, Filter, PurgeReport, PurgeScope, ReplayOptions, ReplayReport,
};
use crate::error::Error;
use crate::ops::{self, Pressure, SourceDeadLettered};
use crate::producer::{Hook, Producer};
use crate::store::CommitError;
use crate::worker::Worker;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
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
    /// Who may call what: tokens, route rules, the hosts answered to.
    pub access: Arc<Access>,
    /// `admin.forward_headers`: the ingest request headers a hook keeps.
    pub forward_headers: Arc<ForwardHeaders>,
    /// `commit.max_hook_bytes`: the largest ingest body read; a larger one is 413 `too_large`.
    pub max_body_bytes: usize,
    /// `admin.request_timeout_ms`: deadline of ingest and the open endpoints.
    pub request_timeout: Duration,
    /// `admin.event_type_headers`: where ingest reads a hook's event type.
    pub event_type_headers: Vec<String>,
    /// How to re-read the config for `POST /admin/reconfigure`; `None` answers
    /// `no_config_source`.
    pub reload: Option<Reload>,
    /// The console's and portal's sessions, link key and framing (`/ui/`, `/portal/`).
    pub console: Arc<crate::admin::console::Console>,
}

impl AdminState {
    /// The state of a server for `worker`, from `config`'s `[admin]` and `[commit]`
    /// sections: tokens, public hosts, forwarded headers, limits.
    pub fn new(
        worker: Arc<Worker>,
        producer: Producer,
        metrics: Option<PrometheusHandle>,
        config: &Config,
        reload: Option<Reload>,
    ) -> AdminState {
        AdminState {
            access: Arc::new(Access::new(&config.admin, worker.store().clone())),
            forward_headers: Arc::new(ForwardHeaders::new(&config.admin.forward_headers)),
            max_body_bytes: config.commit.max_hook_bytes,
            request_timeout: Duration::from_millis(config.admin.request_timeout_ms),
            event_type_headers: config.admin.event_type_headers.clone(),
            console: Arc::new(crate::admin::console::Console::new(&config.admin)),
            worker,
            producer,
            metrics,
            reload,
        }
    }
}

/// An error answer: `{"error": {"code", "message", "problems"?}}`.
///
/// Codes (stable): `unauthorized` 401, `forbidden` 403 (a tenant token outside its scopes,
/// or on an operator route), `untrusted_host` and `cross_site` 403 (see [`browser`]),
/// `bad_request` 400, `invalid_config` 400 (with `problems`, one per bad key), `not_found`
/// 404 (also another tenant's resource, to a tenant token), `unknown_source` 404,
/// `method_not_allowed` 405 (a route asked with a method it does not answer), `too_large` 413,
/// `unavailable` 503 (no live leader, Redis cannot answer, a deadline passed),
/// `no_config_source` 409, `evicting_redis` and `failed` 500.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    /// Seconds sent as `Retry-After` (a quota, a Redis not ready to accept commits).
    retry_after: Option<u32>,
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
            retry_after: None,
        }
    }

    fn too_large(max: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over commit.max_hook_bytes = {max} bytes"),
        )
    }

    fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        )
    }

    fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
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
            "quota_exceeded" => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut err = ApiError::new(status, code, e.to_string());
        if code == "quota_exceeded" {
            // Room is made as the tenant's hooks are delivered: a retry soon may pass.
            err.retry_after = Some(QUOTA_RETRY_AFTER_SECS);
        }
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

/// `Retry-After` of a `429 quota_exceeded`, seconds.
const QUOTA_RETRY_AFTER_SECS: u32 = 30;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(secs) = self.retry_after {
            return (
                self.status,
                [(header::RETRY_AFTER, secs.to_string())],
                Json(self.body),
            )
                .into_response();
        }
        (self.status, Json(self.body)).into_response()
    }
}

/// `admin.request_timeout_ms`: past it, 408 `timeout` (the handler is dropped: an ingest
/// whose commit was already sent may have committed, so a producer retries as after any
/// lost answer, at least once).
async fn deadline(State(st): State<AdminState>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(st.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!(
                "the request took over admin.request_timeout_ms = {} ms",
                st.request_timeout.as_millis()
            ),
        )
        .into_response(),
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
                    .description(Some(
                        "The operator token (`admin.token`) opens every route; without one \
                         configured, routes are open on loopback. `admin.ingest_token` opens \
                         ingest of every tenant. A tenant token (`ank_…`, minted with \
                         `ankusa token create` or `POST /admin/tokens`) opens the routes whose \
                         security names one of its scopes (`ingest`, `read`, `sources`, \
                         `replay`), for its own tenant only: another tenant named in the path, \
                         the `tenant` query parameter or the body's filter answers 404 as a \
                         missing resource does; a list without a tenant is narrowed to its \
                         own. Routes whose security names `operator` need the operator token \
                         (403 `forbidden` to a tenant token).",
                    ))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ankusa admin API",
        description = "Operations of an ankusa instance, dead letters, delivery visibility, sources, \
tenant tokens, ingest and health. Errors are `{\"error\": {\"code\", \"message\"}}` with a stable \
code. Who may call each operation is its `bearer` security (see the scheme's description). Every \
request must name a `Host` the worker answers to (IP addresses, `localhost`, `admin.public_hosts`) \
and come from no other site (`Origin`, `Sec-Fetch-Site`): 403 `untrusted_host` / `cross_site`."
    ),
    modifiers(&BearerAuth),
    components(schemas(crate::visibility::RowFilter, crate::visibility::TopBy)),
    tags(
        (name = "operations", description = "pressure, tick, reconfigure, dead_letter_source, validate_config"),
        (name = "dead letters", description = "browse, show, replay, purge"),
        (name = "visibility", description = "hooks, their rows and attempts, retrying rows, resend, tenants"),
        (name = "sources", description = "the source registry"),
        (name = "tokens", description = "tenant tokens: mint, list, revoke"),
        (name = "ingest", description = "commit hooks over HTTP"),
        (name = "health", description = "liveness, readiness, metrics")
    )
)]
struct ApiDoc;

fn api() -> OpenApiRouter<AdminState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
}

fn protected() -> OpenApiRouter<AdminState> {
    api()
        .merge(operations::routes())
        .merge(visibility::routes())
        .merge(tokens::routes())
}

fn ingesting() -> OpenApiRouter<AdminState> {
    api().merge(ingest::routes())
}

fn open() -> OpenApiRouter<AdminState> {
    api().merge(probes::routes())
}

/// The OpenAPI document of the admin API, generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    with_access_answers(open().merge(protected()).merge(ingesting()).into_openapi())
}

/// Every operation answers 403 (a refused `Host` or a cross-site request); secured ones
/// 401 and 503 too (no credential; a tenant token that could not be checked), and those a
/// tenant token may call 404 (another tenant's resource): declared here once, so no
/// handler can forget them.
fn with_access_answers(doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let mut v = serde_json::to_value(&doc).expect("the document serialises");
    let error = |what: &str| {
        serde_json::json!({
            "description": what,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        })
    };
    for item in v["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let words: Vec<String> = op["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["bearer"].as_array())
                .flatten()
                .filter_map(|w| w.as_str().map(str::to_string))
                .collect();
            let Some(responses) = op["responses"].as_object_mut() else {
                continue;
            };
            let mut add = |status: &str, what: &str| {
                responses.entry(status).or_insert_with(|| error(what));
            };
            add(
                "403",
                "refused: an untrusted Host, a cross-site request, or a token without the right",
            );
            if !words.is_empty() {
                add("401", "no valid bearer token");
                add("503", "unavailable");
            }
            if words.iter().any(|w| w != "operator") {
                add(
                    "404",
                    "not found (another tenant's resources read as missing to a tenant token)",
                );
            }
        }
    }
    serde_json::from_value(v).expect("the document reads back")
}

/// The router: the API, and the console's pages under `/ui/` and `/portal/`
/// ([`crate::admin::console`]). Ingest reads at most `max_body_bytes` of a body and, like the open
/// endpoints, answers within `request_timeout`. Every route passes [`browser::guard`];
/// secured routes then [`access::authorize`].
pub fn router(st: AdminState) -> Router {
    let authorize = || middleware::from_fn_with_state(st.clone(), access::authorize);
    let (protected, _) = protected().route_layer(authorize()).split_for_parts();
    let (ingesting, _) = ingesting()
        .route_layer(authorize())
        .route_layer(DefaultBodyLimit::max(st.max_body_bytes))
        .split_for_parts();
    let doc = openapi();
    let (open, _) = open()
        .route(
            "/openapi.json",
            axum::routing::get(move || async move { Json(doc) }),
        )
        .split_for_parts();
    let bounded = open
        .merge(ingesting)
        .route_layer(middleware::from_fn_with_state(st.clone(), deadline));
    let api: Router = bounded
        .merge(protected)
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .with_state(st.clone());
    // The console's pages call the API through `api` in-process, as their session's
    // principal: the same routes, rules and scopes as a bearer.
    api.clone()
        .merge(crate::admin::console::router(st.clone(), api))
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not answer this method (see /openapi.json)",
            )
        })
        .layer(middleware::from_fn_with_state(
            st.clone(),
            bounds::body_deadline,
        ))
        .layer(middleware::from_fn_with_state(st, browser::guard))
}

/// Bounds of the admin server's connections (from `[admin]`).
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// `admin.header_timeout_ms`: a request's head must arrive within this (hyper's
    /// `header_read_timeout`), from the connection's start or its previous response.
    pub header_timeout: Duration,
    /// `admin.max_connections`: connections open at once; one more is closed at once.
    pub max_connections: usize,
    /// `admin.max_connections_per_client`: of those, the most one client address holds
    /// (0: no per-address bound).
    pub max_connections_per_client: usize,
}

impl From<&AdminConfig> for ServeLimits {
    fn from(a: &AdminConfig) -> ServeLimits {
        ServeLimits {
            header_timeout: Duration::from_millis(a.header_timeout_ms),
            max_connections: a.max_connections,
            max_connections_per_client: a.max_connections_per_client,
        }
    }
}

/// Serve the admin API on `listener` until `shutdown` is cancelled (HTTP/1.1, hyper).
///
/// Each connection holds one of `max_connections` slots; past them a new connection is
/// closed at once (counted in `ankusa_admin_connections_refused_total`), so a flood never
/// takes the process's file descriptors. One client address holds at most
/// `max_connections_per_client` of them (its surplus is closed the same way), so a flood from
/// one address leaves slots for probes, scrapes and other producers. Every request's body
/// must arrive within `admin.request_timeout_ms` ([`bounds::body_deadline`]). A connection that does not send a request's head
/// within `header_timeout` is closed, so slow or idle connections give their slot back. On
/// shutdown, idle connections close at once and running requests get up to
/// `header_timeout` to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    st: AdminState,
    limits: ServeLimits,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let app = hyper_util::service::TowerToHyperService::new(router(st));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let per_client = bounds::ClientSlots::new(limits.max_connections_per_client);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or a reset before accept: the listener stays.
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let Some(client_slot) = per_client.take(peer.ip()) else {
            metrics::counter!("ankusa_admin_connections_refused_total").increment(1);
            drop(stream);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics::counter!("ankusa_admin_connections_refused_total").increment(1);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), app.clone()));
        tokio::spawn(async move {
            // A reset, a header timeout or a malformed request ends only this connection.
            let _ = conn.await;
            drop(slot);
            drop(client_slot);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.header_timeout, graceful.shutdown()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ingest::hook_headers;
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
    fn ingest_forwards_only_the_listed_headers_and_refuses_reserved_ones() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("content-type", "application/json"),
            ("user-agent", "producer/1"),
            ("x-event-type", "order.created"),
            ("x-acme-trace", "abc"),
            ("x-private-key", "k"),
            ("x-jwt", "eyJ"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("authorization", "Bearer t"),
            ("proxy-authorization", "Basic x"),
            ("cookie", "s=1"),
            ("x-api-key", "k"),
            ("x-forwarded-for", "10.0.0.1"),
            ("forwarded", "for=10.0.0.1"),
            ("host", "worker:9187"),
            ("content-length", "2"),
            ("connection", "keep-alive, x-acme-hop"),
            ("x-acme-hop", "1"),
        ] {
            h.append(
                axum::http::HeaderName::from_static(n),
                axum::http::HeaderValue::from_static(v),
            );
        }
        let defaults = ForwardHeaders::new(&crate::config::AdminConfig::default().forward_headers);
        assert_eq!(
            hook_headers(&h, &defaults).expect("accepted"),
            [
                ("content-type", "application/json"),
                ("user-agent", "producer/1"),
                ("x-event-type", "order.created"),
            ]
        );
        // A prefix, trace context by name; credentials and hop-by-hop never, whatever the list.
        let listed = ForwardHeaders::new(&[
            "x-acme-*".into(),
            "traceparent".into(),
            "cookie".into(),
            "co*".into(),
        ]);
        let kept: Vec<&str> = hook_headers(&h, &listed)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(kept, ["content-type", "x-acme-trace", "traceparent"]);
        for reserved in ["webhook-id", "ankusa-tenant"] {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::HeaderName::from_static(reserved),
                axum::http::HeaderValue::from_static("x"),
            );
            let err = hook_headers(&h, &defaults).expect_err("refused");
            assert_eq!(err.status, StatusCode::BAD_REQUEST);
            assert!(err.body.error.message.contains(reserved), "{err:?}");
        }
    }

    #[test]
    fn a_token_is_compared_whole() {
        use super::access::same_secret;
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3cre"));
        assert!(!same_secret(b"s3cret", b"s3cres"));
        assert!(!same_secret(b"", b"x"));
    }

    #[test]
    fn every_operation_declares_the_answers_of_the_access_checks() {
        let json = serde_json::to_value(openapi()).unwrap();
        for (path, item) in json["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let r = &op["responses"];
                assert!(r["403"].is_object(), "{method} {path}");
                let secured = op["security"].is_array();
                assert_eq!(r["401"].is_object(), secured, "{method} {path}");
            }
        }
        let scoped = &json["paths"]["/admin/hooks/{tenant}/{hook}"]["get"];
        assert_eq!(scoped["security"][0]["bearer"][0], "read");
        assert!(scoped["responses"]["404"].is_object());
        assert_eq!(
            json["paths"]["/admin/tick"]["post"]["security"][0]["bearer"][0],
            "operator"
        );
    }
}
