//! What one tenant may hold: its stored hooks' bytes and count (`limits.max_pending_bytes`,
//! `max_pending_hooks`), checked by the commit script on every ingest, and its sources'
//! number and size (`max_sources_per_tenant`, `max_source_bytes`), checked at `source put`.
//! A refusal is `429 quota_exceeded` (or `400` for an over-size spec) naming the key, stores
//! nothing, and never touches another tenant. Real worker process, real Redis, real HTTP.

use crate::admin_hardening::worker;
use crate::common;

use ankusa::testkit::Behavior;
use common::procs::{eventually, get, http};
use common::{Env, LIVENESS};
use serde_json::Value;

/// POST `body` to ingest `tenant/orders`: `(status, Retry-After, JSON body)`.
async fn ingest(admin: &str, tenant: &str, body: Vec<u8>) -> (u16, Option<String>, Value) {
    let resp = http()
        .post(format!("http://{admin}/v1/hooks/{tenant}/orders"))
        .timeout(LIVENESS)
        .body(body)
        .send()
        .await
        .expect("ingest answers");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = resp.bytes().await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, retry, body)
}

/// The error message of an error answer.
fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_pending_quota_is_refused_429_until_deliveries_make_room() {
    let env = Env::new().await;
    // The tenants' endpoint is down: their hooks stay pending.
    env.receiver.set("down", Behavior::Status(503));
    env.http_source("acme", "orders", &["down"]).await;
    env.http_source("beta", "orders", &["down"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| {
        c.limits.max_pending_bytes = 1000;
        c.tenants
            .entry("acme".into())
            .or_default()
            .max_pending_hooks = Some(3);
        c.tenants
            .entry("acme".into())
            .or_default()
            .max_pending_bytes = Some(1 << 20);
    })
    .await;
    let a = w.admin.as_str();
    for i in 0..3 {
        let (status, _, body) = ingest(a, "acme", format!("{{\"n\":{i}}}").into()).await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, retry, body) = ingest(a, "acme", b"{\"n\":3}".to_vec()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert_eq!(retry.as_deref(), Some("30"));
    let m = message(&body);
    assert!(m.contains("tenant acme holds 3 hooks"), "{m}");
    assert!(m.contains("tenants.acme.max_pending_hooks = 3"), "{m}");
    assert_eq!(env.store.totals().await.unwrap().committed, 3);

    // Another tenant is not held by acme's quota, but by its own (`limits`, 1000 bytes):
    // its endpoint is down too, so its first hook stays and the next does not fit.
    assert_eq!(ingest(a, "beta", vec![b'a'; 600]).await.0, 202);
    let (status, _, body) = ingest(a, "beta", vec![b'c'; 600]).await;
    assert_eq!(status, 429, "{body}");
    let m = message(&body);
    assert!(m.contains("holds 600 bytes of hooks"), "{m}");
    assert!(
        m.contains("adds 600, over limits.max_pending_bytes = 1000"),
        "{m}"
    );
    assert_eq!(ingest(a, "beta", vec![b'd'; 400]).await.0, 202);

    // The endpoint recovers: acme's hooks are delivered, and it may commit again.
    env.receiver.set("down", Behavior::Ok);
    eventually("acme may commit again", LIVENESS, || async {
        match ingest(a, "acme", b"{\"n\":4}".to_vec()).await {
            (202, _, _) => Ok(()),
            (s, _, b) => Err(format!("{s} {b}")),
        }
    })
    .await;
    let (_, stats) = get(a, "/metrics").await.expect("metrics answer");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("ankusa_commits_refused_total{")
                && l.contains("reason=\"quota\"")
                && !l.ends_with(" 0")),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_source_past_the_tenants_count_or_a_spec_past_its_size_is_refused_naming_the_key() {
    let env = Env::new().await;
    env.http_source("acme", "one", &["x"]).await;
    env.http_source("acme", "two", &["x"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| {
        c.limits.max_sources_per_tenant = 2;
        c.limits.max_source_bytes = 1024;
    })
    .await;
    let put = |tenant: &'static str, source: &'static str, url: String| {
        let admin = w.admin.clone();
        async move {
            let spec = serde_json::json!({"sinks": [{"module": "http", "opts": {"url": url}}]});
            let resp = http()
                .put(format!("http://{admin}/admin/sources/{tenant}/{source}"))
                .timeout(LIVENESS)
                .header("content-type", "application/json")
                .body(spec.to_string())
                .send()
                .await
                .expect("the API answers");
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.expect("body");
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let url = env.receiver.url("x");
    let (status, body) = put("acme", "three", url.clone()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    let m = message(&body);
    assert!(m.contains("tenant acme has 2 sources"), "{m}");
    assert!(m.contains("limits.max_sources_per_tenant = 2"), "{m}");
    assert_eq!(env.store.get_source("acme", "three").await.unwrap(), None);
    // Replacing one it has is no new source; another tenant has its own count.
    assert_eq!(put("acme", "two", url.clone()).await.0, 200);
    assert_eq!(put("beta", "three", url.clone()).await.0, 200);
    // A spec over max_source_bytes is refused whatever the count.
    let long = format!("{url}?{}", "q".repeat(2000));
    let (status, body) = put("acme", "two", long).await;
    assert_eq!(status, 400, "{body}");
    let m = message(&body);
    assert!(m.contains("more than the 1024 a source may have"), "{m}");
    assert!(m.contains("limits.max_source_bytes = 1024"), "{m}");
}
