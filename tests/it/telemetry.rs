//! OpenTelemetry export of attempts (`[telemetry]`, `docs/operations.md`): a worker process
//! posts its attempt spans over OTLP/HTTP to a collector this test serves, each a child of the
//! `traceparent` its hook was committed with; with no endpoint configured nothing is posted.

use crate::common;

use ankusa::testkit::{Behavior, Reply};
use ankusa::Hook;
use common::procs::{poll_until, spawn_worker, wait_exit, wait_leader, write_config};
use common::{Env, LIVENESS};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};

/// An OTLP/HTTP collector on loopback: every `POST /v1/traces` body decoded and kept.
struct Collector {
    /// Base URL, `http://127.0.0.1:<port>`.
    url: String,
    seen: Arc<Mutex<Seen>>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    requests: usize,
    /// Bodies that were no `ExportTraceServiceRequest`.
    undecodable: usize,
    /// Each span with its resource's `service.name`.
    spans: Vec<(String, Span)>,
}

impl Collector {
    async fn start() -> Collector {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let kept = seen.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let mut seen = kept.lock().unwrap();
                seen.requests += 1;
                let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                    seen.undecodable += 1;
                    return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                };
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .as_ref()
                        .and_then(|r| string_attr(&r.attributes, "service.name"))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            seen.spans.push((service.clone(), span));
                        }
                    }
                }
                (
                    axum::http::StatusCode::OK,
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }),
        );
        let listener = common::tokio_listener();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Collector { url, seen, server }
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.seen.lock().unwrap().spans.clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key) {
        Some(Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key) {
        Some(Value::IntValue(i)) => Some(*i),
        _ => None,
    }
}

