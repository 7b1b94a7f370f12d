//! The `http` module in the sink registry ([`crate::sinks::registry`]): its options as a
//! [`Target`] delivering one POST per row through the process's [`HttpSink`], and the
//! `source put` checks of its options.

use super::{HttpOpts, HttpSink};
use crate::config::SourceBounds;
use crate::model::SinkEntry;
use crate::sinks::registry::{self, DeliverFuture, Module, Sinks, Target};
use crate::sinks::{AttemptError, Delivery, EdgePolicy, ErrorKind};
use std::sync::Arc;

/// The `http` sink module: one POST per row, under the slots and rate limits.
pub static MODULE: Module = Module {
    name: "http",
    batched: false,
    rate_limited: true,
    target,
    validate,
    check_grant: registry::no_grant_needed,
    warm: Some(warm as registry::Warm),
};

/// The process's HTTP sink (one client, one connection pool for every partition's sessions
/// and for the operator's events).
pub fn client(sinks: &Sinks) -> Result<Arc<HttpSink>, String> {
    sinks.clients(|edge| HttpSink::new(edge.clone()).map_err(|e| format!("http client: {e}")))
}

fn target(entry: &SinkEntry) -> Result<Arc<dyn Target>, String> {
    Ok(Arc::new(HttpOpts::from_opts(&entry.opts)?))
}

fn warm(sinks: &Sinks) -> Result<(), String> {
    client(sinks).map(drop)
}

fn validate(entry: &SinkEntry, edge: &EdgePolicy, bounds: &SourceBounds) -> Result<(), String> {
    let o = HttpOpts::from_opts_with(&entry.opts, edge)?;
    check_headers(&o.headers, bounds)
}

impl Target for HttpOpts {
    fn module(&self) -> &'static str {
        MODULE.name
    }

    fn deliver<'a>(&'a self, sinks: &'a Sinks, d: &'a Delivery) -> DeliverFuture<'a> {
        Box::pin(async move {
            let http = client(sinks).map_err(|e| AttemptError::retry(ErrorKind::Other, e))?;
            http.deliver_status(self, d).await.map(Some)
        })
    }
}

/// Check an http entry's `headers` at `source put`: within the operator's count and size
/// (`limits.max_headers_per_entry`, `limits.max_header_bytes` or the tenant's), no framing
/// or hop-by-hop header ([`crate::sinks::FRAMING_HEADERS`]: the client sets those from the
/// request itself), and values of visible ASCII, spaces and tabs only (a CR or LF would
/// split the request).
pub fn check_headers(
    headers: &std::collections::BTreeMap<String, String>,
    bounds: &SourceBounds,
) -> Result<(), String> {
    let most = &bounds.max_headers_per_entry;
    if headers.len() > most.value {
        return Err(format!(
            "headers: {} headers, more than the {} an entry may have ({} = {})",
            headers.len(),
            most.value,
            most.key,
            most.value
        ));
    }
    let bytes: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    let max = &bounds.max_header_bytes;
    if bytes > max.value {
        return Err(format!(
            "headers: {bytes} bytes of names and values, more than the {} an entry may have \
             ({} = {})",
            max.value, max.key, max.value
        ));
    }
    for (k, v) in headers {
        if crate::sinks::is_framing_header(k) {
            return Err(format!(
                "headers: {k:?} is a framing or hop-by-hop header, set by the HTTP client \
                 itself (refused: {})",
                crate::sinks::FRAMING_HEADERS.join(", ")
            ));
        }
        if let Some(b) = v
            .bytes()
            .find(|b| !(b' '..=b'~').contains(b) && *b != b'\t')
        {
            return Err(format!(
                "headers.{k}: the value holds byte 0x{b:02x}; only visible ASCII, spaces and \
                 tabs are allowed (no CR, LF or other control characters)"
            ));
        }
    }
    Ok(())
}
