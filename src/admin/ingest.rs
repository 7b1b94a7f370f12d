//! `POST /v1/hooks/{tenant}/{source}`: committing hooks over HTTP, and which request headers
//! a hook keeps (`admin.forward_headers`).

use super::*;
use utoipa::IntoParams;

/// The ingest route (its access: [`super::access`]).
pub(super) fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new().routes(routes!(ingest))
}

/// Which request headers of an ingest a hook keeps (and its deliveries carry):
/// `admin.forward_headers`, exact lowercase names or prefixes ending in `*`. Whatever the
/// list says, [`AdminConfig::NEVER_FORWARDED`] (credentials of the request, framing,
/// hop-by-hop) and the headers the request's `Connection` names are never kept.
#[derive(Debug, Clone, Default)]
pub struct ForwardHeaders {
    exact: Vec<String>,
    prefixes: Vec<String>,
}

impl ForwardHeaders {
    /// The list of `admin.forward_headers` (validated by the config).
    pub fn new(list: &[String]) -> ForwardHeaders {
        let (prefixes, exact): (Vec<&String>, Vec<&String>) =
            list.iter().partition(|h| h.ends_with('*'));
        ForwardHeaders {
            exact: exact.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            prefixes: prefixes
                .into_iter()
                .map(|h| h.trim_end_matches('*').to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether a header of this (lowercase) name is kept.
    pub fn allows(&self, name: &str) -> bool {
        (self.exact.iter().any(|h| h == name)
            || self.prefixes.iter().any(|p| name.starts_with(p.as_str())))
            && !AdminConfig::NEVER_FORWARDED.contains(&name)
    }
}

/// Warnings of a source `spec` whose filters read headers ingest does not keep: hooks sent
/// through ingest never carry them, so such a leaf always sees the header absent (hooks
/// committed with a producer library keep every header). One line per entry and header.
pub fn unforwarded_filter_headers(
    spec: &crate::model::SourceSpec,
    fwd: &ForwardHeaders,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, entry) in spec.sinks.iter().enumerate() {
        let Some(p) = entry.filter.as_ref().and_then(|f| f.predicate.as_ref()) else {
            continue;
        };
        for name in p.header_names() {
            if !fwd.allows(&name) {
                warnings.push(format!(
                    "sinks[{i}].filter reads header {name:?}, which ingest does not keep \
                     (admin.forward_headers): hooks sent through ingest never carry it, so \
                     that leaf sees it absent; add it to admin.forward_headers, or commit \
                     with a producer library, which keeps every header"
                ));
            }
        }
    }
    warnings
}

/// Prefixes of the headers the product sets on a delivery; a producer may not set them.
const RESERVED_PREFIXES: &[&str] = &["webhook-", "ankusa-"];

/// The request headers that schedule the hook (`ankusa-deliver-at`: ms since the epoch or
/// RFC 3339; `ankusa-delay`: ms or a duration such as `4s`): instructions to ingest, read
/// and never kept with the hook, so the reserved `ankusa-` prefix does not refuse them.
const SCHEDULE_HEADERS: [&str; 2] = ["ankusa-deliver-at", "ankusa-delay"];

/// A committed hook.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Committed {
    /// Its id.
    pub hook_id: u64,
    /// Rows made (one per sink entry).
    pub rows: u32,
    /// Set when `rows` is 0: the source has no sinks, or none takes the hook's event type,
    /// so the hook goes nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// For a scheduled hook (`Ankusa-Deliver-At`, `Ankusa-Delay`): when it is due, ms since
    /// the epoch (Redis clock); absent for a hook due at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at_ms: Option<i64>,
    /// Request headers the hook does not keep, so its deliveries do not carry them and a
    /// filter reading them sees them absent (lowercase, sorted, at most 32): those
    /// `admin.forward_headers` does not list. Credentials, hop-by-hop and framing headers,
    /// and those ingest reads itself (`Idempotency-Key`, the event type, the schedule), are
    /// never kept and not listed. Absent when none was dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_headers: Vec<String>,
}

/// Headers of a request that ingest reads itself or that no client means for the hook.
const READ_BY_INGEST: &[&str] = &["idempotency-key", "accept", "accept-encoding", "expect"];

/// At most this many names in [`Committed::dropped_headers`].
const DROPPED_LISTED: usize = 32;

/// The request headers of an ingest that the hook does not keep and that a producer may
/// have meant for it ([`Committed::dropped_headers`]).
fn dropped_headers(
    headers: &HeaderMap,
    kept: &[(&str, &str)],
    event_type_headers: &[String],
) -> Vec<String> {
    let mut dropped: Vec<String> = headers
        .keys()
        .map(|n| n.as_str())
        .filter(|n| {
            !kept.iter().any(|(k, _)| k == n)
                && !AdminConfig::NEVER_FORWARDED.contains(n)
                && !READ_BY_INGEST.contains(n)
                && !SCHEDULE_HEADERS.contains(n)
                && !event_type_headers.iter().any(|e| e.eq_ignore_ascii_case(n))
        })
        .map(str::to_string)
        .collect();
    dropped.sort();
    dropped.dedup();
    dropped.truncate(DROPPED_LISTED);
    dropped
}

/// The query of an ingest.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema, IntoParams)]
#[serde(default, deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct IngestQuery {
    /// Commit an empty body (0 bytes), refused without it as most likely a mistake.
    pub allow_empty: bool,
}

