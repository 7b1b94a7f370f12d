//! The egress guard on the batching sinks (`docs/security.md`, "Egress"): SQS, Pub/Sub,
//! Kinesis and EventBridge endpoints a tenant names go through the same address guard as the http sink, their
//! answers are read only up to a few KiB, custom endpoints need the operator's
//! `tenants.<id>.custom_endpoints`, and the worker's own cloud credentials publish only to
//! the queues and topics of `tenants.<id>.ambient_credentials`.
//!
//! This binary never sets `PUBSUB_EMULATOR_HOST`: a Pub/Sub entry without an endpoint here
//! is one that would use the metadata server's token.
use crate::common;
use crate::common_sinks;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::sinks::guard::{AddressPolicy, EgressGrant};
use ankusa::sinks::EdgePolicy;
use ankusa::testkit::{Receiver, ReceiverOptions};
use common::procs::{poll_until, spawn_worker};
use common::{Env, LIVENESS};
use common_sinks::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn entry(module: &str, opts: serde_json::Value) -> SinkEntry {
    SinkEntry {
        module: module.into(),
        opts: opts.as_object().cloned().expect("an object"),
        ..Default::default()
    }
}

/// An `sqs` entry with static (moto-style) credentials sending through `endpoint`.
fn sqs_at(endpoint: &str) -> SinkEntry {
    entry(
        "sqs",
        serde_json::json!({
            "queue_url": format!("{endpoint}/123456789012/q"),
            "endpoint_url": endpoint,
            "region": REGION,
            "access_key_id": KEY,
            "secret_access_key": KEY,
        }),
    )
}

/// A `kinesis` entry with static (moto-style) credentials putting through `endpoint`.
fn kinesis_at(endpoint: &str) -> SinkEntry {
    kinesis_entry(endpoint, "stream", serde_json::json!({}))
}

/// An `eventbridge` entry with static (moto-style) credentials putting through `endpoint`.
fn eventbridge_at(endpoint: &str) -> SinkEntry {
    eventbridge_entry(endpoint, "bus", "acme.test", serde_json::json!({}))
}

/// A `pubsub` entry publishing to `endpoint` without credentials (an emulator's way).
fn pubsub_at(endpoint: &str) -> SinkEntry {
    entry(
        "pubsub",
        serde_json::json!({"topic": "projects/p/topics/t", "endpoint": endpoint, "no_auth": true}),
    )
}

/// A store over `env`'s Redis that writes specs without any guard or grant check, as an
/// older version (or a hand-written spec) did: the worker must refuse them on its own.
async fn unguarded_store(env: &Env) -> ankusa::store::Store {
    let edge = EdgePolicy {
        addresses: Arc::new(AddressPolicy {
            deny_private: false,
            allow: vec![],
        }),
        // Everything granted to the tenants the tests store for, so only the worker's own
        // checks (under its config) stand between a stored spec and a request.
        grants: Arc::new(
            ["acme", "beta"]
                .into_iter()
                .map(|t| {
                    let everything = EgressGrant {
                        custom_endpoints: true,
                        ambient_credentials: vec!["arn:aws:sqs:*".into(), "projects/*".into()],
                    };
                    (t.to_string(), everything)
                })
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    };
    ankusa::store::Store::connect(&env.redis.url(), &env.config.instance, 5_000)
        .await
        .expect("store connects")
        .with_edge(edge)
}

fn receivers() -> (Receiver, Receiver) {
    let opts = || ReceiverOptions {
        record_bodies: false,
        threads: 1,
    };
    let v4 = Receiver::start_with(opts()).unwrap();
    let v6 = Receiver::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0)), opts()).unwrap();
    (v4, v6)
}

