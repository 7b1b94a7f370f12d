//! Sinks: where a row is delivered. Each sink module has its options, its
//! transport and its retry classification, apart from the scheduler.
//!
//! | module | batched | inline limit | file |
//! | --- | --- | --- | --- |
//! | `http` | no | none | [`http`] |
//! | `sqs` | yes: 10 entries / 256 KiB per request | 256 KiB minus attributes | [`sqs`] |
//! | `pubsub` | yes: 1 000 messages / 10 MB per request | 7 MB (base64 in JSON) minus attributes | [`pubsub`] |
//! | `nats` | no: one JetStream publish per row | the server's `max_payload` | [`nats`] |
//! | `rabbitmq` | no: one confirmed publish per row | none (the broker's frame limits) | [`rabbitmq`] |
//! | `kinesis` | yes: 50 records / 5 MiB per request | 1 MiB minus the partition key | [`kinesis`] |
//! | `eventbridge` | yes: 10 events / 256 KiB per request | 256 KiB minus the event's fields (JSON object bodies only) | [`eventbridge`] |
//!
//! The broker sinks reach brokers only through the operator's named [`connections`].
//!
//! A batched sink's attempts wait in a per-destination [`batcher`]; a body over its
//! inline limit is checked in to the blob store (`crate::claim_check`).
//!
//! The rest of the worker knows the modules only through the [`registry`]: a module name
//! maps to its options parser, its `source put` checks and its [`registry::Target`]; the
//! clients the modules keep live in the process's [`registry::Sinks`].

pub mod aws;
pub mod batcher;
pub mod connections;
pub mod eventbridge;
pub mod guard;
pub mod http;
pub mod kinesis;
pub mod nats;
pub mod payload;
pub mod pubsub;
pub mod rabbitmq;
pub mod registry;
pub mod signing;
pub mod sqs;

use crate::secrets::SecretPolicy;
use bytes::Bytes;
use guard::{AddressPolicy, EgressGrant};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The guards applied to tenant-written sink options, from `[http]`, `[secrets]`, `[limits]`
/// and `[tenants.<id>]`: which addresses requests may reach, which secret references resolve,
/// how large a source may be, and what each tenant is granted beyond that
/// (`docs/security.md`). The default is the secure default (`deny_private = true`,
/// `ANKUSA_SECRET_` prefix, no file references, default limits, no grants).
#[derive(Debug, Clone, Default)]
pub struct EdgePolicy {
    /// The SSRF guard (`http.deny_private`, `http.allow_cidrs`).
    pub addresses: Arc<AddressPolicy>,
    /// Secret references (`secrets.env_prefix`, `secrets.file_dir`, shared grants); bound to
    /// a tenant by [`EdgePolicy::for_tenant`].
    pub secrets: SecretPolicy,
    /// The operator's bounds on sources (`[limits]`, `[tenants.<id>]`, the `[retry]` caps).
    pub sources: Arc<crate::config::SourcePolicy>,
    /// Per-tenant egress grants (`tenants.<id>.custom_endpoints`, `ambient_credentials`).
    pub grants: Arc<BTreeMap<String, EgressGrant>>,
    /// The operator's broker connections (`[connections.<name>]`), by name: the only
    /// brokers `nats` and `rabbitmq` entries reach.
    pub connections: Arc<BTreeMap<String, crate::config::ConnectionConfig>>,
    /// The operator's egress proxy for `http` entries (`http.proxy`, `http.no_proxy`), if
    /// any: tunnels to checked addresses only.
    pub proxy: Option<Arc<http::proxy::EgressProxy>>,
}

impl EdgePolicy {
    /// The policy of a validated config.
    pub fn from_config(c: &crate::config::Config) -> EdgePolicy {
        EdgePolicy {
            addresses: Arc::new(AddressPolicy::from_config(&c.http)),
            secrets: SecretPolicy::new(
                &c.secrets.env_prefix,
                &c.secrets.file_dir,
                c.tenants
                    .iter()
                    .filter(|(_, t)| !t.shared_secrets.is_empty())
                    .map(|(id, t)| (id.clone(), t.shared_secrets.clone()))
                    .collect(),
            ),
            sources: Arc::new(crate::config::SourcePolicy::from_config(c)),
            grants: Arc::new(
                c.tenants
                    .iter()
                    .map(|(id, t)| {
                        let grant = EgressGrant {
                            custom_endpoints: t.custom_endpoints,
                            ambient_credentials: t.ambient_credentials.clone(),
                        };
                        (id.clone(), grant)
                    })
                    .collect(),
            ),
            connections: Arc::new(c.connections.clone()),
            // Validated with the config (`http.proxy`); a config that skipped validation
            // and holds a bad proxy is said loudly rather than quietly sent direct.
            proxy: match http::proxy::EgressProxy::from_config(&c.http) {
                Ok(p) => p.map(Arc::new),
                Err(e) => {
                    tracing::error!(error = %e, "http.proxy is invalid: the http sink goes direct");
                    None
                }
            },
        }
    }

