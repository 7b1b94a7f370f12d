//! `POST /v1/hooks/{tenant}/{source}`: committing hooks over HTTP (R1), and which request
//! headers a hook keeps.

use super::*;

/// The ingest route (guarded by `admin.ingest_token` or `admin.token` in [`super::router`]).
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new().routes(routes!(ingest))
}

/// Headers of an ingest request kept with the hook besides `x-*` ones (an allowlist: every
/// other header is the transport's or the caller's own, see [`hook_headers`]); the W3C trace
/// context follows the hook to its deliveries.
const KEPT_HEADERS: &[&str] = &["content-type", "user-agent", "traceparent", "tracestate"];

/// `x-*` headers that are never kept: credentials and what proxies add about the caller.
const DROPPED_X_HEADERS: &[&str] = &[
    "x-api-key",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-csrf-token",
    "x-xsrf-token",
    "x-amz-security-token",
];

/// Prefixes of `x-*` headers that are never kept: proxy and cloud-edge headers.
const DROPPED_X_PREFIXES: &[&str] = &["x-forwarded-", "x-original-", "x-envoy-", "x-amzn-"];

/// Words that make an `x-*` header a credential, never kept (`x-auth-token`, `x-session-id`…).
const CREDENTIAL_WORDS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "cookie",
    "session",
    "signature",
    "credential",
    "api-key",
    "apikey",
];

/// Prefixes of the headers the product sets on a delivery; a producer may not set them.
const RESERVED_PREFIXES: &[&str] = &["webhook-", "ankusa-"];

/// A committed hook.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Committed {
    /// Its id.
    pub hook_id: u64,
    /// Rows made (one per sink entry).
    pub rows: u32,
    /// Set when `rows` is 0: the source has no sinks, or none takes the hook's event type
    /// (P9), so the hook goes nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Commit the request body as one hook of `tenant/source` (R1). `content-type`,
/// `user-agent`, the W3C trace context (`traceparent`, `tracestate`) and `x-*` headers are
/// kept with the hook, except credentials and proxy headers (`x-api-key`, `x-forwarded-*`,
/// `x-real-ip`, any `x-*` naming a token, key, secret, session or cookie) and headers the
/// `Connection` header names. A `webhook-*` or `ankusa-*` header is refused (400). A body
/// over `commit.max_hook_bytes` is 413 `too_large`. A source with no sinks still answers
/// 202, with `rows: 0` and a `warning` saying the hook goes nowhere. With an
/// `Idempotency-Key` header, a repeat within `commit.idempotency_ms` answers the first
/// hook's id and writes nothing.
#[utoipa::path(post, path = "/v1/hooks/{tenant}/{source}", tag = "ingest",
    params(("tenant" = String, Path), ("source" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 202, body = Committed), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 408, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn ingest(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Committed>), ApiError> {
    let kept = hook_headers(&headers)?;
    let body = body.map_err(|r| match r {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::too_large(st.max_body_bytes)
        }
        other => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", other.body_text()),
    })?;
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
    // The event type (P9): the first of `admin.event_type_headers` present.
    if let Some(v) = st
        .event_type_headers
        .iter()
        .find_map(|name| headers.get(name.as_str()))
    {
        let et = v.to_str().ok().map(str::trim).unwrap_or_default();
        crate::model::check_event_type(et)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e))?;
        hook = hook.event_type(et);
    }
    for (name, value) in kept {
        hook = hook.header(name, value);
    }
    match st.producer.commit(&tenant, &source, hook).await {
        Ok(r) => Ok((
            StatusCode::ACCEPTED,
            Json(Committed {
                hook_id: r.first_hook,
                rows: r.rows_per_hook,
                warning: (r.rows_per_hook == 0).then(|| {
                    format!("{tenant}/{source} has no sinks taking this hook (no sink entry, or every entry filtered it out): it goes nowhere")
                }),
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

/// The headers of an ingest request that become the hook's headers (an allowlist, see
/// `docs/operations.md` "Ingest"): `content-type`, `user-agent` and `x-*`, minus credentials,
/// proxy headers and the hop-by-hop headers its `Connection` header names. A reserved
/// `webhook-*` / `ankusa-*` header is a 400 `bad_request` naming it; a kept header whose
/// value is not visible ASCII is a 400 too, so nothing is dropped silently.
pub(super) fn hook_headers(headers: &HeaderMap) -> Result<Vec<(&str, &str)>, ApiError> {
    let hop_by_hop: Vec<String> = headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    let mut kept = Vec::new();
    for (name, value) in headers {
        let n = name.as_str();
        if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| n.starts_with(*p)) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("header {n} is reserved: the product sets {prefix}* headers itself"),
            ));
        }
        let wanted = KEPT_HEADERS.contains(&n) || (n.starts_with("x-") && !credential_or_proxy(n));
        if !wanted || hop_by_hop.iter().any(|h| h == n) {
            continue;
        }
        let v = value.to_str().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("header {n}: the value is not visible ASCII"),
            )
        })?;
        kept.push((n, v));
    }
    Ok(kept)
}

/// Whether an `x-*` header carries a credential or what a proxy says about the caller.
fn credential_or_proxy(name: &str) -> bool {
    DROPPED_X_HEADERS.contains(&name)
        || DROPPED_X_PREFIXES.iter().any(|p| name.starts_with(p))
        || CREDENTIAL_WORDS.iter().any(|w| name.contains(w))
}
