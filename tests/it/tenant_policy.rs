//! The tenant boundary in what a source writer chooses (`docs/security.md`): secret references
//! scoped to the tenant's namespace, the operator's bounds on sources (`[limits]`,
//! `[tenants.<id>]`, the `[retry]` caps) at `source put` through the Rust API, the CLI and the
//! admin API, sink header checks, and specs stored by an older version held to the same
//! rules at attempt time. Real redis-server, real HTTP.
use crate::common;

use ankusa::config::Config;
use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::testkit::Behavior;
use common::procs::{wait_ready, write_config};
use common::{admin_call, Env, WorkerProcess};
use serde_json::json;

fn http_entry(opts: serde_json::Value) -> SinkEntry {
    SinkEntry {
        module: "http".into(),
        opts: opts.as_object().cloned().unwrap(),
        ..Default::default()
    }
}

fn spec_of(entries: Vec<SinkEntry>) -> SourceSpec {
    SourceSpec { sinks: entries }
}

/// Store `spec` (JSON text) for `tenant/source` as a version without these checks did: the
/// hash fields `spec` and `modules`, and the registry's member, written directly.
fn put_source_as_an_old_version(env: &Env, tenant: &str, source: &str, spec: &str) {
    let parsed: SourceSpec = serde_json::from_str(spec).expect("an old spec still parses");
    let ks = env.store.keyspace();
    env.redis_cmd(&[
        "HSET",
        &ks.source(tenant, source),
        "spec",
        spec,
        "modules",
        &parsed.modules_csv(),
        "version",
        "1",
    ]);
    env.redis_cmd(&["SADD", &ks.sources(), &format!("{tenant}/{source}")]);
}