    /// This policy for `tenant`'s sources: its secret namespace.
    pub fn for_tenant(&self, tenant: &str) -> EdgePolicy {
        EdgePolicy {
            secrets: self.secrets.for_tenant(tenant),
            ..self.clone()
        }
    }

    /// What `tenant` is granted: its `[tenants.<id>]` section, else nothing.
    pub fn grant(&self, tenant: &str) -> &EgressGrant {
        self.grants.get(tenant).unwrap_or(&guard::NO_GRANT)
    }
}

/// Whether a header name is the product's own (`webhook-*`, `ankusa-*`): producers and sink
/// options cannot set these; the delivery headers replace any such value.
pub fn is_reserved_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.starts_with("webhook-") || n.starts_with("ankusa-")
}

/// Request headers a sink entry's `headers` may not set: the request's framing and the
/// hop-by-hop headers, which the HTTP client derives from the request itself (a stored
/// `content-length` or `transfer-encoding` would desynchronise the connection).
pub const FRAMING_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// Whether `name` is one of [`FRAMING_HEADERS`] (any case).
pub fn is_framing_header(name: &str) -> bool {
    FRAMING_HEADERS
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name.trim()))
}

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    /// Worth retrying after backoff, or after `retry_after` when the sink said so.
    Retry {
        /// Short description, stored as the row's last error (truncated).
        error: String,
        /// The sink's own `Retry-After`, if any (capped by `retry.retry_after_max_ms`).
        retry_after: Option<Duration>,
        /// What failed, for the attempt history.
        kind: ErrorKind,
    },
    /// Retrying cannot help: dead-letter now as `permanent(reason)`; does not count for breakers.
    Permanent {
        /// The reason, stored as the row's last error (truncated).
        error: String,
        /// What failed, for the attempt history.
        kind: ErrorKind,
    },
    /// The attempt outran `dispatch.attempt_timeout_ms` (the bound it had): retried like
    /// [`AttemptError::Retry`] without a `retry_after`, its error recorded as
    /// `attempt_timeout(<ms>ms)` and its duration labelled `result="timeout"`.
    Timeout(Duration),
}

impl AttemptError {
    /// A retryable failure of `kind` without a `Retry-After`.
    pub fn retry(kind: ErrorKind, error: impl Into<String>) -> AttemptError {
        AttemptError::Retry {
            error: error.into(),
            retry_after: None,
            kind,
        }
    }

    /// A permanent failure of `kind`.
    pub fn permanent(kind: ErrorKind, error: impl Into<String>) -> AttemptError {
        AttemptError::Permanent {
            error: error.into(),
            kind,
        }
    }

    /// The label of an attempt's outcome on its tracing span: `retry` or `permanent`.
    pub fn outcome(&self) -> &'static str {
        match self {
            AttemptError::Retry { .. } | AttemptError::Timeout(_) => "retry",
            AttemptError::Permanent { .. } => "permanent",
        }
    }

    /// What failed, as the attempt history records it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AttemptError::Retry { kind, .. } | AttemptError::Permanent { kind, .. } => *kind,
            AttemptError::Timeout(_) => ErrorKind::Timeout,
        }
    }
}

/// What kind of failure an attempt had: the history's `error_kind` (and, for an HTTP answer,
/// its `status`), typed where the attempt error is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The sink answered this HTTP status.
    HttpStatus(u16),
    /// The attempt or its request timed out.
    Timeout,
    /// No connection to the sink could be made.
    Connect,
    /// A secret reference could not be used.
    Secret,
    /// The hook's producer headers cannot be sent over HTTP.
    InvalidHeaders,
    /// The request or its response body failed in transport.
    Transport,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The recorded name: `http_status`, `timeout`, `connect`, `secret`, `invalid_headers`,
    /// `transport` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::HttpStatus(_) => "http_status",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Secret => "secret",
            ErrorKind::InvalidHeaders => "invalid_headers",
            ErrorKind::Transport => "transport",
            ErrorKind::Other => "other",
        }
    }

    /// The HTTP status of an [`ErrorKind::HttpStatus`].
    pub fn status(self) -> Option<u16> {
        match self {
            ErrorKind::HttpStatus(s) => Some(s),
            _ => None,
        }
    }
}

/// Why a sink entry's options could not be made ready for one attempt (its secret references
/// resolved, its defaults applied): the kind travels with the text, so an attempt that fails
/// here is recorded as [`ErrorKind::Secret`] for a secret reference and [`ErrorKind::Other`]
/// for the rest, never read back from the words. Where only a message is wanted (validation
/// at `source put`) it converts into its text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct ResolveError {
    /// What failed.
    pub kind: ErrorKind,
    /// The message, naming the option and never a resolved secret.
    pub text: String,
}

