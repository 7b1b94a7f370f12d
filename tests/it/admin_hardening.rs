//! The admin and ingest server against hostile or careless clients: a listen
//! address beyond loopback needs `admin.token`; `admin.ingest_token` opens ingest only; the
//! ingest body limit is `commit.max_hook_bytes` (413 `too_large`); credentials and proxy
//! headers sent to ingest never reach the customer's endpoint (what slow and flooding clients
//! do to the listener's connections: `admin_connections`). Real worker processes, real Redis, real HTTP on loopback.

use crate::common;

use common::procs::{get, http, wait_ready, write_config};
use common::{free_port, Env, WorkerProcess, LIVENESS};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// A worker process on `env`'s Redis with the config tuned by `tune`, ready.
pub(crate) async fn worker(
    env: &Env,
    dir: &tempfile::TempDir,
    tune: impl FnOnce(&mut ankusa::config::Config),
) -> WorkerProcess {
    let config = write_config(env, dir, "ankusa.toml", tune);
    let w = WorkerProcess::spawn(&config, dir, "w");
    wait_ready(&w).await;
    w
}

/// POST `body` to ingest `tenant/source` with `headers`: `(status, JSON body)`.
async fn ingest(
    admin: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Value) {
    let mut req = http()
        .post(format!("http://{admin}{path}"))
        .timeout(LIVENESS)
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await.expect("ingest answers");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// GET `path` with an optional bearer token: the status.
async fn status_of(admin: &str, path: &str, token: Option<&str>) -> u16 {
    let mut req = http()
        .get(format!("http://{admin}{path}"))
        .timeout(LIVENESS);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("answers").status().as_u16()
}

/// `POST /admin/tick` until it answers 200 (a leader is elected first).
async fn tick(admin: &str, token: Option<&str>) {
    common::procs::eventually("POST /admin/tick answers 200", LIVENESS, || async {
        let mut req = http()
            .post(format!("http://{admin}/admin/tick"))
            .timeout(LIVENESS);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        match req.send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(format!("status {}", r.status())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// Run `ankusa worker` as given, expecting it to exit on its own: `(exit code, stderr)`.
async fn run_to_exit(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ankusa"));
    cmd.env_remove("ANKUSA_ADMIN__TOKEN");
    // Dies with the test if it does not exit on its own.
    let child = common::dies_with_test(&mut cmd)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ankusa starts");
    let out = tokio::time::timeout(
        LIVENESS,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("the worker exits on its own")
    .expect("joined")
    .expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_listening_beyond_loopback_without_a_token_refuses_to_start() {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "ankusa.toml", |_| {});
    let config = config.to_str().unwrap();
    let any = format!("0.0.0.0:{}", free_port());
    // By flag, by environment variable, by config file: exit 2 naming admin.token.
    let mut file = env.config.clone();
    file.admin.listen = any.clone();
    let exposed = dir.path().join("exposed.toml");
    std::fs::write(&exposed, toml::to_string(&file).unwrap()).unwrap();
    for (args, envs) in [
        (vec!["worker", "--config", config, "--listen", &any], vec![]),
        (
            vec!["worker", "--config", config],
            vec![("ANKUSA_ADMIN__LISTEN", any.as_str())],
        ),
        (
            vec!["worker", "--config", exposed.to_str().unwrap()],
            vec![("ANKUSA_ADMIN__INGEST_TOKEN", "only-ingest")],
        ),
    ] {
        let (code, stderr) = run_to_exit(&args, &envs).await;
        assert_eq!(code, Some(2), "{args:?} {envs:?}: {stderr}");
        assert!(
            stderr.contains("admin.token") && stderr.contains(&any),
            "{args:?}: {stderr}"
        );
    }
    // `config check` refuses it too; commands that serve nothing run (an image's environment
    // sets the listen address for every command).
    let (code, stderr) = run_to_exit(&["config", "check", exposed.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("admin.token"), "{stderr}");
    let (code, stderr) = run_to_exit(
        &["--config", exposed.to_str().unwrap(), "source", "list"],
        &[],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    // It never bound the port: nothing listens there.
    let port: u16 = any.rsplit(':').next().unwrap().parse().unwrap();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingest_token_opens_ingest_only_and_the_admin_token_opens_everything() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| {
        c.admin.token = Some("adm1n-0123456789abcdefghijklmnopqrstuv".into());
        c.admin.ingest_token = Some("pr0ducer".into());
    })
    .await;
    let a = w.admin.as_str();
    let hooks = "/v1/hooks/acme/orders";
    assert_eq!(
        ingest(a, hooks, Some("pr0ducer"), &[], b"{}".to_vec())
            .await
            .0,
        202
    );
    assert_eq!(
        ingest(
            a,
            hooks,
            Some("adm1n-0123456789abcdefghijklmnopqrstuv"),
            &[],
            b"{}".to_vec()
        )
        .await
        .0,
        202
    );
    for wrong in [None, Some("pr0duce"), Some("adm1n pr0ducer")] {
        let (status, body) = ingest(a, hooks, wrong, &[], b"{}".to_vec()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("unauthorized"))
        );
    }
    for path in ["/admin/state", "/admin/pressure", "/admin/dlq"] {
        assert_eq!(status_of(a, path, Some("pr0ducer")).await, 401, "{path}");
        assert_eq!(status_of(a, path, None).await, 401, "{path}");
    }
    assert_eq!(
        status_of(
            a,
            "/admin/state",
            Some("adm1n-0123456789abcdefghijklmnopqrstuv")
        )
        .await,
        200
    );
    // Health, readiness and metrics stay open, for probes and Prometheus.
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(status_of(a, path, None).await, 200, "{path}");
    }
    tick(a, Some("adm1n-0123456789abcdefghijklmnopqrstuv")).await;
    assert!(
        env.receiver
            .wait_until(LIVENESS, |r| r.iter().filter(|r| r.path == "in").count()
                == 2),
        "both hooks delivered: {:?}",
        env.receiver.requests()
    );
    assert_eq!(env.store.totals().await.unwrap().committed, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_body_over_max_hook_bytes_is_413_too_large_and_commits_nothing() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| c.commit.max_hook_bytes = 1024).await;
    let a = w.admin.as_str();
    let hooks = "/v1/hooks/acme/orders";
    let (status, body) = ingest(a, hooks, None, &[], vec![b'a'; 1025]).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "too_large", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("commit.max_hook_bytes = 1024"),
        "{body}"
    );
    // Chunked, so no content-length announces the size: still refused, as JSON.
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(LIVENESS)).unwrap();
    write!(
        s,
        "POST {hooks} HTTP/1.1\r\nhost: {a}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    for _ in 0..3 {
        write!(s, "200\r\n{}\r\n", "b".repeat(0x200)).unwrap();
    }
    let _ = write!(s, "0\r\n\r\n");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"too_large\""), "{answer}");
    assert_eq!(env.store.totals().await.unwrap().committed, 0);
    let hooks_prefix = env.key("hook:");
    assert!(
        env.keys().iter().all(|k| !k.starts_with(&hooks_prefix)),
        "{:?}",
        env.keys()
    );
    // The limit itself is accepted.
    assert_eq!(ingest(a, hooks, None, &[], vec![b'a'; 1024]).await.0, 202);
    assert_eq!(env.store.totals().await.unwrap().committed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_forwarded_headers_sent_to_ingest_reach_the_receiver_never_credentials() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| {
        c.admin.ingest_token = Some("pr0ducer".into())
    })
    .await;
    let a = w.admin.as_str();
    let hooks = "/v1/hooks/acme/orders";
    let sent = [
        ("cookie", "session=s3cret"),
        ("proxy-authorization", "Basic c3VwZXI6c2VjcmV0"),
        ("x-api-key", "k3y"),
        ("x-auth-token", "t0ken"),
        ("x-forwarded-for", "203.0.113.7"),
        ("x-forwarded-host", "edge.example"),
        ("x-real-ip", "203.0.113.7"),
        ("forwarded", "for=203.0.113.7"),
        ("via", "1.1 edge"),
        ("x-private-key", "pr1vate"),
        ("x-jwt", "eyJhbGciOi"),
        ("x-acme-note", "n0te"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("x-event-type", "order.created"),
        ("content-type", "application/json"),
    ];
    let (status, body) = ingest(a, hooks, Some("pr0ducer"), &sent, b"{\"n\":1}".to_vec()).await;
    assert_eq!(status, 202, "{body}");
    // The answer names what the hook did not keep, never the credentials it never keeps.
    let dropped: Vec<&str> = body["dropped_headers"]
        .as_array()
        .expect("dropped headers listed")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for name in ["x-api-key", "x-acme-note", "traceparent", "via"] {
        assert!(dropped.contains(&name), "{name}: {body}");
    }
    for name in [
        "cookie",
        "proxy-authorization",
        "authorization",
        "x-event-type",
        "content-type",
    ] {
        assert!(!dropped.contains(&name), "{name}: {body}");
    }
    // A reserved header is refused, naming it, and nothing is committed.
    for reserved in ["webhook-id", "ankusa-tenant"] {
        let (status, body) = ingest(
            a,
            hooks,
            Some("pr0ducer"),
            &[(reserved, "forged")],
            b"{}".to_vec(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "bad_request");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(reserved),
            "{body}"
        );
    }
    assert_eq!(env.store.totals().await.unwrap().committed, 1);
    tick(a, None).await;
    assert!(env.receiver.wait_until(LIVENESS, |r| !r.is_empty()));
    let got = env.receiver.requests_for("/in");
    assert_eq!(got.len(), 1, "{got:?}");
    let r = &got[0];
    for (name, value) in &got[0].headers {
        for secret in [
            "pr0ducer",
            "s3cret",
            "c3VwZXI6c2VjcmV0",
            "k3y",
            "t0ken",
            "203.0.113.7",
            "edge",
            "pr1vate",
            "eyJhbGciOi",
            "n0te",
            "0af7651916cd43dd8448eb211c80319c",
        ] {
            assert!(
                !value.contains(secret),
                "{name}: {value} reached the receiver"
            );
        }
    }
    for name in [
        "authorization",
        "cookie",
        "proxy-authorization",
        "x-api-key",
        "x-auth-token",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-real-ip",
        "forwarded",
        "via",
        "x-private-key",
        "x-jwt",
        "x-acme-note",
    ] {
        assert_eq!(r.header(name), None, "{name} reached the receiver");
    }
    assert_eq!(r.header("x-event-type"), Some("order.created"));
    assert_eq!(r.header("content-type"), Some("application/json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_forward_headers_and_prefixes_reach_the_receiver_and_nothing_else_does() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |c| {
        c.admin.forward_headers = vec![
            "content-type".into(),
            "x-acme-*".into(),
            "traceparent".into(),
        ];
    })
    .await;
    let a = w.admin.as_str();
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (status, body) = ingest(
        a,
        "/v1/hooks/acme/orders",
        None,
        &[
            ("content-type", "application/json"),
            ("x-acme-order", "42"),
            ("x-acme-region", "eu"),
            ("traceparent", trace),
            ("x-event-type", "order.created"),
            ("user-agent", "producer/1"),
            ("cookie", "session=s3cret"),
        ],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    tick(a, None).await;
    assert!(env.receiver.wait_until(LIVENESS, |r| !r.is_empty()));
    let got = env.receiver.requests_for("/in");
    let r = &got[0];
    assert_eq!(r.header("x-acme-order"), Some("42"));
    assert_eq!(r.header("x-acme-region"), Some("eu"));
    assert_eq!(r.header("traceparent"), Some(trace));
    assert_eq!(r.header("x-event-type"), None, "not listed");
    assert_ne!(r.header("user-agent"), Some("producer/1"), "not listed");
    assert_eq!(r.header("cookie"), None);
    // A list naming a credential or a reserved header is refused, naming the entry.
    let bad = write_config(&env, &dir, "bad.toml", |_| {});
    let text = std::fs::read_to_string(&bad).unwrap().replace(
        "forward_headers = [",
        "forward_headers = [\"authorization\", \"webhook-id\", \"*\", ",
    );
    std::fs::write(&bad, text).unwrap();
    let (code, stderr) = run_to_exit(&["config", "check", bad.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(2), "{stderr}");
    for key in [
        "admin.forward_headers[0]",
        "admin.forward_headers[1]",
        "admin.forward_headers[2]",
    ] {
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
}

/// Every route of the served document, with a sample path (`{…}` filled) and its method.
async fn every_route(admin: &str) -> Vec<(String, String)> {
    let (status, doc) = get(admin, "/openapi.json").await.expect("the document");
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&doc).unwrap();
    let mut routes = vec![("GET".to_string(), "/openapi.json".to_string())];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let filled = path
                .replace("{tenant}", "acme")
                .replace("{source}", "orders")
                .replace("{hook}", "1")
                .replace("{index}", "0")
                .replace("{id}", "0-1");
            routes.push((method.to_ascii_uppercase(), filled));
        }
    }
    assert!(routes.len() > 20, "{routes:?}");
    routes
}

/// `method path` with `headers` (no token): `(status, error code)`.
async fn refused(admin: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = http()
        .request(method.parse().unwrap(), format!("http://{admin}{path}"))
        .timeout(LIVENESS)
        .header("content-type", "text/plain")
        .body("{}");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await.expect("answers");
    let status = resp.status().as_u16();
    let body: Value =
        serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or(Value::Null);
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_or_a_cross_site_request_is_refused_on_every_route_even_without_a_token() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    // No admin.token: the API is open on loopback, so every refusal below is the browser guard's.
    let w = worker(&env, &dir, |c| {
        c.admin.public_hosts = vec!["worker.internal".into()]
    })
    .await;
    let a = w.admin.as_str();
    let port = a.rsplit(':').next().unwrap();
    let rebound = format!("evil.example:{port}");
    for (method, path) in every_route(a).await {
        let what = format!("{method} {path}");
        assert_eq!(
            refused(a, &method, &path, &[("host", &rebound)]).await,
            (403, "untrusted_host".into()),
            "{what}: DNS rebinding"
        );
        for cross in [
            [("origin", "http://evil.example")],
            [("origin", "null")],
            [("sec-fetch-site", "cross-site")],
            [("sec-fetch-site", "same-site")],
        ] {
            assert_eq!(
                refused(a, &method, &path, &cross).await,
                (403, "cross_site".into()),
                "{what}: {cross:?}"
            );
        }
    }
    // A page's text/plain form post to ingest or tick commits and ticks nothing.
    for path in ["/v1/hooks/acme/orders", "/admin/tick"] {
        let (status, code) = refused(
            a,
            "POST",
            path,
            &[
                ("origin", "http://evil.example"),
                ("sec-fetch-site", "cross-site"),
            ],
        )
        .await;
        assert_eq!((status, code.as_str()), (403, "cross_site"), "{path}");
    }
    assert_eq!(env.store.totals().await.unwrap().committed, 0);
    // What the worker answers to: IP literals, localhost, the listed name, same-origin pages.
    for host in [
        a.to_string(),
        format!("localhost:{port}"),
        format!("worker.internal:{port}"),
        format!("[::1]:{port}"),
    ] {
        let origin = format!("http://{host}");
        let (status, code) = refused(
            a,
            "GET",
            "/healthz",
            &[
                ("host", &host),
                ("origin", &origin),
                ("sec-fetch-site", "same-origin"),
            ],
        )
        .await;
        assert_eq!(status, 200, "{host}: {code}");
    }
    let (status, _) = refused(
        a,
        "POST",
        "/v1/hooks/acme/orders",
        &[("origin", &format!("http://{a}"))],
    )
    .await;
    assert_eq!(status, 202, "a same-origin post is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_on_a_header_ingest_does_not_keep_is_stored_with_a_warning_from_the_api_and_the_cli(
) {
    let env = Env::new().await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |_| {}).await;
    let spec = |header: &str| {
        serde_json::json!({"sinks": [{"module": "http",
            "opts": {"url": env.receiver.url("a")},
            "filter": {"match": {"any": [{"header": header, "eq": "eu"}, {"body": "/n", "lt": 5}]}}}]})
        .to_string()
    };
    let url = format!("http://{}/admin/sources/acme/regional", w.admin);
    let (status, v) =
        common::admin_call(reqwest::Method::PUT, &url, None, Some(spec("X-Region"))).await;
    assert_eq!(status, 200, "{v}");
    let warnings = v["warnings"].as_array().expect("warnings listed");
    assert_eq!(warnings.len(), 1, "{v}");
    let w0 = warnings[0].as_str().unwrap();
    assert!(
        w0.contains("sinks[0].filter")
            && w0.contains("\"x-region\"")
            && w0.contains("admin.forward_headers"),
        "{w0}"
    );
    // A header ingest keeps by default: no warning.
    let (status, v) =
        common::admin_call(reqwest::Method::PUT, &url, None, Some(spec("x-event-type"))).await;
    assert_eq!(status, 200, "{v}");
    assert!(v.get("warnings").is_none(), "{v}");
    // The CLI stores it too, and says so on stderr.
    let config = write_config(&env, &dir, "cli.toml", |_| {});
    let file = dir.path().join("regional.json");
    std::fs::write(&file, spec("x-region")).unwrap();
    let (code, _, err) = env
        .cli_with(
            Some(&config),
            &["source", "put", "acme", "regional", file.to_str().unwrap()],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: sinks[0].filter reads header \"x-region\""),
        "{err}"
    );
    // A route asked with a method it does not answer: a JSON 405, like every other error.
    let (status, v) = common::admin_call(
        reqwest::Method::GET,
        format!("http://{}/admin/tick", w.admin),
        None,
        None,
    )
    .await;
    assert_eq!(status, 405, "{v}");
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
}

/// The API refuses what `ankusa source put` and `ankusa produce` refuse as most likely a
/// mistake — a source with no sinks, an empty body — unless asked for, as the CLI's flags
/// ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_with_no_sinks_and_an_empty_ingest_body_are_refused_unless_asked_for() {
    let env = Env::new().await;
    env.http_source("acme", "orders", &["in"]).await;
    let dir = tempfile::tempdir().unwrap();
    let w = worker(&env, &dir, |_| {}).await;
    let a = w.admin.as_str();
    let empty = || Some(r#"{"sinks": []}"#.to_string());
    let url = format!("http://{a}/admin/sources/acme/nowhere");
    let (status, v) = common::admin_call(reqwest::Method::PUT, &url, None, empty()).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "bad_request", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("no sinks") && msg.contains("allow_no_sinks=true"),
        "{msg}"
    );
    let (status, _) = common::admin_call(reqwest::Method::GET, url.as_str(), None, None).await;
    assert_eq!(status, 404, "nothing stored");
    let (status, v) = common::admin_call(
        reqwest::Method::PUT,
        format!("{url}?allow_no_sinks=true"),
        None,
        empty(),
    )
    .await;
    assert_eq!((status, v["sinks"].as_u64()), (200, Some(0)), "{v}");

    let hooks = "/v1/hooks/acme/orders";
    let (status, v) = ingest(a, hooks, None, &[], Vec::new()).await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("empty body") && msg.contains("allow_empty=true"),
        "{msg}"
    );
    assert_eq!(env.store.totals().await.unwrap().committed, 0);
    let (status, v) = ingest(
        a,
        &format!("{hooks}?allow_empty=true"),
        None,
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(status, 202, "{v}");
    assert_eq!(env.store.totals().await.unwrap().committed, 1);
    // An unknown query parameter is a clear 400, not ignored.
    let (status, v) = ingest(a, &format!("{hooks}?allow=1"), None, &[], b"{}".to_vec()).await;
    assert_eq!(status, 400, "{v}");
}