/// Every non-public endpoint form of the tests: (endpoint, what the refusal names).
fn blocked_endpoints(v4: u16, v6: u16) -> Vec<(String, &'static str)> {
    vec![
        (format!("http://127.0.0.1:{v4}"), "127.0.0.1"),
        (format!("http://[::1]:{v6}"), "::1"),
        ("http://169.254.169.254".to_string(), "169.254.169.254"),
        (format!("http://localhost:{v4}"), "for host localhost"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_and_pubsub_endpoints_on_loopback_and_the_metadata_address_are_refused_with_no_request_reaching_them(
) {
    // The default address guard (no allow_cidrs); custom endpoints granted, so only the
    // address guard stands in the way.
    let env = Env::tuned(|c: &mut Config| {
        c.http.allow_cidrs.clear();
        grant_custom_endpoints(c, &["acme"]);
    })
    .await;
    let (v4, v6) = receivers();
    let forms = blocked_endpoints(v4.port(), v6.port());

    // At source put: every literal address is refused, naming it and the config key.
    for (endpoint, addr) in forms.iter().filter(|(e, _)| !e.contains("localhost")) {
        for sink in [
            sqs_at(endpoint),
            pubsub_at(endpoint),
            kinesis_at(endpoint),
            eventbridge_at(endpoint),
        ] {
            let module = sink.module.clone();
            let spec = SourceSpec { sinks: vec![sink] };
            let e = env
                .store
                .put_source("acme", "s", &spec)
                .await
                .expect_err(endpoint)
                .to_string();
            assert!(
                e.contains("blocked address") && e.contains(addr) && e.contains("http.allow_cidrs"),
                "{module} {endpoint}: {e}"
            );
        }
    }

    // At attempt time: the same specs stored without the guard (and a name resolving to
    // loopback, which only the resolver sees) are dead-lettered, never sent.
    let store = unguarded_store(&env).await;
    let mut sources = Vec::new();
    for (i, (endpoint, addr)) in forms.iter().enumerate() {
        for sink in [
            sqs_at(endpoint),
            pubsub_at(endpoint),
            kinesis_at(endpoint),
            eventbridge_at(endpoint),
        ] {
            let source = format!("{}{i}", sink.module);
            let spec = SourceSpec { sinks: vec![sink] };
            store.put_source("acme", &source, &spec).await.unwrap();
            env.commit("acme", &source, "{}").await;
            sources.push((source, endpoint.clone(), *addr));
        }
    }
    let worker = env.worker().await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), sources.len(), "{dead:#?}");
    for (source, endpoint, addr) in &sources {
        let d = dead
            .iter()
            .find(|d| &d.source == source)
            .unwrap_or_else(|| panic!("no dead letter for {source} {endpoint}"));
        assert!(
            d.reason.starts_with("permanent(")
                && d.reason.contains("blocked address")
                && d.reason.contains(addr),
            "{source} {endpoint}: {}",
            d.reason
        );
        assert_eq!(d.attempts, 1, "{source}: a blocked address is not retried");
    }
    assert_eq!(v4.count() + v6.count(), 0, "no request reached a receiver");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_endpoints_are_refused_for_a_tenant_without_the_grant_at_put_and_at_attempt_time() {
    // Loopback is exempt (test config), so only the missing grant refuses.
    let env = Env::tuned(|c: &mut Config| grant_custom_endpoints(c, &["granted"])).await;
    let r = Receiver::start_with(ReceiverOptions {
        record_bodies: false,
        threads: 1,
    })
    .unwrap();
    let endpoint = format!("http://127.0.0.1:{}", r.port());
    for (sink, field) in [
        (sqs_at(&endpoint), "endpoint_url"),
        (pubsub_at(&endpoint), "endpoint"),
        (kinesis_at(&endpoint), "endpoint_url"),
        (eventbridge_at(&endpoint), "endpoint_url"),
    ] {
        let spec = SourceSpec { sinks: vec![sink] };
        let e = env
            .store
            .put_source("acme", "s", &spec)
            .await
            .expect_err("no grant")
            .to_string();
        assert!(
            e.contains(&format!("sinks[0].opts: {field}: custom endpoints are off"))
                && e.contains("tenants.acme.custom_endpoints = true"),
            "{e}"
        );
        // The granted tenant may.
        env.store.put_source("granted", "s", &spec).await.unwrap();
    }
    // A source stored before the grants existed is refused when it is attempted.
    let store = unguarded_store(&env).await;
    for sink in [
        sqs_at(&endpoint),
        pubsub_at(&endpoint),
        kinesis_at(&endpoint),
        eventbridge_at(&endpoint),
    ] {
        let source = sink.module.clone();
        let spec = SourceSpec { sinks: vec![sink] };
        store.put_source("acme", &source, &spec).await.unwrap();
        env.commit("acme", &source, "{}").await;
    }
    let worker = env.worker().await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 4, "{dead:#?}");
    for d in &dead {
        assert!(
            d.reason.starts_with(&format!("permanent({}: ", d.module))
                && d.reason.contains("tenants.acme.custom_endpoints"),
            "{}",
            d.reason
        );
    }
    assert_eq!(r.count(), 0, "no request reached the endpoint");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambient_credentials_are_refused_for_a_tenant_without_the_grant() {
    let env = Env::tuned(|c: &mut Config| {
        let t = c.tenants.entry("granted".into()).or_default();
        t.ambient_credentials = vec![
            "arn:aws:sqs:eu-west-1:123456789012:granted-*".into(),
            "projects/p/topics/granted".into(),
        ];
    })
    .await;
    // No keys: the worker's AWS credential chain would sign. No endpoint, no token: the
    // metadata server's token would be sent.
    let sqs = |queue: &str| {
        entry(
            "sqs",
            serde_json::json!({"queue_url": format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{queue}")}),
        )
    };
    let pubsub = |topic: &str| {
        entry(
            "pubsub",
            serde_json::json!({ "topic": format!("projects/p/topics/{topic}") }),
        )
    };
    let put = |tenant: &'static str, sink: SinkEntry| {
        let store = env.store.clone();
        async move {
            store
                .put_source(tenant, "s", &SourceSpec { sinks: vec![sink] })
                .await
                .map_err(|e| e.to_string())
        }
    };
    for (sink, resource) in [
        (
            sqs("granted-orders"),
            "arn:aws:sqs:eu-west-1:123456789012:granted-orders",
        ),
        (pubsub("granted"), "projects/p/topics/granted"),
    ] {
        let e = put("acme", sink.clone()).await.expect_err("no grant");
        assert!(
            e.contains("tenants.acme.ambient_credentials") && e.contains(resource),
            "{e}"
        );
        put("granted", sink).await.expect("granted");
    }
    // The grant names queues and topics, not everything the identity may reach.
    for sink in [sqs("other"), pubsub("other")] {
        let e = put("granted", sink).await.expect_err("not granted");
        assert!(e.contains("tenants.granted.ambient_credentials"), "{e}");
    }
    // A granted queue name in another region is another queue.
    let mut elsewhere = sqs("granted-orders");
    elsewhere.opts.insert("region".into(), "us-east-1".into());
    let e = put("granted", elsewhere).await.expect_err("region");
    assert!(e.contains("signing region"), "{e}");
    // With its own credentials by reference, no grant is needed.
    let mut own = sqs("anything");
    own.opts.insert(
        "access_key_id".into(),
        "${env:ANKUSA_SECRET_ACME__K}".into(),
    );
    own.opts.insert(
        "secret_access_key".into(),
        "${env:ANKUSA_SECRET_ACME__S}".into(),
    );
    put("acme", own).await.expect("own credentials");

    // Stored without the check (an older version): refused at attempt time, never signed.
    let store = unguarded_store(&env).await;
    let worker = env.worker().await;
    for (source, sink) in [("q", sqs("orders")), ("t", pubsub("orders"))] {
        // The worker's config grants tenant `beta` nothing.
        store
            .put_source("beta", source, &SourceSpec { sinks: vec![sink] })
            .await
            .unwrap();
        env.commit("beta", source, "{}").await;
    }
    env.drain(&worker).await;
    let dead = env.dead_letters("beta").await;
    assert_eq!(dead.len(), 2, "{dead:#?}");
    for d in &dead {
        assert!(
            d.reason.starts_with("permanent(")
                && d.reason.contains("tenants.beta.ambient_credentials"),
            "{}",
            d.reason
        );
        assert_eq!(d.attempts, 1);
    }
    worker.shutdown().await;
}

/// A raw HTTP server answering every request `status` with an endless chunked body, counting
/// requests; the body is written until the client goes away.
fn endless_server(status: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = ankusa::testkit::listen_loopback().unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                if std::io::Read::read_exact(&mut r, &mut body).is_err() {
                    return;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                if conn.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                while conn.write_all(&frame).is_ok() {}
            });
        }
    });
    (port, served)
}