impl ResolveError {
    /// The retryable attempt error this becomes: an unset secret may be set before the
    /// next attempt, and an option is checked again then.
    pub fn retry(self) -> AttemptError {
        AttemptError::retry(self.kind, self.text)
    }
}

impl From<crate::secrets::SecretError> for ResolveError {
    fn from(e: crate::secrets::SecretError) -> ResolveError {
        ResolveError {
            kind: ErrorKind::Secret,
            text: e.into(),
        }
    }
}

impl From<String> for ResolveError {
    fn from(text: String) -> ResolveError {
        ResolveError {
            kind: ErrorKind::Other,
            text,
        }
    }
}

impl From<&str> for ResolveError {
    fn from(text: &str) -> ResolveError {
        text.to_string().into()
    }
}

impl From<ResolveError> for String {
    fn from(e: ResolveError) -> String {
        e.text
    }
}

/// One attempt's input: what to deliver and to where.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Tenant id.
    pub tenant: String,
    /// Source id.
    pub source: String,
    /// Row id `<hook>.<sink>`: the delivery id, the same across retries.
    pub row: String,
    /// The `webhook-id` ([`message_id`]): unique across instances, Redis resets and
    /// failovers, the same on every attempt of the row.
    pub message_id: String,
    /// Hook id.
    pub hook: u64,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Body bytes, exactly as committed.
    pub body: Bytes,
    /// Producer headers, decoded once at the claim.
    pub headers: ProducerHeaders,
    /// Commit time (ms since the epoch, Redis clock).
    pub committed_at_ms: i64,
    /// The hook's event type, if its producer set one: the receiver gets it as the
    /// `ankusa-event-type` header or message attribute, to route on without parsing the body.
    pub event_type: Option<String>,
    /// The W3C `traceparent` of the attempt's span when spans are exported: sent instead of
    /// the producer's, so the receiver's span is a child of the attempt's.
    pub traceparent: Option<String>,
    /// The attempt's time by Redis' clock (ms since the epoch), what `webhook-timestamp`
    /// carries: a worker whose own clock is off still stamps a time receivers accept.
    /// `None`: the worker's clock (a delivery no claim timed).
    pub at_ms: Option<i64>,
}

/// The header (HTTP) and message attribute (SQS, Pub/Sub) that carry a hook's event type.
pub const EVENT_TYPE_HEADER: &str = "ankusa-event-type";

/// The delivery's own headers, in the order sent, for the sinks that carry headers (http,
/// RabbitMQ, NATS): `webhook-id` (the row's message id, the same on every attempt),
/// `ankusa-delivery-id`, `ankusa-hook-id`, `ankusa-attempt`, `ankusa-tenant`,
/// `ankusa-source`, and when set `ankusa-event-type` and `traceparent`. One list, so a
/// header added here reaches every such sink; each sink adds its own (http:
/// `webhook-timestamp`, `webhook-signature`) and decides what a producer header of the same
/// name becomes.
pub fn delivery_headers(d: &Delivery) -> Vec<(&'static str, String)> {
    let mut own = vec![
        ("webhook-id", d.message_id.clone()),
        ("ankusa-delivery-id", d.row.clone()),
        ("ankusa-hook-id", d.hook.to_string()),
        ("ankusa-attempt", d.attempt.to_string()),
        ("ankusa-tenant", d.tenant.clone()),
        ("ankusa-source", d.source.clone()),
    ];
    if let Some(et) = &d.event_type {
        own.push((EVENT_TYPE_HEADER, et.clone()));
    }
    if let Some(tp) = &d.traceparent {
        own.push(("traceparent", tp.clone()));
    }
    own
}

/// The `webhook-id` of a row: `msg_<space>_<row id>`, where `space` is the partition's
/// message space (16 hex digits made at its first lease acquisition, and again when its data
/// was wiped) and the row id is `<hook id>.<sink index>`. Hook ids are unique within a
/// partition's data across failovers (a new primary's ids jump ahead), and the space
/// separates instances and wiped data, so a receiver deduplicating on `webhook-id` never
/// drops a different delivery, while every retry of one row carries the same id.
pub fn message_id(space: &str, row: &str) -> String {
    format!("msg_{space}_{row}")
}

/// One message of a batched sink, built by its module for one attempt, sent by a [`batcher`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchMessage {
    /// The payload: the body, or a claim-check pointer.
    pub body: bytes::Bytes,
    /// Message attributes: `(name, value, numeric)`; SQS sends `numeric` ones as `Number`.
    pub attributes: Vec<(String, String, bool)>,
    /// SQS `MessageGroupId` / Pub/Sub `orderingKey`.
    pub group: Option<String>,
    /// SQS `MessageDeduplicationId` (the delivery's message id, FIFO queues only).
    pub dedup: Option<String>,
    /// Bytes this message counts against the request limit, as the module measures them.
    pub size: usize,
}

