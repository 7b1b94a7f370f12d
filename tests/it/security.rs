//! The trusted edge, end to end (`docs/security.md`): Standard Webhooks signatures
//! checked by the reference library, the SSRF guard in every loopback spelling, hostile
//! answers against a worker process's memory, and secrets that never leave the worker.
use crate::common;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::secrets::SecretPolicy;
use ankusa::sinks::guard::AddressPolicy;
use ankusa::sinks::EdgePolicy;
use ankusa::testkit::{Receiver, ReceiverOptions};
use ankusa::Hook;
use common::procs::{poll_until, rss_kib, spawn_worker};
use common::{Env, LIVENESS};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv6Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRET_B: &str = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdA==";

fn http_entry(opts: serde_json::Value) -> SinkEntry {
    SinkEntry {
        module: "http".into(),
        opts: opts.as_object().cloned().unwrap(),
        ordered: false,
        key: None,
        ..Default::default()
    }
}

/// A store over `env`'s Redis that writes specs without the guards, as an older version or
/// a hand-written spec would (no address guard; tenant `acme` may name the worker's own
/// `ANKUSA_ADMIN__TOKEN`): the worker must refuse them at attempt time on its own.
async fn unguarded_store(env: &Env) -> ankusa::store::Store {
    let grants = [("acme".to_string(), vec!["ANKUSA_ADMIN__TOKEN".to_string()])];
    let edge = EdgePolicy {
        addresses: Arc::new(AddressPolicy {
            deny_private: false,
            allow: vec![],
        }),
        secrets: SecretPolicy {
            env_prefix: "ANKUSA_".into(),
            shared: Arc::new(grants.into_iter().collect()),
            ..SecretPolicy::default()
        },
        ..EdgePolicy::default()
    };
    ankusa::store::Store::connect(&env.redis.url(), &env.config.instance, 5_000)
        .await
        .expect("store connects")
        .with_edge(edge)
}

