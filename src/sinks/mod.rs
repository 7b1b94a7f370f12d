//! Sinks: where a row is delivered. Each sink module has its options, its
//! transport and its retry classification (R8), apart from the scheduler.
//!
//! | module | batched | inline limit | file |
//! | --- | --- | --- | --- |
//! | `http` | no | none | [`http`] |
//! | `sqs` | yes: 10 entries / 256 KiB per request | 256 KiB minus attributes | [`sqs`] |
//! | `pubsub` | yes: 1 000 messages / 10 MB per request | 7 MB (base64 in JSON) minus attributes | [`pubsub`] |
//!
//! A batched sink's attempts wait in a per-destination [`batcher`] (R17); a body over its
//! inline limit is checked in to the blob store ([`crate::claim_check`], R18).

pub mod batcher;
pub mod http;
pub mod pubsub;
pub mod sqs;

use bytes::Bytes;
use std::time::Duration;

/// How an attempt failed (R8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptError {
    /// Worth retrying after backoff, or after `retry_after` when the sink said so.
    Retry {
        /// Short description, stored as the row's last error (truncated).
        error: String,
        /// The sink's own `Retry-After`, if any (capped by `retry.retry_after_max_ms`).
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help: dead-letter now as `permanent(reason)`; does not count for breakers (R16).
    Permanent(String),
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
    /// Hook id.
    pub hook: u64,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Body bytes, exactly as committed.
    pub body: Bytes,
    /// Producer headers, a JSON object text (or empty).
    pub headers: String,
    /// Commit time (ms since the epoch, Redis clock).
    pub committed_at_ms: i64,
}

/// What the scheduler asks of a sink module's options (the reference's `Ankusa.Sink`).
pub trait Sink {
    /// Whether attempts go through a per-destination [`batcher`] (R17) instead of running
    /// one request each under `sink_concurrency`.
    fn batched(&self) -> bool;
    /// The largest body sent inline for a hook with these producer `headers` (JSON object
    /// text); a larger body is checked in to the blob store first (R18). `None`: no limit.
    fn inline_max_bytes(&self, headers: &str) -> Option<usize>;
}

impl Sink for http::HttpOpts {
    fn batched(&self) -> bool {
        false
    }
    fn inline_max_bytes(&self, _headers: &str) -> Option<usize> {
        None
    }
}

/// One message of a batched sink, built by its module for one attempt, sent by a [`batcher`].
#[derive(Debug, Clone, PartialEq)]
pub struct BatchMessage {
    /// The payload: the body, or a claim-check pointer (R18).
    pub body: bytes::Bytes,
    /// Message attributes: `(name, value, numeric)`; SQS sends `numeric` ones as `Number`.
    pub attributes: Vec<(String, String, bool)>,
    /// SQS `MessageGroupId` / Pub/Sub `orderingKey`.
    pub group: Option<String>,
    /// SQS `MessageDeduplicationId` (the row id, FIFO queues only).
    pub dedup: Option<String>,
    /// Bytes this message counts against the request limit, as the module measures them.
    pub size: usize,
}

/// Producer headers (a JSON object text) as `(name, value)` pairs with string values,
/// sorted by name; hop-by-hop and framing headers are left out.
pub fn header_pairs(headers: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if headers.is_empty() {
        return out;
    }
    if let Ok(serde_json::Value::Object(h)) = serde_json::from_str::<serde_json::Value>(headers) {
        for (k, v) in h {
            let lk = k.to_ascii_lowercase();
            if matches!(
                lk.as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding"
            ) {
                continue;
            }
            if let Some(v) = v.as_str() {
                out.push((k, v.to_string()));
            }
        }
    }
    out.sort();
    out
}

/// Replace `${env:NAME}` references in a sink option with the worker's environment
/// (secrets stay out of Redis, R19). Errors name the missing variable.
pub fn resolve_secrets(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${env:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 6..];
        let end = after
            .find('}')
            .ok_or_else(|| "unterminated ${env:…} reference".to_string())?;
        let name = &after[..end];
        let val = std::env::var(name).map_err(|_| {
            format!("secret reference ${{env:{name}}} is not set in the worker's environment")
        })?;
        out.push_str(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
    fn secret_references_resolve_from_the_environment_and_missing_ones_are_named() {
        std::env::set_var("ANKUSA_TEST_SECRET_X", "s3cret");
        assert_eq!(
            resolve_secrets("Bearer ${env:ANKUSA_TEST_SECRET_X}!").unwrap(),
            "Bearer s3cret!"
        );
        assert_eq!(resolve_secrets("plain").unwrap(), "plain");
        let e = resolve_secrets("${env:ANKUSA_TEST_SURELY_UNSET}").unwrap_err();
        assert!(e.contains("ANKUSA_TEST_SURELY_UNSET"), "{e}");
    }

    #[test]
    fn truncation_keeps_utf8_valid() {
        let t = truncate("ééééé".to_string(), 3);
        assert_eq!(t, "é…");
    }
}