/// The peak resident set of process `pid`, KiB (`VmHWM`): what it ever held, not only now.
fn peak_rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_200_and_500_answers_on_sqs_and_pubsub_endpoints_keep_the_worker_under_100_mb() {
    let env = Env::tuned(|c: &mut Config| grant_custom_endpoints(c, &["acme"])).await;
    let servers = [
        ("sqs", 200, endless_server(200)),
        ("sqs", 500, endless_server(500)),
        ("pubsub", 200, endless_server(200)),
        ("pubsub", 500, endless_server(500)),
    ];
    for (i, (module, _, (port, _))) in servers.iter().enumerate() {
        let endpoint = format!("http://127.0.0.1:{port}");
        let sink = match *module {
            "sqs" => sqs_at(&endpoint),
            _ => pubsub_at(&endpoint),
        };
        env.put_source("acme", &format!("s{i}"), vec![sink]).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |_| {});
    let worker = spawn_worker(&config, &dir, "endless", &[], &[]);
    let mut rows = Vec::new();
    for (i, (module, status, _)) in servers.iter().enumerate() {
        for n in 0..3 {
            let hook = env
                .commit("acme", &format!("s{i}"), format!("{{\"n\":{n}}}"))
                .await;
            rows.push((*module, *status, format!("{hook}.0")));
        }
    }
    // Every failing endpoint is retried a few times; the 200 on Pub/Sub is a success (its
    // body is drained up to a few KiB and dropped), so it is asked at least once.
    let want = |module: &str, status: u16| match (module, status) {
        ("pubsub", 200) => 1,
        _ => 3,
    };
    let served = || {
        servers
            .iter()
            .map(|(m, s, (_, n))| (*m, *s, n.load(Ordering::SeqCst)))
            .collect::<Vec<_>>()
    };
    let enough = poll_until(LIVENESS, || {
        let ok = servers
            .iter()
            .all(|(m, s, (_, n))| n.load(Ordering::SeqCst) >= want(m, *s));
        async move { ok }
    })
    .await;
    assert!(
        enough,
        "requests served {:?}; log:\n{}",
        served(),
        worker.log_text()
    );
    let peak = peak_rss_kib(worker.pid()).expect("the worker runs");
    eprintln!(
        "endless answers: requests {:?}, worker peak RSS {peak} KiB",
        served()
    );
    assert!(peak < 100 * 1024, "worker peak RSS {peak} KiB");
    // What a tenant sees of an endless answer: a bounded error that says so (polled: a
    // row's error is written when its request's outcome is settled).
    let failing: Vec<_> = rows
        .iter()
        .filter(|(m, s, _)| *m == "sqs" || *s == 500)
        .collect();
    let marker = |module: &str, status: u16| match module {
        "sqs" => format!("answer http {status} longer than 16384 bytes"),
        _ => "pubsub http 500: xxxx".to_string(),
    };
    let explained = poll_until(LIVENESS, || {
        let ok = failing.iter().all(|(m, s, row)| {
            env.row_field(row, "e")
                .is_some_and(|e| e.contains(&marker(m, *s)) && e.len() <= 1024)
        });
        async move { ok }
    })
    .await;
    let errors: Vec<_> = failing
        .iter()
        .map(|(m, s, row)| (m, s, env.row_field(row, "e")))
        .collect();
    assert!(explained, "row errors: {errors:#?}");
}

#[test]
fn ambient_grants_are_validated_naming_the_key() {
    let problems = |toml: &str| match Config::from_toml_str(toml) {
        Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        Ok(_) => Vec::<String>::new(),
    };
    assert!(problems(
        "[tenants.acme]\ncustom_endpoints = true\nambient_credentials = [\"arn:aws:sqs:eu-west-1:123456789012:q-*\", \"projects/p/topics/t\"]\n"
    )
    .is_empty());
    let found = problems("[tenants.acme]\nambient_credentials = [\"*\", \"arn:aws:sqs:*\"]\n");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("tenants.acme.ambient_credentials[0]: "),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("tenants.acme.ambient_credentials[1]: "),
        "{found:?}"
    );
    let found = problems("[tenants.\"a b\"]\ncustom_endpoints = true\n");
    assert_eq!(
        found,
        ["tenants.a b: tenant id must match [A-Za-z0-9_.-]{1,128}"]
    );
}