const INGEST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const INGEST_PARENT: &str = "00f067aa0ba902b7";
const PRODUCER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const PRODUCER_PARENT: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_exported_as_a_child_of_its_producers_traceparent() {
    let env = Env::new().await;
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    env.http_source("acme", "orders", &["ok", "flaky"]).await;
    // The second sink fails once, then takes the retry: two attempts of one row.
    env.receiver.set(
        "flaky",
        Behavior::Sequence(vec![Reply::status(503).body("busy")]),
    );
    let config = write_config(&env, &dir, "w.toml", |c| {
        c.telemetry.otlp_endpoint = collector.url.clone();
        c.telemetry.service_name = "ankusa-test".into();
        // Ingest keeps a producer's trace context only when it is listed.
        c.admin.forward_headers.push("traceparent".into());
    });
    // Spans leave on the schedule only after a minute: what the collector sees below was
    // exported by the flush at shutdown.
    let mut w = spawn_worker(
        &config,
        &dir,
        "otel",
        &[],
        &[("OTEL_BSP_SCHEDULE_DELAY", "60000")],
    );
    wait_leader(&w).await;

    // One hook through the worker's ingest, one through the Rust producer.
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/hooks/acme/orders", w.admin))
        .header("content-type", "application/json")
        .header(
            "traceparent",
            format!("00-{INGEST_TRACE}-{INGEST_PARENT}-01"),
        )
        .body("{\"via\":\"ingest\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let hook = Hook::new("{\"via\":\"producer\"}").header(
        "Traceparent",
        format!("00-{PRODUCER_TRACE}-{PRODUCER_PARENT}-01"),
    );
    env.producer
        .commit("acme", "orders", hook)
        .await
        .expect("commit");

    // 2 hooks × (1 ok + 2 flaky: 503 then 200) requests.
    assert!(
        poll_until(LIVENESS, || async {
            env.receiver.count_for("ok") == 2 && env.receiver.count_for("flaky") == 3
        })
        .await,
        "deliveries: {:?}",
        env.receiver.requests()
    );
    common::procs::wait_idle(&env, LIVENESS).await;
    w.signal(libc::SIGTERM);
    let status = wait_exit(&mut w, LIVENESS).await.expect("worker exits");
    assert!(status.success(), "{status:?}\n{}", w.log_text());

    let seen = collector.seen.lock().unwrap().undecodable;
    assert_eq!(seen, 0, "every export is an ExportTraceServiceRequest");
    let spans = collector.spans();
    assert!(
        spans
            .iter()
            .all(|(service, s)| s.name == "attempt" && service == "ankusa-test"),
        "only attempt spans, of service.name ankusa-test: {spans:#?}"
    );
    assert_eq!(
        spans.len(),
        5,
        "one span per attempt: {spans:#?}\n{}",
        w.log_text()
    );
    // (sink, attempt, outcome, status, has error) of every span, over both traces.
    let mut all = Vec::new();
    for (trace, parent) in [
        (INGEST_TRACE, INGEST_PARENT),
        (PRODUCER_TRACE, PRODUCER_PARENT),
    ] {
        let ours: Vec<&Span> = spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| hex::encode(&s.trace_id) == trace)
            .collect();
        // Sink 0 once; sink 1 once or twice (whichever hook met the 503).
        assert!(
            (2..=3).contains(&ours.len()),
            "attempts in trace {trace}: {spans:#?}"
        );
        for s in &ours {
            assert_eq!(hex::encode(&s.parent_span_id), parent, "{s:#?}");
            assert_ne!(hex::encode(&s.span_id), parent, "a span of its own");
            let a = &s.attributes;
            assert_eq!(string_attr(a, "tenant").as_deref(), Some("acme"), "{s:#?}");
            assert_eq!(string_attr(a, "source").as_deref(), Some("orders"));
            assert_eq!(string_attr(a, "module").as_deref(), Some("http"));
            assert!(string_attr(a, "row").is_some(), "{s:#?}");
            assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
            let outcome = string_attr(a, "outcome");
            if outcome.as_deref() == Some("retry") {
                let error = string_attr(a, "error").unwrap_or_default();
                assert!(error.contains("503"), "{s:#?}");
            }
            all.push((
                int_attr(a, "sink"),
                int_attr(a, "attempt"),
                outcome,
                int_attr(a, "status"),
                string_attr(a, "error").is_some(),
            ));
        }
    }
    all.sort();
    let ok = |sink, attempt| {
        (
            Some(sink),
            Some(attempt),
            Some("ok".to_string()),
            Some(200),
            false,
        )
    };
    assert_eq!(
        all,
        vec![
            ok(0, 1),
            ok(0, 1),
            ok(1, 1),
            (Some(1), Some(1), Some("retry".into()), Some(503), true),
            ok(1, 2),
        ],
        "sink, attempt, outcome, status, error of every span"
    );

    // The receiver's span is the attempt's child: every request carries the `traceparent` of
    // the exported span of its row and attempt, not the producer's.
    let ids = |s: &Span| (hex::encode(&s.trace_id), hex::encode(&s.span_id));
    let by_attempt: std::collections::HashMap<(String, i64), (String, String)> = spans
        .iter()
        .map(|(_, s)| {
            let row = string_attr(&s.attributes, "row").unwrap();
            ((row, int_attr(&s.attributes, "attempt").unwrap()), ids(s))
        })
        .collect();
    let requests = env.receiver.requests();
    assert_eq!(requests.len(), 5, "{requests:?}");
    for r in &requests {
        let row = r.header("ankusa-delivery-id").unwrap().to_string();
        let attempt: i64 = r.header("ankusa-attempt").unwrap().parse().unwrap();
        let (trace, span) = &by_attempt[&(row, attempt)];
        assert_eq!(
            r.header("traceparent"),
            Some(format!("00-{trace}-{span}-01").as_str()),
            "{r:?}"
        );
    }

    // The failed attempt's log line is in its span: the span's fields and its ids.
    let log = w.log_text();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("attempt failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{log}");
    let retried = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| string_attr(&s.attributes, "outcome").as_deref() == Some("retry"))
        .unwrap();
    let (trace, span) = ids(retried);
    let row = string_attr(&retried.attributes, "row").unwrap();
    for field in [
        "tenant=acme".to_string(),
        "source=orders".into(),
        "sink=1".into(),
        "module=http".into(),
        format!("row={row}"),
        "attempt=1".into(),
        format!("trace_id={trace}"),
        format!("span_id={span}"),
    ] {
        assert!(failed[0].contains(&field), "{field} missing: {}", failed[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_exported_when_no_endpoint_is_configured() {
    let env = Env::new().await;
    let collector = Collector::start().await;
    let dir = tempfile::tempdir().unwrap();
    env.http_source("acme", "orders", &["ok"]).await;
    let config = write_config(&env, &dir, "w.toml", |_| {});
    // The standard OpenTelemetry variables alone do not turn export on.
    let traces = format!("{}/v1/traces", collector.url);
    let mut w = spawn_worker(
        &config,
        &dir,
        "quiet",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.as_str()),
        ],
    );
    wait_leader(&w).await;
    let hook = Hook::new("{}").header(
        "traceparent",
        format!("00-{PRODUCER_TRACE}-{PRODUCER_PARENT}-01"),
    );
    env.producer
        .commit("acme", "orders", hook)
        .await
        .expect("commit");
    assert!(
        poll_until(LIVENESS, || async { env.receiver.count_for("ok") == 1 }).await,
        "delivered"
    );
    // No span of ours is exported: the producer's trace context passes as it came.
    assert_eq!(
        env.receiver.requests()[0].header("traceparent"),
        Some(format!("00-{PRODUCER_TRACE}-{PRODUCER_PARENT}-01").as_str())
    );
    w.signal(libc::SIGTERM);
    let status = wait_exit(&mut w, LIVENESS).await.expect("worker exits");
    assert!(status.success(), "{status:?}\n{}", w.log_text());
    assert_eq!(
        collector.seen.lock().unwrap().requests,
        0,
        "no export request"
    );
}