/// Every key and value of `env`'s Redis as text, to search for a secret.
fn everything_in_redis(env: &Env) -> String {
    let mut out = String::new();
    for key in env.keys() {
        let kind = env.redis_cmd(&["TYPE", &key]);
        let v = match kind.trim() {
            "string" => env.redis_cmd(&["GET", &key]),
            "hash" => env.redis_cmd(&["HGETALL", &key]),
            "list" => env.redis_cmd(&["LRANGE", &key, "0", "-1"]),
            "set" => env.redis_cmd(&["SMEMBERS", &key]),
            "zset" => env.redis_cmd(&["ZRANGE", &key, "0", "-1"]),
            "stream" => env.redis_cmd(&["XRANGE", &key, "-", "+"]),
            _ => String::new(),
        };
        out.push_str(&key);
        out.push('\n');
        out.push_str(&v);
        out.push('\n');
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_reference_is_refused_by_default_and_reads_only_the_tenants_own_directory() {
    // The default config: file references are off, whatever the path.
    let env = Env::new().await;
    for path in [
        "/run/secrets/kubernetes.io/serviceaccount/token",
        "/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
        "/etc/passwd",
    ] {
        let spec = spec_of(vec![http_entry(json!({
            "url": env.receiver.url("f"),
            "headers": {"authorization": format!("Bearer ${{file:{path}}}")},
        }))]);
        let e = env.store.put_source("acme", "f", &spec).await.unwrap_err();
        assert!(
            e.to_string().contains("secrets.file_dir is not set"),
            "{path}: {e}"
        );
    }
    assert!(env.store.get_source("acme", "f").await.unwrap().is_none());

    // With a directory: each tenant reads its own subdirectory, and only that.
    let dir = tempfile::tempdir().unwrap();
    for (t, v) in [("acme", "acme-file-secret"), ("beta", "beta-file-secret")] {
        std::fs::create_dir(dir.path().join(t)).unwrap();
        std::fs::write(dir.path().join(t).join("token"), format!("{v}\n")).unwrap();
    }
    let d = dir.path().to_str().unwrap().to_string();
    let env = Env::tuned(|c| c.secrets.file_dir = d.clone()).await;
    let own = spec_of(vec![http_entry(json!({
        "url": env.receiver.url("own"),
        "headers": {"authorization": format!("Bearer ${{file:{d}/acme/token}}")},
    }))]);
    env.store.put_source("acme", "own", &own).await.unwrap();
    for path in [
        format!("{d}/beta/token"),
        format!("{d}/acme/../beta/token"),
        format!("{d}/token"),
    ] {
        let theirs = spec_of(vec![http_entry(json!({
            "url": env.receiver.url("theirs"),
            "headers": {"authorization": format!("Bearer ${{file:{path}}}")},
        }))]);
        let e = env
            .store
            .put_source("acme", "theirs", &theirs)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("only files under {d}/acme/")),
            "{path}: {e}"
        );
    }
    env.commit("acme", "own", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = env.receiver.requests_for("own");
    assert_eq!(got.len(), 1);
    assert!(got[0]
        .headers
        .contains(&("authorization".into(), "Bearer acme-file-secret".into())));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_env_secret_is_never_delivered_and_reads_exactly_as_an_unset_name() {
    const SIG: &str = "sig-signing-secret-5d1e";
    std::env::set_var("ANKUSA_SECRET_SIG__KEY", SIG);
    let env = Env::tuned(|c| c.retry.max_attempts = 2).await;
    let entry = |path: &str, name: &str| {
        http_entry(json!({
            "url": env.receiver.url(path),
            "headers": {"x-key": format!("${{env:{name}}}")},
        }))
    };
    // At source put: the other tenant's set name and an unset one are refused alike, by name.
    let refusal = |e: ankusa::store::SourceError, name: &str| e.to_string().replace(name, "NAME");
    let set = env
        .store
        .put_source(
            "beta",
            "s",
            &spec_of(vec![entry("b", "ANKUSA_SECRET_SIG__KEY")]),
        )
        .await
        .unwrap_err();
    let unset = env
        .store
        .put_source(
            "beta",
            "s",
            &spec_of(vec![entry("b", "ANKUSA_SECRET_SIG__NOPE")]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        refusal(set, "ANKUSA_SECRET_SIG__KEY"),
        refusal(unset, "ANKUSA_SECRET_SIG__NOPE")
    );
    // The owner may use it; beta its own namespace.
    env.store
        .put_source(
            "sig",
            "s",
            &spec_of(vec![entry("sig", "ANKUSA_SECRET_SIG__KEY")]),
        )
        .await
        .unwrap();
    env.store
        .put_source(
            "beta",
            "own",
            &spec_of(vec![entry("own", "ANKUSA_SECRET_BETA__UNSET")]),
        )
        .await
        .unwrap();
    // At attempt time, for a spec an older version stored: the other tenant's secret and
    // beta's own unset name fail the same way, and nothing is sent.
    let old = |name: &str| {
        format!(
            r#"{{"sinks":[{{"module":"http","opts":{{"url":"{}","headers":{{"x-key":"${{env:{name}}}"}}}}}}]}}"#,
            env.receiver.url("b")
        )
    };
    put_source_as_an_old_version(&env, "beta", "s", &old("ANKUSA_SECRET_SIG__KEY"));
    env.commit("sig", "s", "{}").await;
    env.commit("beta", "s", "{}").await;
    env.commit("beta", "own", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    worker.shutdown().await;
    // The owner's delivery carried it: the test sees a leak when there is one.
    let sig = env.receiver.requests_for("sig");
    assert_eq!(sig.len(), 1);
    assert!(sig[0].headers.contains(&("x-key".into(), SIG.into())));
    assert_eq!(env.receiver.count_for("b"), 0, "beta got sig's secret");
    assert_eq!(env.receiver.count_for("own"), 0);
    let dead = env.dead_letters("beta").await;
    assert_eq!(dead.len(), 2, "{dead:#?}");
    let theirs = dead.iter().find(|d| d.source == "s").unwrap();
    let unset = dead.iter().find(|d| d.source == "own").unwrap();
    assert_eq!(
        (
            theirs.reason.as_str(),
            theirs.attempts,
            theirs.error.replace("ANKUSA_SECRET_SIG__KEY", "NAME")
        ),
        (
            unset.reason.as_str(),
            unset.attempts,
            unset.error.replace("ANKUSA_SECRET_BETA__UNSET", "NAME")
        ),
        "a forbidden name and an unset one must not be told apart"
    );
    assert!(
        theirs.error.contains("is not set for tenant"),
        "{}",
        theirs.error
    );
    assert!(
        !everything_in_redis(&env).contains(SIG),
        "the secret reached Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_the_operators_bounds_is_refused_naming_the_limit_and_its_key_everywhere() {
    let env = Env::tuned(|c| {
        c.tenants.insert(
            "big".into(),
            ankusa::config::TenantConfig {
                max_sinks_per_source: Some(1000),
                ..Default::default()
            },
        );
        c.tenants.insert(
            "narrow".into(),
            ankusa::config::TenantConfig {
                modules: Some(vec!["http".into()]),
                ..Default::default()
            },
        );
    })
    .await;
    let many = |n: usize| spec_of((0..n).map(|i| env.http_sink(&format!("m{i}"))).collect());
    // The Rust API.
    let e = env
        .store
        .put_source("acme", "many", &many(1000))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "1000 entries, more than the 20 a source may have (limits.max_sinks_per_source = 20)"
        ),
        "{e}"
    );
    env.store
        .put_source("acme", "twenty", &many(20))
        .await
        .unwrap();
    env.store
        .put_source("big", "many", &many(1000))
        .await
        .unwrap();
    let e = env
        .store
        .put_source("big", "more", &many(1001))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("(tenants.big.max_sinks_per_source = 1000)"),
        "{e}"
    );
    let sqs = SinkEntry {
        module: "sqs".into(),
        opts: json!({"queue_url": "https://sqs.eu-west-3.amazonaws.com/1/q",
                     "access_key_id": "${env:ANKUSA_SECRET_NARROW__K}",
                     "secret_access_key": "${env:ANKUSA_SECRET_NARROW__S}"})
        .as_object()
        .cloned()
        .unwrap(),
        ..Default::default()
    };
    let e = env
        .store
        .put_source("narrow", "q", &spec_of(vec![sqs.clone()]))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "sinks[0].module: sqs is not allowed for tenant \"narrow\" (tenants.narrow.modules = [\"http\"])"
        ),
        "{e}"
    );

    // The CLI and the admin API, against a config file with the same bounds.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&env, &dir, "ankusa.toml", |_| {});
    let file = dir.path().join("many.json");
    std::fs::write(&file, serde_json::to_string(&many(1000)).unwrap()).unwrap();
    let (code, _, err) = env
        .cli_with(
            Some(&config),
            &["source", "put", "acme", "cli", file.to_str().unwrap()],
        )
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("limits.max_sinks_per_source = 20"), "{err}");
    let worker = WorkerProcess::spawn(&config, &dir, "w");
    wait_ready(&worker).await;
    let (status, body) = admin_call(
        reqwest::Method::PUT,
        format!("http://{}/admin/sources/acme/api", worker.admin),
        None,
        Some(serde_json::to_string(&many(1000)).unwrap()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("limits.max_sinks_per_source = 20"),
        "{body}"
    );
    let (status, body) = admin_call(
        reqwest::Method::PUT,
        format!("http://{}/admin/sources/narrow/api", worker.admin),
        None,
        Some(serde_json::to_string(&spec_of(vec![sqs])).unwrap()),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("tenants.narrow.modules"),
        "{body}"
    );
    for s in ["cli", "api"] {
        assert!(env.store.get_source("acme", s).await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_retry_beyond_the_operators_is_refused_at_put_and_clamped_for_a_stored_source() {
    let env = Env::tuned(|c: &mut Config| {
        c.retry.max_attempts = 3;
        c.retry.max_elapsed_ms = 60_000;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 10;
        c.dispatch.breaker_failures = 0;
    })
    .await;
    env.receiver.set("r", Behavior::Status(500));
    let with_retry = |retry: serde_json::Value| {
        let mut e = env.http_sink("r");
        e.retry = Some(serde_json::from_value(retry).unwrap());
        spec_of(vec![e])
    };
    for (retry, says) in [
        (
            json!({"max_attempts": 0}),
            "sinks[0].retry.max_attempts: 0 (no limit) exceeds the operator's limit of 3 (retry.max_attempts = 3)",
        ),
        (
            json!({"max_attempts": 27}),
            "sinks[0].retry.max_attempts: 27 exceeds the operator's limit of 3 (retry.max_attempts = 3)",
        ),
        (
            json!({"max_elapsed_ms": 4_000_000_000_000_000_000u64}),
            "sinks[0].retry.max_elapsed_ms: 4000000000000000000 exceeds the operator's limit of 60000 (retry.max_elapsed_ms = 60000)",
        ),
    ] {
        let e = env
            .store
            .put_source("acme", "r", &with_retry(retry.clone()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(says), "{retry}: {e}");
    }
    env.store
        .put_source("acme", "ok", &with_retry(json!({"max_attempts": 2})))
        .await
        .unwrap();
    // What an older version accepted: no attempt limit, a horizon of 4e18 ms.
    let old = format!(
        r#"{{"sinks":[{{"module":"http","opts":{{"url":"{}"}},"retry":{{"max_attempts":0,"max_elapsed_ms":4000000000000000000,"schedule_ms":[10]}}}}]}}"#,
        env.receiver.url("r")
    );
    put_source_as_an_old_version(&env, "acme", "r", &old);
    env.commit("acme", "r", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    worker.shutdown().await;
    assert_eq!(
        env.receiver.count_for("r"),
        3,
        "retry.max_attempts = 3 bounds the stored entry"
    );
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert_eq!(
        (dead[0].reason.as_str(), dead[0].attempts),
        ("max_attempts(http)", 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_headers_are_refused_for_framing_names_bad_values_count_and_size() {
    let env = Env::new().await;
    let with_headers = |h: serde_json::Value| {
        spec_of(vec![http_entry(
            json!({"url": env.receiver.url("h"), "headers": h}),
        )])
    };
    let mut many = serde_json::Map::new();
    for i in 0..33 {
        many.insert(format!("x-h{i}"), json!("v"));
    }
    for (headers, says) in [
        (
            json!({"Host": "internal.example"}),
            "\"Host\" is a framing or hop-by-hop header",
        ),
        (
            json!({"content-length": "0"}),
            "\"content-length\" is a framing",
        ),
        (
            json!({"Transfer-Encoding": "chunked"}),
            "\"Transfer-Encoding\" is a framing",
        ),
        (
            json!({"connection": "close"}),
            "\"connection\" is a framing",
        ),
        (json!({"upgrade": "websocket"}), "\"upgrade\" is a framing"),
        (
            json!({"x-a": "v\r\nx-injected: 1"}),
            "headers.x-a: the value holds byte 0x0d",
        ),
        (
            json!({"x-a": "v\nx"}),
            "headers.x-a: the value holds byte 0x0a",
        ),
        (json!({"x-a": "v\u{0}"}), "byte 0x00"),
        (json!({"x-a": "\u{1b}[31m"}), "byte 0x1b"),
        (json!({"x-a": "caf\u{e9}"}), "byte 0xc3"),
        (
            serde_json::Value::Object(many),
            "33 headers, more than the 32 an entry may have (limits.max_headers_per_entry = 32)",
        ),
        (
            json!({"x-big": "a".repeat(8200)}),
            "more than the 8192 an entry may have (limits.max_header_bytes = 8192)",
        ),
    ] {
        let e = env
            .store
            .put_source("acme", "h", &with_headers(headers.clone()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(says), "{headers}: {e}");
    }
    env.store
        .put_source(
            "acme",
            "h",
            &with_headers(json!({"x-a": "a b\tc", "authorization": "Bearer t"})),
        )
        .await
        .unwrap();
    // A framing header an older version stored is refused at attempt time: nothing is sent.
    let old = format!(
        r#"{{"sinks":[{{"module":"http","opts":{{"url":"{}","headers":{{"transfer-encoding":"chunked"}}}}}}]}}"#,
        env.receiver.url("old")
    );
    put_source_as_an_old_version(&env, "acme", "old", &old);
    env.commit("acme", "old", "{}").await;
    env.commit("acme", "h", "{}").await;
    let worker = env.worker().await;
    env.drain(&worker).await;
    worker.shutdown().await;
    assert_eq!(env.receiver.count_for("old"), 0);
    assert_eq!(env.receiver.count_for("h"), 1);
    let dead = env.dead_letters("acme").await;
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert!(
        dead[0]
            .reason
            .contains("\"transfer-encoding\" is a framing or hop-by-hop header"),
        "{}",
        dead[0].reason
    );
}
