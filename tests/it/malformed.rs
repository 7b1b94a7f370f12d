//! Malformed data written straight into Redis (by hand, a buggy producer in another
//! language, a partial restore): the worker never panics, never stalls and never steps down
//! over it. Each bad row is dead-lettered `malformed(…)` (or dropped when its hook is gone)
//! and counted in `ankusa_malformed_rows_total`, while a good hook committed alongside is
//! delivered and `tick()` returns.

use crate::common;

use ankusa::dlq::DeadLetter;
use common::*;
use std::collections::BTreeMap;

/// The process-wide metrics recorder, so `ankusa_malformed_rows_total` can be read.
fn metrics() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static H: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    H.get_or_init(|| ankusa::metrics::install("test").expect("recorder installs"))
}

/// `ankusa_malformed_rows_total`, summed over this test binary (tests run in parallel, so
/// each asserts a lower bound on it).
fn malformed_total() -> u64 {
    let text = metrics().render();
    text.lines()
        .filter(|l| l.starts_with("ankusa_malformed_rows_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Make `tenant` scan-visible with `member` due now, as if a commit had added it.
fn due_now(env: &Env, tenant: &str, member: &str) {
    env.redis_cmd(&["ZADD", &env.key(&format!("due:{tenant}")), "0", member]);
    env.redis_cmd(&["ZADD", &env.key("tenants"), "0", tenant]);
}

/// Write a hook hash by hand.
fn hook_hash(env: &Env, id: u64, fields: &[(&str, &str)]) {
    let key = env.key(&format!("hook:{id}"));
    let mut args = vec!["HSET", key.as_str()];
    for (f, v) in fields {
        args.push(f);
        args.push(v);
    }
    env.redis_cmd(&args);
}

/// What a commit of `body` to acme/orders (one http sink) would store under hook `id`.
fn good_fields(body: &str) -> Vec<(&'static str, String)> {
    vec![
        ("b", body.to_string()),
        ("h", String::new()),
        ("t", "1700000000000".into()),
        ("tn", "acme".into()),
        ("s", "orders".into()),
        ("k", "http".into()),
        ("n", "1".into()),
        ("z", body.len().to_string()),
    ]
}

/// A field set to a new value, or removed.
type Change = (&'static str, Option<&'static str>);

fn with(fields: Vec<(&'static str, String)>, changes: &[Change]) -> Vec<(&'static str, String)> {
    let mut m: BTreeMap<&str, String> = fields.into_iter().collect();
    for (f, v) in changes {
        match v {
            Some(v) => m.insert(f, v.to_string()),
            None => m.remove(f),
        };
    }
    m.into_iter().collect()
}

fn write_hook(env: &Env, id: u64, fields: &[(&'static str, String)]) {
    let f: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    hook_hash(env, id, &f);
}

/// Run a worker until everything is settled; checks the good hook arrived once, the worker
/// kept its first term (no step-down, no crash loop), and returns acme's dead letters.
async fn run_alongside_a_good_hook(env: &Env, setup: impl FnOnce(&Env)) -> Vec<DeadLetter> {
    let _ = metrics();
    env.http_source("acme", "orders", &["good"]).await;
    let good = env.commit("acme", "orders", r#"{"good":true}"#).await;
    setup(env);
    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = env.receiver.requests_for("good");
    assert_eq!(
        got.iter()
            .filter(|r| r.header("ankusa-hook-id") == Some(good.to_string().as_str()))
            .count(),
        1,
        "the good hook"
    );
    assert_eq!(
        env.redis_cmd(&["GET", &env.key("epoch")]),
        "1",
        "the leader stepped down"
    );
    assert!(worker.is_leader());
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("claimed")]), "0");
    worker.shutdown().await;
    env.dead_letters("acme").await
}

fn reasons(dead: &[DeadLetter]) -> BTreeMap<String, String> {
    dead.iter()
        .map(|d| (d.get("row").to_string(), d.get("reason").to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_members_that_are_not_row_ids_are_dead_lettered_malformed() {
    let env = Env::new().await;
    let dead = run_alongside_a_good_hook(&env, |env| {
        for m in ["garbage", "12", "1.x", "-1.0", "1.0.0"] {
            due_now(env, "acme", m);
        }
    })
    .await;
    let want: BTreeMap<String, String> = ["garbage", "12", "1.x", "-1.0", "1.0.0"]
        .iter()
        .map(|m| (m.to_string(), format!("malformed(row id {m:?})")))
        .collect();
    assert_eq!(reasons(&dead), want);
    assert!(malformed_total() >= 5);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered, t.dropped), (1, 5, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_hook_key_is_missing_is_dropped_and_counted() {
    let env = Env::new().await;
    let dead = run_alongside_a_good_hook(&env, |env| {
        due_now(env, "acme", "999.0");
        due_now(env, "acme", "999.1");
    })
    .await;
    assert!(dead.is_empty(), "{dead:?}");
    assert!(malformed_total() >= 2);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered, t.dropped), (1, 0, 2));
    assert_eq!(env.redis_cmd(&["EXISTS", &env.key("hook:999")]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_hash_with_missing_or_garbage_fields_dead_letters_its_row_malformed() {
    let env = Env::new().await;
    let dead = run_alongside_a_good_hook(&env, |env| {
        let good = good_fields("{}");
        let cases: [(u64, &[Change]); 6] = [
            (101, &[("b", None)]),
            (102, &[("t", Some("yesterday"))]),
            (103, &[("tn", None), ("s", None), ("k", None)]),
            (104, &[("n", Some("lots"))]),
            (
                105,
                &[("t", Some("soon")), ("n", Some("many")), ("d", Some("x"))],
            ),
            (106, &[("tn", Some("globex"))]),
        ];
        for (id, changes) in cases {
            write_hook(env, id, &with(good.clone(), changes));
            due_now(env, "acme", &format!("{id}.0"));
        }
    })
    .await;
    let got = reasons(&dead);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        ["101.0", "102.0", "103.0", "104.0", "105.0", "106.0"],
        "{got:?}"
    );
    assert!(got.values().all(|r| r.starts_with("malformed(")), "{got:?}");
    assert_eq!(
        got["106.0"],
        "malformed(hook 106 belongs to another tenant)"
    );
    assert!(malformed_total() >= 6);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered, t.dropped), (1, 6, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_key_of_another_type_dead_letters_its_row_malformed() {
    let env = Env::new().await;
    let dead = run_alongside_a_good_hook(&env, |env| {
        env.redis_cmd(&["SET", &env.key("hook:200"), "not a hash"]);
        due_now(env, "acme", "200.0");
        env.redis_cmd(&["RPUSH", &env.key("hook:201"), "a", "list"]);
        due_now(env, "acme", "201.0");
        // A hook of today's layout (body apart) whose body key is a list.
        write_hook(env, 202, &with(good_fields("{}"), &[("b", None)]));
        env.redis_cmd(&["RPUSH", &env.key("body:202"), "a", "list"]);
        due_now(env, "acme", "202.0");
    })
    .await;
    let got = reasons(&dead);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        ["200.0", "201.0", "202.0"],
        "{got:?}"
    );
    assert!(got["202.0"].contains("body"), "{got:?}");
    assert!(
        got.values().all(|r| r.starts_with("malformed(hook ")),
        "{got:?}"
    );
    // the bad keys are left for an operator to look at
    assert_eq!(env.redis_cmd(&["GET", &env.key("hook:200")]), "not a hash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_state_key_with_garbage_fields_or_of_another_type_does_not_stop_its_delivery() {
    let env = Env::new().await;
    let dead = run_alongside_a_good_hook(&env, |env| {
        // row 300.0: a hash with garbage attempts and first-attempt time
        write_hook(env, 300, &good_fields(r#"{"n":300}"#));
        env.redis_cmd(&[
            "HSET",
            &env.key("row:300.0"),
            "a",
            "many",
            "f",
            "noon",
            "e",
            "x",
        ]);
        due_now(env, "acme", "300.0");
        // row 301.0: its state key is a string
        write_hook(env, 301, &good_fields(r#"{"n":301}"#));
        env.redis_cmd(&["SET", &env.key("row:301.0"), "garbage"]);
        due_now(env, "acme", "301.0");
    })
    .await;
    assert!(dead.is_empty(), "{dead:?}");
    let mut ids: Vec<String> = env
        .receiver
        .requests_for("good")
        .iter()
        .map(|r| r.header("ankusa-delivery-id").unwrap().to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, ["1.0", "300.0", "301.0"]);
    for r in env.receiver.requests_for("good") {
        assert_eq!(
            r.header("ankusa-attempt"),
            Some("1"),
            "unreadable attempt counts start again"
        );
    }
    assert_eq!(env.store.totals().await.unwrap().delivered, 3);
    assert_eq!(
        env.keys()
            .iter()
            .filter(|k| k.contains(":row:") || k.contains(":hook:") || k.contains(":body:"))
            .count(),
        0,
        "{:?}",
        env.keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_spec_is_not_json_dead_letters_its_rows_malformed() {
    let env = Env::new().await;
    env.redis_cmd(&[
        "HSET",
        &env.key("source:acme:broken"),
        "spec",
        "{not json",
        "modules",
        "http,http",
    ]);
    // a commit reads only the module list, so it goes through; the rows cannot be bound
    let id = env.commit("acme", "broken", "{}").await;
    let dead = run_alongside_a_good_hook(&env, |_| {}).await;
    let got = reasons(&dead);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        [format!("{id}.0"), format!("{id}.1")]
    );
    assert!(
        got.values()
            .all(|r| r.starts_with("malformed(source spec: key must be a string")),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_key_of_another_type_refuses_commits_and_dead_letters_rows_naming_it() {
    let env = Env::new().await;
    env.redis_cmd(&["SET", &env.key("source:acme:odd"), "not a hash"]);
    let before = env.keys();
    let e = env
        .producer
        .commit("acme", "odd", ankusa::Hook::new("{}"))
        .await
        .unwrap_err();
    assert!(matches!(e, ankusa::store::CommitError::Store(_)), "{e:?}");
    assert_eq!(env.keys(), before);
    let dead = run_alongside_a_good_hook(&env, |env| {
        write_hook(env, 400, &with(good_fields("{}"), &[("s", Some("odd"))]));
        due_now(env, "acme", "400.0");
    })
    .await;
    let got = reasons(&dead);
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), ["400.0"]);
    assert!(got["400.0"].starts_with("malformed(source "), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_whose_stored_headers_http_cannot_carry_is_dead_lettered_permanent_unsent() {
    let env = Env::new().await;
    let cases = [
        (500, "not json"),
        (501, r#"["a"]"#),
        (502, r#"{"x-(bad)":"v"}"#),
        (503, r#"{"x-bell":"\u0007"}"#),
        (504, r#"{"x-n":1}"#),
    ];
    let dead = run_alongside_a_good_hook(&env, |env| {
        for (id, h) in cases {
            write_hook(env, id, &with(good_fields("{}"), &[("h", Some(h))]));
            due_now(env, "acme", &format!("{id}.0"));
        }
    })
    .await;
    // nothing but the good hook reached the receiver
    assert_eq!(env.receiver.count(), 1);
    let got = reasons(&dead);
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(
        got["500.0"].starts_with("permanent(invalid hook headers: expected"),
        "{got:?}"
    );
    assert_eq!(
        got["501.0"],
        "permanent(invalid hook headers: not a JSON object)"
    );
    assert_eq!(
        got["502.0"],
        r#"permanent(invalid hook headers: name "x-(bad)")"#
    );
    assert_eq!(
        got["503.0"],
        r#"permanent(invalid hook headers: value of "x-bell")"#
    );
    assert_eq!(
        got["504.0"],
        r#"permanent(invalid hook headers: value of "x-n" is not a string)"#
    );
    assert!(dead.iter().all(|d| d.get("attempts") == "1"), "{dead:?}");
}
