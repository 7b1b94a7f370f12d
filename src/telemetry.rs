//! Optional OpenTelemetry trace export of attempts (`[telemetry]`, `docs/operations.md`).
//!
//! Every attempt runs in a `tracing` span named `attempt` (see `scheduler`). With
//! `telemetry.otlp_endpoint` set, [`Telemetry::start`] builds an OTLP/HTTP (protobuf)
//! exporter behind a batch processor, and [`Telemetry::layer`] turns `attempt` spans — and
//! nothing else — into OpenTelemetry spans. [`link`] makes an attempt's span a child of the
//! `traceparent` its hook was committed with, so the producer's trace id is the exported
//! span's. With export off no layer is installed and [`link`] is one relaxed atomic load: no
//! allocation per attempt.

use crate::config::TelemetryConfig;
use crate::error::Error;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;

/// Whether a [`Telemetry`] is running in this process (read per attempt by [`link`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// How long one export request may take (connect, send, answer).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The running exporter. Call [`Telemetry::shutdown`] before the process exits: it exports
/// the spans still queued.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

/// The exporter's transport: the crate's reqwest client, driven on the tokio runtime that
/// started the exporter (the batch processor runs on a thread of its own with no runtime).
#[derive(Debug)]
struct Transport {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for Transport {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let task = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let answer = client.execute(request).await?;
            let mut response = Response::builder().status(answer.status());
            if let Some(headers) = response.headers_mut() {
                *headers = answer.headers().clone();
            }
            let body = answer.bytes().await?;
            Ok::<_, HttpError>(response.body(body)?)
        });
        task.await?
    }
}

impl Telemetry {
    /// Starts the exporter of `cfg`; `Ok(None)` when `otlp_endpoint` is empty (export off).
    /// Must be called within a tokio runtime, which then carries the export requests.
    /// Errors: [`Error::Other`] naming `telemetry.otlp_endpoint` when the exporter cannot be
    /// built (a config that passed validation always builds).
    pub fn start(cfg: &TelemetryConfig) -> Result<Option<Telemetry>, Error> {
        let Some(url) = cfg.traces_url() else {
            return Ok(None);
        };
        let refuse =
            |e: &dyn std::fmt::Display| Error::Other(format!("telemetry.otlp_endpoint {url}: {e}"));
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| refuse(&e))?;
        let transport = Transport {
            client,
            runtime: tokio::runtime::Handle::try_current().map_err(|e| refuse(&e))?,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(transport)
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| refuse(&e))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            // A producer's sampled flag decides for its hooks; the ratio for the others.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                cfg.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(cfg.service_name.clone())
                    .build(),
            )
            .build();
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Some(Telemetry { provider }))
    }

    /// The `tracing` layer that exports `attempt` spans (and no other span or event).
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("ankusa"))
            .with_threads(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() && m.name() == "attempt" && m.target().starts_with("ankusa")
            }))
    }

    /// Exports the spans still queued and stops the exporter (waits at most for one export).
    pub async fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        let provider = self.provider;
        // The processor's thread blocks until the export ends; the export itself needs this
        // runtime, so wait off its threads.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "telemetry: flushing spans at shutdown failed")
            }
            Err(e) => tracing::warn!(error = %e, "telemetry: flushing spans at shutdown failed"),
        }
    }
}

/// Whether attempt spans are exported in this process.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Make `span` (not yet entered) a child of the W3C `traceparent` (and `tracestate`) among a
/// hook's producer headers (`headers`: the JSON object text stored with the hook, or empty).
/// Does nothing when export is off or the headers carry no valid `traceparent`.
#[inline]
pub fn link(span: &tracing::Span, headers: &str) {
    if enabled() && !headers.is_empty() {
        link_slow(span, headers);
    }
}

#[cold]
fn link_slow(span: &tracing::Span, headers: &str) {
    if let Some(cx) = parent_context(headers) {
        // Fails only when the span is disabled or already started: then it is a root span.
        let _ = span.set_parent(cx);
    }
}

/// The OpenTelemetry identity of an exported span: what logs and the outgoing request carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanIds {
    /// The trace id, 32 hex digits.
    pub trace_id: String,
    /// The span's own id, 16 hex digits.
    pub span_id: String,
    /// The W3C `traceparent` naming this span as the parent:
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
}

/// The ids of `span` (already [`link`]ed: this starts it) when attempt spans are exported;
/// `None` when export is off. A receiver given its `traceparent` makes its own span a child
/// of the attempt's, which is itself a child of the producer's.
pub fn span_ids(span: &tracing::Span) -> Option<SpanIds> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return None;
    }
    let (trace_id, span_id) = (sc.trace_id().to_string(), sc.span_id().to_string());
    Some(SpanIds {
        traceparent: format!("00-{trace_id}-{span_id}-{:02x}", sc.trace_flags().to_u8()),
        trace_id,
        span_id,
    })
}

/// The remote parent named by the `traceparent` among `headers` (JSON object text; names
/// matched without regard to case), or `None` when there is none or it is malformed.
pub fn parent_context(headers: &str) -> Option<opentelemetry::Context> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(headers).ok()?;
    let cx = TraceContextPropagator::new().extract(&JsonHeaders(&map));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Producer headers as a propagation carrier.
struct JsonHeaders<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for JsonHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceId};

    #[test]
    fn a_traceparent_in_any_case_names_the_remote_parent() {
        let h = r#"{"Traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"v=1"}"#;
        let cx = parent_context(h).expect("parent");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(sc.span_id(), SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(sc.is_sampled() && sc.is_remote());
        assert_eq!(sc.trace_state().get("v"), Some("1"));
    }

    #[test]
    fn no_or_malformed_traceparent_gives_no_parent() {
        for h in [
            "",
            "not json",
            "[]",
            r#"{"content-type":"application/json"}"#,
            r#"{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}"#,
            r#"{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"}"#,
            r#"{"traceparent":7}"#,
        ] {
            assert!(parent_context(h).is_none(), "{h}");
        }
    }
}