/// The Python receiver of `tests/fixtures/sw_receiver.py`, killed on drop.
struct PyReceiver {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PyReceiver {
    fn start(secrets: &[&str]) -> PyReceiver {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("requests.jsonl");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sw_receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&log)
            .args(secrets)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (the standardwebhooks package is installed by .ci/run)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("receiver did not start: {line:?}"));
        PyReceiver {
            child,
            port,
            log,
            _dir: dir,
        }
    }
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }
    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for PyReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_of_twenty_hooks_verifies_with_the_standardwebhooks_package_under_either_rotated_secret(
) {
    std::env::set_var("ANKUSA_SECRET_ACME__SECURITY_SIGN_B", SECRET_B);
    // Every first attempt is answered 500 by design: with breakers on, 5 of them in a row
    // open the key's breaker and park the other rows for its 5 s open period, doubling
    // (seen: all 20 rows parked past the drain's 30 s). This test is about signatures.
    let env = Env::tuned(|c| c.dispatch.breaker_failures = 0).await;
    let rx = PyReceiver::start(&[SECRET_A, SECRET_B]);
    let spec = SourceSpec {
        sinks: vec![http_entry(serde_json::json!({
            "url": rx.url("signed"),
            "signing_secret": [SECRET_A, "${env:ANKUSA_SECRET_ACME__SECURITY_SIGN_B}"],
        }))],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let worker = env.worker().await;
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for i in 0..20 {
        env.producer
            .commit(
                "acme",
                "s",
                Hook::new(format!("{{\"n\":{i},\"text\":\"é\"}}")),
            )
            .await
            .unwrap();
    }
    env.drain(&worker).await;
    let reqs = rx.requests();
    // every hook: a first attempt answered 500, a signed retry answered 204
    assert_eq!(reqs.len(), 40, "{reqs:#?}");
    let mut per_id = std::collections::HashMap::<String, Vec<&serde_json::Value>>::new();
    for r in &reqs {
        per_id
            .entry(r["webhook_id"].as_str().unwrap().to_string())
            .or_default()
            .push(r);
        assert_eq!(r["verified"], serde_json::json!([true, true]), "{r}");
        assert_eq!(r["tampered"], serde_json::json!([false, false]), "{r}");
        let sig = r["signature"].as_str().unwrap();
        assert_eq!(
            sig.split(' ').count(),
            2,
            "one v1 signature per secret: {sig}"
        );
        let ts: u64 = r["timestamp"].as_str().unwrap().parse().unwrap();
        assert!(ts + 1 >= started, "timestamp {ts} is the attempt's time");
    }
    assert_eq!(
        per_id.len(),
        20,
        "webhook-id is stable per row across retries"
    );
    for (id, rs) in per_id {
        let attempts: Vec<&str> = rs.iter().map(|r| r["attempt"].as_str().unwrap()).collect();
        assert_eq!(attempts, ["1", "2"], "{id}");
    }
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_cannot_set_webhook_or_ankusa_headers() {
    let env = Env::new().await;
    env.http_source("acme", "s", &["a"]).await;
    for name in [
        "webhook-signature",
        "Webhook-Id",
        "ankusa-tenant",
        "ANKUSA-x",
    ] {
        let e = env
            .producer
            .commit("acme", "s", Hook::new("{}").header(name, "forged"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
        assert!(
            matches!(e, ankusa::store::CommitError::ReservedHeader { .. }),
            "{e:?}"
        );
    }
    // The script refuses them too, for producers in any language (the Rust check skipped).
    let e = env
        .store
        .commit(
            "acme",
            "s",
            &[
                ("{}".into(), String::new()),
                (
                    "{}".into(),
                    r#"{"x-ok":"1","Webhook-Timestamp":"1"}"#.into(),
                ),
            ],
            1 << 20,
        )
        .await
        .unwrap_err();
    match e {
        ankusa::store::CommitError::ReservedHeader { index, name } => {
            assert_eq!((index, name.as_str()), (1, "Webhook-Timestamp"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(env.redis_cmd(&["GET", &env.key("seq")]), "(nil)");
}

/// Every spelling of loopback in a sink URL: (URL host, the address the dead letter names).
fn loopback_forms(v4: u16, v6: u16) -> Vec<(String, &'static str)> {
    vec![
        (format!("127.0.0.1:{v4}"), "127.0.0.1"),
        (format!("localhost:{v4}"), "for host localhost"),
        (format!("2130706433:{v4}"), "127.0.0.1"),
        (format!("0177.0.0.1:{v4}"), "127.0.0.1"),
        (format!("127.1:{v4}"), "127.0.0.1"),
        (format!("[::1]:{v6}"), "::1"),
        (format!("[::ffff:127.0.0.1]:{v4}"), "::ffff:127.0.0.1"),
    ]
}

/// Source `acme/f<i>` delivers to `http://<form i>/f<i>`, stored through `store`; one hook each.
async fn commit_to_each_form(
    env: &Env,
    store: &ankusa::store::Store,
    forms: &[(String, &'static str)],
) {
    for (i, (host, _)) in forms.iter().enumerate() {
        let spec = SourceSpec {
            sinks: vec![http_entry(
                serde_json::json!({"url": format!("http://{host}/f{i}")}),
            )],
        };
        store
            .put_source("acme", &format!("f{i}"), &spec)
            .await
            .unwrap();
        env.commit("acme", &format!("f{i}"), "{}").await;
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_loopback_spelling_is_refused_by_default_with_no_request_reaching_the_receiver() {
    let env = Env::tuned(|c: &mut Config| c.http.allow_cidrs.clear()).await;
    let (v4, v6) = receivers();
    let store = unguarded_store(&env).await;
    let forms = loopback_forms(v4.port(), v6.port());
    commit_to_each_form(&env, &store, &forms).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), forms.len(), "{dead:#?}");
    for (i, (host, addr)) in forms.iter().enumerate() {
        let d = dead
            .iter()
            .find(|d| d.source == format!("f{i}"))
            .unwrap_or_else(|| panic!("no dead letter for {host}"));
        assert!(
            d.reason.starts_with("permanent(blocked address") && d.reason.contains(addr),
            "{host}: {}",
            d.reason
        );
        assert_eq!(d.attempts, 1, "{host}: a blocked address is not retried");
    }
    assert_eq!(v4.count() + v6.count(), 0, "no request reached a receiver");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_loopback_spelling_is_delivered_when_loopback_is_in_allow_cidrs() {
    // test_config allows ["127.0.0.0/8", "::1/128"]
    let env = Env::new().await;
    let (v4, v6) = receivers();
    let forms = loopback_forms(v4.port(), v6.port());
    commit_to_each_form(&env, &env.store, &forms).await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    assert!(env.dead_letters("acme").await.is_empty());
    assert_eq!((v4.count(), v6.count()), (forms.len() - 1, 1));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_put_refuses_literal_non_public_addresses_naming_them() {
    let env = Env::new().await;
    for (url, addr) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254",
        ),
        ("http://10.0.0.1/h", "10.0.0.1"),
        ("https://[fd00::1]/h", "fd00::1"),
        ("http://100.64.0.1/h", "100.64.0.1"),
        ("http://0x7f000001/h", "127.0.0.1"),
    ] {
        let spec = SourceSpec {
            sinks: vec![http_entry(serde_json::json!({ "url": url }))],
        };
        // loopback is allowed in this env, these are not
        let e = env.store.put_source("acme", "s", &spec).await;
        if addr == "127.0.0.1" {
            assert!(e.is_ok(), "{url} is exempt by allow_cidrs");
            continue;
        }
        let e = e.unwrap_err().to_string();
        assert!(e.contains(&format!("blocked address {addr}")), "{url}: {e}");
    }
    for (opts, field) in [
        (serde_json::json!({"url": "ftp://x/"}), "url"),
        (
            serde_json::json!({"url": "${env:ANKUSA_REDIS__URL}"}),
            "secrets.env_prefix",
        ),
        (
            serde_json::json!({"url": "http://x/", "headers": {"webhook-id": "1"}}),
            "reserved",
        ),
        (
            serde_json::json!({"url": "http://x/", "signing_secret": "nope"}),
            "whsec_",
        ),
    ] {
        let spec = SourceSpec {
            sinks: vec![http_entry(opts.clone())],
        };
        let e = env.store.put_source("acme", "s", &spec).await.unwrap_err();
        assert!(e.to_string().contains(field), "{opts}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_resolving_to_a_blocked_address_is_refused_at_attempt_time() {
    let env = Env::tuned(|c: &mut Config| c.http.allow_cidrs = vec!["::1/128".into()]).await;
    let (v4, _v6) = receivers();
    // A name passes `source put` (its addresses are only known when resolved).
    let spec = SourceSpec {
        sinks: vec![http_entry(serde_json::json!({
            "url": format!("http://localhost:{}/n", v4.port())
        }))],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    env.commit("acme", "s", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .reason
            .contains("blocked address 127.0.0.1 (loopback) for host localhost"),
        "{}",
        dead[0].reason
    );
    assert_eq!(v4.count(), 0);
    worker.shutdown().await;
}

/// A raw HTTP server answering every request `200` with `body`, counting requests; the body
/// is written until done or until the client goes away.
fn hostile_server(kind: &'static str) -> (u16, Arc<AtomicUsize>) {
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
                let _ = std::io::Read::read_exact(&mut r, &mut body);
                counter.fetch_add(1, Ordering::SeqCst);
                let chunk = vec![b'x'; 64 * 1024];
                match kind {
                    "huge" => {
                        let total: usize = 512 << 20;
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
                        if conn.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        let mut sent = 0;
                        while sent < total {
                            if conn.write_all(&chunk).is_err() {
                                return;
                            }
                            sent += chunk.len();
                        }
                    }
                    _ => {
                        let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                        if conn.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        let frame =
                            [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                        while conn.write_all(&frame).is_ok() {}
                    }
                }
            });
        }
    });
    (port, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_endless_2xx_bodies_are_delivered_and_the_worker_stays_under_100_mb() {
    let env = Env::new().await;
    let (huge, huge_n) = hostile_server("huge");
    let (endless, endless_n) = hostile_server("endless");
    let spec = SourceSpec {
        sinks: vec![
            http_entry(serde_json::json!({"url": format!("http://127.0.0.1:{huge}/h")})),
            http_entry(serde_json::json!({"url": format!("http://127.0.0.1:{endless}/e")})),
        ],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |_| {});
    let worker = spawn_worker(&config, &dir, "hostile", &[], &[]);
    for i in 0..5 {
        env.commit("acme", "s", format!("{{\"n\":{i}}}")).await;
    }
    let mut max_rss = 0u64;
    let done = poll_until(LIVENESS, || {
        if let Some(kib) = rss_kib(worker.pid()) {
            max_rss = max_rss.max(kib);
        }
        let pending = env.pending_rows();
        async move { pending == 0 }
    })
    .await;
    assert!(done, "rows still pending; log:\n{}", worker.log_text());
    assert!(env.dead_letters("acme").await.is_empty());
    let totals = env.store.totals().await.unwrap();
    // Which way the rows left, before who saw them: dropped (their hook read as gone) or
    // delivered to someone else than these servers are different failures.
    assert_eq!(
        (totals.committed, totals.delivered, totals.dropped),
        (5, 10, 0),
        "{totals:?}; log:\n{}",
        worker.log_text()
    );
    assert_eq!(
        (
            huge_n.load(Ordering::SeqCst),
            endless_n.load(Ordering::SeqCst)
        ),
        (5, 5),
        "each hook delivered once to each sink, no retries; {totals:?}; log:\n{}",
        worker.log_text()
    );
    let rss = rss_kib(worker.pid()).unwrap_or(0).max(max_rss);
    assert!(rss < 100 * 1024, "worker RSS reached {rss} KiB");
    eprintln!("hostile bodies: worker max RSS {max_rss} KiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_own_settings_are_never_sent_and_resolved_secrets_never_reach_redis() {
    const ADMIN: &str = "admin-token-8f3a61c0d9e4b7a2f5e8c1d4b7a0e3f6";
    const QS: &str = "query-secret-b41c07";
    // Set in this process for its in-process worker; every worker process the tests spawn is
    // started without it (tests/it is one binary).
    std::env::set_var("ANKUSA_ADMIN__TOKEN", ADMIN);
    std::env::set_var("ANKUSA_SECRET_ACME__SECURITY_QS", QS);
    let env = Env::tuned(|c: &mut Config| c.retry.max_attempts = 2).await;
    // refused at source put
    let leak = SourceSpec {
        sinks: vec![http_entry(serde_json::json!({
            "url": env.receiver.url("leak"),
            "headers": {"authorization": "Bearer ${env:ANKUSA_ADMIN__TOKEN}"},
        }))],
    };
    let e = env
        .store
        .put_source("acme", "leak", &leak)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("secrets.env_prefix"), "{e}");
    // and at attempt time, when written past the check
    unguarded_store(&env)
        .await
        .put_source("acme", "leak", &leak)
        .await
        .unwrap();
    // a query-string secret to an endpoint that refuses connections, and to one answering 503
    let closed = common::free_port();
    let qs = SourceSpec {
        sinks: vec![
            http_entry(serde_json::json!({
                "url": format!("http://u:${{env:ANKUSA_SECRET_ACME__SECURITY_QS}}@127.0.0.1:{closed}/x?token=${{env:ANKUSA_SECRET_ACME__SECURITY_QS}}")
            })),
            http_entry(serde_json::json!({
                "url": format!("{}?token=${{env:ANKUSA_SECRET_ACME__SECURITY_QS}}", env.receiver.url("busy"))
            })),
        ],
    };
    env.store.put_source("acme", "qs", &qs).await.unwrap();
    env.receiver
        .set("busy", ankusa::testkit::Behavior::Status(503));
    env.commit("acme", "leak", "{}").await;
    env.commit("acme", "qs", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    assert_eq!(
        env.receiver.count_for("leak"),
        0,
        "the admin token was not sent"
    );
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 3, "{dead:#?}");
    let leak_dead = dead.iter().find(|d| d.source == "leak").unwrap();
    // Answered as an unset name would be: the reference, never its value.
    assert!(
        leak_dead.reason.starts_with("max_attempts")
            && leak_dead
                .error
                .contains("${env:ANKUSA_ADMIN__TOKEN} is not set for tenant"),
        "{leak_dead:?}"
    );
    assert_eq!(env.receiver.count_for("busy"), 2);
    let everything = env.all_values();
    assert!(
        everything.contains("connect"),
        "the transport error is stored"
    );
    assert!(!everything.contains(QS), "a resolved secret reached Redis");
    assert!(!everything.contains(ADMIN), "the admin token reached Redis");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_is_a_secret_reference_is_checked_after_resolution_at_attempt_time() {
    std::env::set_var(
        "ANKUSA_SECRET_ACME__SECURITY_FTP_URL",
        "ftp://files.example/in",
    );
    std::env::set_var(
        "ANKUSA_SECRET_ACME__SECURITY_META_URL",
        "http://169.254.169.254/latest/meta-data/?k=v",
    );
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![
            http_entry(serde_json::json!({"url": "${env:ANKUSA_SECRET_ACME__SECURITY_FTP_URL}"})),
            http_entry(serde_json::json!({"url": "${env:ANKUSA_SECRET_ACME__SECURITY_META_URL}"})),
        ],
    };
    // Only the reference is known at source put.
    env.store.put_source("acme", "s", &spec).await.unwrap();
    env.commit("acme", "s", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let mut reasons: Vec<(u32, String)> = env
        .dead_letters("acme")
        .await
        .into_iter()
        .map(|d| (d.sink.unwrap(), d.reason))
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].1.contains("must start with http:// or https://"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].1.contains("blocked address 169.254.169.254"),
        "{reasons:?}"
    );
    assert!(
        !reasons
            .iter()
            .any(|(_, r)| r.contains("files.example") || r.contains("k=v")),
        "the resolved URL is not stored: {reasons:?}"
    );
    worker.shutdown().await;
}

/// A tenant's own events URL (`tenants.<id>.events_url`) is posted under the same guard as
/// its sinks: under the default config (no exemption) one on loopback is refused like a
/// sink there — the event is counted `failed` and no request reaches it — while the event
/// itself stays in the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_events_url_on_loopback_is_refused_by_default() {
    let (events, _) = receivers();
    let events_url = format!("http://127.0.0.1:{}/events", events.port());
    let env = Env::tuned(|c: &mut Config| c.http.allow_cidrs.clear()).await;
    let store = unguarded_store(&env).await;
    commit_to_each_form(&env, &store, &[("127.0.0.1:9".to_string(), "127.0.0.1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = env.config_file(&dir, |c| {
        c.tenants.entry("acme".into()).or_default().events_url = Some(events_url);
    });
    let worker = spawn_worker(&config, &dir, "events", &[], &[]);
    let failed = || async {
        common::procs::metric(&worker.admin, "ankusa_tenant_events_total", &[])
            .await
            .unwrap_or(0.0)
    };
    // Two events: the row's `row_dead_lettered` and its hook's `hook_exhausted`.
    assert!(
        poll_until(LIVENESS, || async { failed().await >= 2.0 }).await,
        "the tenant's events were never posted; log:\n{}",
        worker.log_text()
    );
    let failed_n = common::procs::metric(
        &worker.admin,
        "ankusa_tenant_events_total",
        &["result=\"failed\""],
    )
    .await;
    assert_eq!(failed_n, Some(2.0), "log:\n{}", worker.log_text());
    assert_eq!(
        events.count(),
        0,
        "a request reached the tenant's events URL"
    );
    let kinds: Vec<String> = env
        .store
        .sink_events(100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "row_dead_lettered"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "hook_exhausted"), "{kinds:?}");
    assert!(
        worker
            .log_text()
            .contains("tenants.<id>.events_url refused the event"),
        "the log says the event was refused; log:\n{}",
        worker.log_text()
    );
}