/// Commit the request body as one hook of `tenant/source`. The request headers
/// `admin.forward_headers` lists are kept with the hook and sent with its deliveries; no
/// other (credentials, proxy and hop-by-hop headers never). A `webhook-*` or `ankusa-*`
/// header is refused (400). A body over `commit.max_hook_bytes` is 413 `too_large`. A
/// source with no sinks still answers 202, with `rows: 0` and a `warning` saying the hook
/// goes nowhere. With an `Idempotency-Key` header, a repeat within `commit.idempotency_ms`
/// answers the first hook's id and writes nothing. An `Ankusa-Deliver-At` header (ms since
/// the epoch, or RFC 3339) or an `Ankusa-Delay` header (ms, or a duration such as `4s`)
/// schedules the hook: it is delivered then, not before (one beyond `commit.max_delay_ms`
/// is 400; a time past is delivered now). A tenant whose stored hooks (pending or
/// dead-lettered) would pass `limits.max_pending_bytes` or `max_pending_hooks` is 429
/// `quota_exceeded` with `Retry-After`, naming the limit. Bearer: `admin.token`,
/// `admin.ingest_token`, or a tenant token with the `ingest` scope for `tenant`. An empty
/// body is 400 unless `allow_empty=true`.
#[utoipa::path(post, path = "/v1/hooks/{tenant}/{source}", tag = "ingest",
    params(("tenant" = String, Path), ("source" = String, Path), IngestQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 202, body = Committed), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 408, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("bearer" = ["ingest"])))]
async fn ingest(
    State(st): State<AdminState>,
    Path((tenant, source)): Path<(String, String)>,
    q: Result<Query<IngestQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Committed>), ApiError> {
    let Query(q) = q?;
    let kept = hook_headers(&headers, &st.forward_headers)?;
    let dropped = dropped_headers(&headers, &kept, &st.event_type_headers);
    let body = body.map_err(|r| match r {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::too_large(st.max_body_bytes)
        }
        BytesRejection::FailedToBufferBody(FailedToBufferBody::UnknownBodyError(e))
            if super::bounds::is_body_timeout(&e) =>
        {
            ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", e.to_string())
        }
        other => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", other.body_text()),
    })?;
    if body.is_empty() && !q.allow_empty {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "empty body (0 bytes): nothing committed; pass allow_empty=true to commit an empty hook",
        ));
    }
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
    // The event type: the first of `admin.event_type_headers` present.
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
    hook.schedule = schedule(&headers)?;
    let scheduled = hook.schedule;
    match st.producer.commit(&tenant, &source, hook).await {
        Ok(r) => Ok((
            StatusCode::ACCEPTED,
            Json(Committed {
                hook_id: r.first_hook,
                rows: r.rows_per_hook,
                warning: (r.rows_per_hook == 0).then(|| {
                    format!("{tenant}/{source} has no sinks taking this hook (no sink entry, or every entry filtered it out): it goes nowhere")
                }),
                deliver_at_ms: scheduled
                    .and_then(|s| s.due_at_ms(r.committed_at_ms))
                    .filter(|_| r.rows_per_hook > 0),
                dropped_headers: dropped,
            }),
        )),
        Err(e @ (CommitError::Store(_) | CommitError::NotReplicated { .. } | CommitError::NotPrimary { .. })) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )),
        Err(e) => Err(Error::Commit(e).into()),
    }
}

/// The headers of an ingest request that become the hook's headers: those `forward`
/// allows, minus the hop-by-hop headers its `Connection` header names. A reserved
/// `webhook-*` / `ankusa-*` header is a 400 `bad_request` naming it; a kept header whose
/// value is not visible ASCII is a 400 too, so nothing is dropped silently.
pub(super) fn hook_headers<'h>(
    headers: &'h HeaderMap,
    forward: &ForwardHeaders,
) -> Result<Vec<(&'h str, &'h str)>, ApiError> {
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
        if SCHEDULE_HEADERS.contains(&n) {
            continue;
        }
        if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| n.starts_with(*p)) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("header {n} is reserved: the product sets {prefix}* headers itself"),
            ));
        }
        if !forward.allows(n) || hop_by_hop.iter().any(|h| h == n) {
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

/// The hook's delivery time from `Ankusa-Deliver-At` or `Ankusa-Delay` (at most one of
/// them, once); a value that does not parse is a 400 `bad_request` naming the header.
fn schedule(headers: &HeaderMap) -> Result<Option<crate::store::Schedule>, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let mut found = None;
    for (name, parse) in [
        (
            "ankusa-deliver-at",
            crate::producer::parse_deliver_at as fn(&str) -> Result<_, String>,
        ),
        ("ankusa-delay", crate::producer::parse_delay),
    ] {
        let mut values = headers.get_all(name).iter();
        let Some(v) = values.next() else { continue };
        if values.next().is_some() || found.is_some() {
            return Err(bad(
                "give one Ankusa-Deliver-At or one Ankusa-Delay header, not several".into(),
            ));
        }
        let v = v
            .to_str()
            .map_err(|_| bad(format!("header {name}: the value is not visible ASCII")))?;
        found = Some(parse(v).map_err(|e| bad(format!("header {name}: {e}")))?);
    }
    Ok(found)
}