/// The producer headers a message sink (SQS, Pub/Sub) sends as attributes: [`header_pairs`],
/// with the producer's `traceparent` replaced by the attempt span's when spans are exported,
/// so a consumer's span is a child of the attempt's, as an HTTP receiver's is.
pub fn message_header_pairs(d: &Delivery) -> Vec<(String, String)> {
    let mut pairs = header_pairs(&d.headers);
    if let Some(tp) = &d.traceparent {
        pairs.retain(|(k, _)| !k.eq_ignore_ascii_case("traceparent"));
        pairs.push(("traceparent".into(), tp.clone()));
        pairs.sort();
    }
    pairs
}

/// A hook's producer headers, decoded once when the hook is read for delivery (every
/// attempt and every sink of the row shares them): the JSON object text as stored, and its
/// entries sorted by name, a value that is no string kept as `None` (the http sink refuses
/// those, the message sinks leave them out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerHeaders {
    json: Arc<str>,
    entries: Arc<[(String, Option<String>)]>,
    /// Why the text is no JSON object (`None` for one, and for no headers at all).
    problem: Option<Arc<str>>,
}

impl ProducerHeaders {
    /// Decode the stored text (a JSON object, or empty for none). Never fails: text that is
    /// no JSON object keeps its [`ProducerHeaders::problem`] and has no entries.
    pub fn decode(json: impl Into<Arc<str>>) -> ProducerHeaders {
        let json: Arc<str> = json.into();
        if json.is_empty() {
            return ProducerHeaders::default();
        }
        let (entries, problem) = match serde_json::from_str::<serde_json::Value>(&json) {
            Ok(serde_json::Value::Object(h)) => {
                let mut e: Vec<(String, Option<String>)> = h
                    .into_iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(v) => (k, Some(v)),
                        _ => (k, None),
                    })
                    .collect();
                e.sort();
                (e, None)
            }
            Ok(_) => (Vec::new(), Some("not a JSON object".into())),
            Err(e) => (Vec::new(), Some(e.to_string().into())),
        };
        ProducerHeaders {
            json,
            entries: entries.into(),
            problem,
        }
    }

    /// The JSON object text as stored (empty for none).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Whether the hook has no headers.
    pub fn is_empty(&self) -> bool {
        self.json.is_empty()
    }

    /// Every entry, sorted by name; `None` for a value that is no string.
    pub fn entries(&self) -> &[(String, Option<String>)] {
        &self.entries
    }

    /// Why the stored text is no JSON object (written by other means than a producer,
    /// which checks headers at commit); `None` when it is one or empty.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }
}

impl From<&str> for ProducerHeaders {
    fn from(json: &str) -> ProducerHeaders {
        ProducerHeaders::decode(json)
    }
}

/// Producer headers as `(name, value)` pairs with string values, sorted by name;
/// hop-by-hop and framing headers are left out.
pub fn header_pairs(headers: &ProducerHeaders) -> Vec<(String, String)> {
    headers
        .entries()
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.to_ascii_lowercase().as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding"
            )
        })
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect()
}

/// Cut `s` to at most `max` bytes on a char boundary (stored errors are bounded).
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_headers_are_decoded_once_with_their_problems_kept() {
        let h = ProducerHeaders::decode(r#"{"x-b":"2","Host":"h","x-a":"1","n":7}"#);
        assert_eq!(h.problem(), None);
        let names: Vec<&str> = h.entries().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["Host", "n", "x-a", "x-b"], "sorted by name");
        assert_eq!(h.entries()[1].1, None, "a number is no string value");
        // The message sinks' pairs: string values only, framing headers left out.
        assert_eq!(
            header_pairs(&h),
            [
                ("x-a".to_string(), "1".to_string()),
                ("x-b".into(), "2".into())
            ]
        );
        assert!(ProducerHeaders::decode("").is_empty());
        assert_eq!(ProducerHeaders::decode("").problem(), None);
        for bad in ["[1]", "\"x\"", "{not json"] {
            let h = ProducerHeaders::decode(bad);
            assert!(h.problem().is_some(), "{bad}");
            assert!(
                h.entries().is_empty() && header_pairs(&h).is_empty(),
                "{bad}"
            );
            assert_eq!(h.json(), bad, "the stored text is kept");
        }
        assert_eq!(
            ProducerHeaders::decode("[1]").problem(),
            Some("not a JSON object")
        );
    }

    #[test]
    fn truncation_keeps_utf8_valid() {
        let t = truncate("ééééé".to_string(), 3);
        assert_eq!(t, "é…");
    }
}
