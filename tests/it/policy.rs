//! Per-sink policy: event filters, retry schedules per entry, disabling an
//! entry after prolonged failure (rate limits: `tests/policy_rate.rs`, alone in its binary). Against a real redis-server and receiver;
//! times are the generous bounds the policies guarantee, not performance claims.

use crate::common;

use ankusa::model::{EventFilter, SinkEntry, SourceSpec};
use ankusa::Hook;
use common::*;
use std::collections::{BTreeSet, HashMap};

const PAYLOADS: &str = "/work/shared/data/github-webhooks";

/// The real GitHub webhook bodies with their event types: the event from the file name
/// (`<event>.<action>[.variant].payload.json`, as `x-github-event` names it) and, when the
/// body has one, its `action` (`pull_request.opened`), as Svix-style event types read.
fn real_payloads() -> Vec<(String, String, Vec<u8>)> {
    let dir = std::path::Path::new(PAYLOADS);
    assert!(
        dir.is_dir(),
        "{PAYLOADS} is missing: the filter test needs the real payloads"
    );
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .expect("payload directory readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let event = name.split('.').next().unwrap_or_default().to_string();
            let body = std::fs::read(&p).expect("payload readable");
            let action = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_string));
            let event_type = match action {
                Some(a) => format!("{event}.{a}"),
                None => event.clone(),
            };
            (event, event_type, body)
        })
        .collect()
}

fn filtered(env: &Env, path: &str, patterns: &[&str]) -> SinkEntry {
    SinkEntry {
        filter: Some(EventFilter::types(
            patterns.iter().map(|p| p.to_string()).collect(),
        )),
        ..env.http_sink(path)
    }
}

/// Row ids (`<hook>.<sink>`) in the tenant's due set.
fn due_rows(env: &Env, tenant: &str) -> Vec<String> {
    env.redis_cmd(&["ZRANGE", &env.key(&format!("due:{tenant}")), "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sinks_filtering_push_pull_request_and_nothing_get_exactly_their_real_github_hooks() {
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![
            filtered(&env, "push", &["push"]),
            filtered(&env, "pr", &["pull_request.*"]),
            env.http_sink("all"),
        ],
    };
    env.store.put_source("octo", "github", &spec).await.unwrap();
    let payloads = real_payloads();
    assert_eq!(payloads.len(), 270);
    // hook id -> event type, committed before any worker runs so Redis can be inspected.
    let mut types: HashMap<u64, String> = HashMap::new();
    for chunk in payloads.chunks(25) {
        let hooks: Vec<Hook> = chunk
            .iter()
            .map(|(event, event_type, body)| {
                Hook::new(body.clone())
                    .header("content-type", "application/json")
                    .header("x-github-event", event.clone())
                    .event_type(event_type.clone())
            })
            .collect();
        let (receipt, ids) = env
            .producer
            .commit_ids("octo", "github", &hooks)
            .await
            .unwrap();
        assert_eq!(receipt.unmatched, 0, "the unfiltered sink takes every hook");
        for (id, (_, event_type, _)) in ids.into_iter().zip(chunk) {
            types.insert(id, event_type.clone());
        }
    }
    let want = |pred: &dyn Fn(&str) -> bool| -> BTreeSet<String> {
        types
            .iter()
            .filter(|(_, t)| pred(t))
            .map(|(id, _)| id.to_string())
            .collect()
    };
    let push = want(&|t| t == "push");
    let pr = want(&|t| t == "pull_request" || t.starts_with("pull_request."));
    assert_eq!(push.len(), 6, "the dataset has 6 push payloads");
    assert_eq!(pr.len(), 27, "and 27 pull_request ones");
    // Redis holds rows only for the matching sinks: no row, no cost for the others.
    let rows = due_rows(&env, "octo");
    let of_sink = |i: u32| -> BTreeSet<String> {
        rows.iter()
            .filter_map(|r| ankusa::model::RowId::parse(r))
            .filter(|r| r.sink == i)
            .map(|r| r.hook.to_string())
            .collect()
    };
    assert_eq!(of_sink(0), push);
    assert_eq!(of_sink(1), pr);
    assert_eq!(of_sink(2).len(), 270);
    assert_eq!(rows.len(), 270 + 6 + 27);
    // Each hook counts only the rows written, so settling its last one deletes it.
    let some_push: u64 = push.iter().next().unwrap().parse().unwrap();
    assert_eq!(
        env.redis_cmd(&["HGET", &env.key(&format!("hook:{some_push}")), "n"]),
        "2"
    );

    let worker = env.worker().await;
    env.drain(&worker).await;
    let got = |path: &str| -> BTreeSet<String> {
        let reqs = env.receiver.requests_for(path);
        let ids: BTreeSet<String> = reqs
            .iter()
            .map(|r| r.header("ankusa-hook-id").unwrap_or_default().to_string())
            .collect();
        assert_eq!(ids.len(), reqs.len(), "{path}: no duplicates");
        ids
    };
    assert_eq!(got("push"), push);
    assert_eq!(got("pr"), pr);
    assert_eq!(got("all").len(), 270);
    let t = env.store.totals().await.unwrap();
    assert_eq!((t.delivered, t.dead_lettered), (270 + 6 + 27, 0));
    // Every hook was finished by its last written row: nothing is left behind.
    assert!(
        env.keys()
            .iter()
            .all(|k| !k.contains(":hook:") && !k.contains(":body:")),
        "{:?}",
        env.keys()
    );
    worker.shutdown().await;
}

/// The test's own reading of a filter (docs/sinks.md "Content filters"), written apart
/// from `src/filter.rs` and `lua/commit.lua` so the three can disagree.
fn independent_match(
    filter: &serde_json::Value,
    event_type: Option<&str>,
    body: &[u8],
    headers: &[(&str, String)],
) -> bool {
    use serde_json::Value;
    let type_ok = |p: &str, et: &str| -> bool {
        if p == "*" {
            return true;
        }
        let (pattern, below) = match p.strip_suffix(".*") {
            Some(pre) => (pre, true),
            None => (p, false),
        };
        let want: Vec<&str> = pattern.split('.').collect();
        let have: Vec<&str> = et.split('.').collect();
        let length_ok = if below {
            have.len() >= want.len()
        } else {
            have.len() == want.len()
        };
        length_ok && want.iter().zip(&have).all(|(w, h)| *w == "*" || w == h)
    };
    if let Some(types) = filter.get("event_types").and_then(Value::as_array) {
        let Some(et) = event_type else { return false };
        if !types.iter().any(|p| type_ok(p.as_str().unwrap(), et)) {
            return false;
        }
    }
    let doc: Option<Value> = if body.len() <= 65_536 {
        serde_json::from_slice(body).ok()
    } else {
        None
    };
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(_) | Value::Object(_), _) => false,
            _ => a == b,
        }
    }
    fn holds(p: &Value, doc: &Option<Value>, headers: &[(&str, String)]) -> bool {
        if let Some(list) = p.get("all").and_then(Value::as_array) {
            return list.iter().all(|q| holds(q, doc, headers));
        }
        if let Some(list) = p.get("any").and_then(Value::as_array) {
            return list.iter().any(|q| holds(q, doc, headers));
        }
        if let Some(q) = p.get("not") {
            return !holds(q, doc, headers);
        }
        let value: Option<Value> = if let Some(ptr) = p.get("body").and_then(Value::as_str) {
            match doc {
                Some(d) => d.pointer(ptr).cloned(),
                None => return false,
            }
        } else {
            let name = p["header"].as_str().unwrap().to_ascii_lowercase();
            headers
                .iter()
                .find(|(k, _)| k.to_ascii_lowercase() == name)
                .map(|(_, v)| Value::String(v.clone()))
        };
        if let Some(e) = p.get("exists") {
            return value.is_some() == e.as_bool().unwrap();
        }
        let Some(v) = value else { return false };
        if let Some(w) = p.get("eq") {
            return same(&v, w);
        }
        if let Some(w) = p.get("ne") {
            return !same(&v, w);
        }
        if let Some(ws) = p.get("in").and_then(Value::as_array) {
            return ws.iter().any(|w| same(&v, w));
        }
        if let Some(pre) = p.get("prefix").and_then(Value::as_str) {
            return v.as_str().is_some_and(|s| s.starts_with(pre));
        }
        let x = match &v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) if p.get("header").is_some() => s.parse().ok(),
            _ => None,
        };
        let Some(x) = x else { return false };
        match (p.get("gt"), p.get("lt")) {
            (Some(n), _) => x > n.as_f64().unwrap(),
            (_, Some(n)) => x < n.as_f64().unwrap(),
            _ => false,
        }
    }
    match filter.get("match") {
        Some(p) => holds(p, &doc, headers),
        None => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_filters_take_exactly_the_real_github_hooks_an_independent_reading_picks() {
    let env = Env::new().await;
    let filters: Vec<serde_json::Value> = [
        r#"{"event_types": ["*.opened"]}"#,
        r#"{"event_types": ["pull_request.*"], "match": {"all": [
            {"body": "/pull_request/draft", "eq": false},
            {"body": "/action", "in": ["opened", "closed", "synchronize", "labeled"]}]}}"#,
        r#"{"match": {"any": [{"body": "/sender/type", "eq": "Bot"},
            {"body": "/repository/open_issues_count", "gt": 1}]}}"#,
        r#"{"match": {"not": {"body": "/action", "exists": true}}}"#,
        r#"{"match": {"all": [{"header": "x-region", "prefix": "eu-"}, {"header": "x-size", "lt": 100}]}}"#,
        r#"{"event_types": ["issues.*", "issue_comment.*"],
            "match": {"body": "/issue/labels/0/name", "exists": true}}"#,
        r#"{"match": {"body": "/repository/owner/login", "ne": "Codertocat"}}"#,
        r#"{"event_types": ["*"], "match": {"any": [{"body": "/ref", "prefix": "refs/tags/"},
            {"body": "/repository/private", "eq": true}, {"body": "/x", "eq": null}]}}"#,
    ]
    .iter()
    .map(|f| serde_json::from_str(f).expect("test filter is JSON"))
    .collect();
    let spec = SourceSpec {
        sinks: filters
            .iter()
            .enumerate()
            .map(|(i, f)| SinkEntry {
                filter: Some(serde_json::from_value(f.clone()).expect("a filter")),
                ..env.http_sink(&format!("f{i}"))
            })
            .collect(),
    };
    env.store
        .put_source("octo", "content", &spec)
        .await
        .unwrap();
    // The real payloads, each with two producer headers, and three bodies that are not JSON.
    // (event type, body, producer headers) of each hook offered.
    type Offered = (Option<String>, Vec<u8>, Vec<(&'static str, String)>);
    let mut hooks: Vec<Offered> = real_payloads()
        .into_iter()
        .enumerate()
        .map(|(i, (_, event_type, body))| {
            let region = if i % 3 == 0 { "eu-west" } else { "us-east" };
            let headers = vec![
                ("x-region", region.to_string()),
                ("x-size", (i * 7 % 200).to_string()),
            ];
            (Some(event_type), body, headers)
        })
        .collect();
    for i in 0..3 {
        hooks.push((
            Some("push".into()),
            format!("not json {i}").into_bytes(),
            vec![("x-region", "eu-north".into()), ("x-size", "5".into())],
        ));
    }
    // Bodies Redis' JSON reader (cjson) would take and the worker's (serde_json) refuses:
    // both must read them alike (as not JSON), or a row is made and then dropped.
    let deep = format!("{}1{}", "[".repeat(127), "]".repeat(127));
    for odd in [
        br#"{"action":"opened","n":Infinity}"#.to_vec(),
        br#"{"action":"opened","n":NaN}"#.to_vec(),
        br#"{"action":"opened","n":0x10}"#.to_vec(),
        br#"{"action":"opened","n":1e400}"#.to_vec(),
        b"{\"action\":\"opened\",\"t\":\"a\nb\"}".to_vec(),
        b"{\"action\":\"opened\",\"t\":\"\xff\"}".to_vec(),
        format!(r#"{{"action":"opened","x":{deep}}}"#).into_bytes(),
    ] {
        hooks.push((Some("push".into()), odd, Vec::new()));
    }
    // And near them, what both take: an escaped newline, 127 levels, a big finite number.
    let deep = format!("{}1{}", "[".repeat(126), "]".repeat(126));
    for fine in [
        br#"{"action":"opened","t":"a\nb","n":1e300}"#.to_vec(),
        format!(r#"{{"action":"opened","x":{deep}}}"#).into_bytes(),
        "{\"action\":\"opened\",\n \"t\":\"caf\u{e9}\"}"
            .as_bytes()
            .to_vec(),
    ] {
        hooks.push((Some("push".into()), fine, Vec::new()));
    }
    let mut want: Vec<BTreeSet<String>> = vec![BTreeSet::new(); filters.len()];
    for chunk in hooks.chunks(25) {
        let batch: Vec<Hook> = chunk
            .iter()
            .map(|(et, body, headers)| {
                let mut h = Hook::new(body.clone()).event_type(et.clone().unwrap());
                for (k, v) in headers {
                    h = h.header(*k, v.clone());
                }
                h
            })
            .collect();
        let (_, ids) = env
            .producer
            .commit_ids("octo", "content", &batch)
            .await
            .unwrap();
        for (id, (et, body, headers)) in ids.into_iter().zip(chunk) {
            for (i, f) in filters.iter().enumerate() {
                if independent_match(f, et.as_deref(), body, headers) {
                    want[i].insert(id.to_string());
                }
            }
        }
    }
    for (i, w) in want.iter().enumerate() {
        assert!(
            !w.is_empty() && w.len() < hooks.len(),
            "filter {i} must take some hooks and refuse others to test anything: {} of {}",
            w.len(),
            hooks.len()
        );
    }
    // The commit script made rows for exactly those: no row for a hook a filter refuses.
    let rows = due_rows(&env, "octo");
    for (i, w) in want.iter().enumerate() {
        let made: BTreeSet<String> = rows
            .iter()
            .filter_map(|r| ankusa::model::RowId::parse(r))
            .filter(|r| r.sink == i as u32)
            .map(|r| r.hook.to_string())
            .collect();
        assert_eq!(&made, w, "filter {i} ({}) at commit", filters[i]);
    }
    // And the worker, which applies the filters again when it binds a row, delivers them
    // all: each receiver gets exactly its hooks, none dropped as unmatched.
    let worker = env.worker().await;
    env.drain(&worker).await;
    for (i, w) in want.iter().enumerate() {
        let got: BTreeSet<String> = env
            .receiver
            .requests_for(&format!("f{i}"))
            .iter()
            .map(|r| r.header("ankusa-hook-id").unwrap_or_default().to_string())
            .collect();
        assert_eq!(&got, w, "filter {i} delivered");
    }
    let t = env.store.totals().await.unwrap();
    let owed: usize = want.iter().map(BTreeSet::len).sum();
    assert_eq!((t.delivered, t.dropped), (owed as u64, 0));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_no_entry_takes_is_counted_and_reported_not_stored_and_not_an_error() {
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![filtered(&env, "push", &["push"])],
    };
    env.store.put_source("acme", "gh", &spec).await.unwrap();
    let hooks = vec![
        Hook::new("a").event_type("issues.opened"),
        Hook::new("b").event_type("push"),
        Hook::new("c"),
    ];
    let (receipt, ids) = env.producer.commit_ids("acme", "gh", &hooks).await.unwrap();
    assert_eq!(receipt.unmatched, 2);
    assert_eq!(receipt.rows_per_hook, 0, "rows of the first hook");
    assert_eq!(ids.len(), 3);
    assert_eq!(due_rows(&env, "acme"), vec![format!("{}.0", ids[1])]);
    for kind in ["hook", "body"] {
        let stored: Vec<String> = env
            .keys()
            .into_iter()
            .filter(|k| k.contains(&format!(":{kind}:")))
            .collect();
        assert_eq!(stored, vec![env.key(&format!("{kind}:{}", ids[1]))]);
    }
    assert_eq!(
        env.redis_cmd(&["HGET", &env.key("stats"), "unmatched"]),
        "2"
    );
    // Without event types every hook of a call gets the same rows: here none.
    let r = env
        .producer
        .commit("acme", "gh", Hook::new("d"))
        .await
        .unwrap();
    assert_eq!((r.rows_per_hook, r.unmatched), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_policies_are_refused_at_source_put_naming_the_field() {
    let env = Env::new().await;
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (
            serde_json::json!({"filter": {"event_types": []}}),
            "sinks[0].filter.event_types",
        ),
        (
            serde_json::json!({"filter": {"event_types": ["a*"]}}),
            "sinks[0].filter.event_types",
        ),
        (
            serde_json::json!({"retry": {"schedule_ms": [0]}}),
            "sinks[0].retry.schedule_ms",
        ),
        (
            serde_json::json!({"retry": {"jitter": 2.0}}),
            "sinks[0].retry.jitter",
        ),
        (
            serde_json::json!({"rate_limit": {"per_second": 0}}),
            "sinks[0].rate_limit.per_second",
        ),
        (
            serde_json::json!({"rate_limit": {"per_second": 5, "burst": 0}}),
            "sinks[0].rate_limit.burst",
        ),
        (
            serde_json::json!({"disable_after_ms": 0}),
            "sinks[0].disable_after_ms",
        ),
    ];
    for (extra, field) in cases {
        let mut entry = serde_json::to_value(env.http_sink("x")).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            entry[k] = v.clone();
        }
        let spec: SourceSpec =
            serde_json::from_value(serde_json::json!({ "sinks": [entry] })).unwrap();
        let err = env
            .store
            .put_source("acme", "s", &spec)
            .await
            .expect_err(field)
            .to_string();
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_schedule_sets_its_attempt_gaps_and_attempts_while_the_other_keeps_the_global_policy(
) {
    use ankusa::model::EntryRetry;
    use ankusa::testkit::Behavior;
    let env = Env::new().await; // global: 20 ms doubling to 200 ms, no attempt limit
    env.receiver.set("sched", Behavior::Status(500));
    env.receiver.set("global", Behavior::Status(500));
    let spec = SourceSpec {
        sinks: vec![
            SinkEntry {
                retry: Some(EntryRetry {
                    schedule_ms: Some(vec![200, 400]),
                    max_attempts: Some(3),
                    ..EntryRetry::default()
                }),
                ..env.http_sink("sched")
            },
            env.http_sink("global"),
        ],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let hook = env.commit("acme", "s", "{}").await;
    let worker = env.worker().await;
    let dead = {
        let deadline = std::time::Instant::now() + LIVENESS;
        loop {
            let d = env.dead_letters("acme").await;
            if !d.is_empty() || std::time::Instant::now() > deadline {
                break d;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        (
            dead[0].get("row"),
            dead[0].get("reason"),
            dead[0].get("attempts")
        ),
        (
            format!("{hook}.0"),
            "max_attempts(http)".to_string(),
            "3".to_string()
        )
    );
    let reqs = env.receiver.requests_for("sched");
    assert_eq!(reqs.len(), 3, "3 attempts, then the dead letter");
    let gaps: Vec<u128> = reqs
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at).as_millis())
        .collect();
    // Lower bounds are the schedule's (no jitter); upper bounds only generous liveness.
    assert!((195..2_000).contains(&gaps[0]), "gaps {gaps:?}");
    assert!((395..3_000).contains(&gaps[1]), "gaps {gaps:?}");
    // The other entry keeps the global policy: its first retry comes after about 20 ms,
    // not 200, and `max_attempts = 3` is not its limit.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r
                .iter()
                .filter(|r| r.path.ends_with("global"))
                .count()
                >= 5)
            .await
    );
    let g = env.receiver.requests_for("global");
    let first_gap = g[1].at.duration_since(g[0].at).as_millis();
    assert!(first_gap < 190, "global first gap {first_gap} ms");
    assert_eq!(
        env.dead_letters("acme").await.len(),
        1,
        "only the scheduled entry's row"
    );
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_failing_for_disable_after_ms_is_disabled_dead_lettered_announced_and_enabled_again(
) {
    use ankusa::testkit::Behavior;
    use std::time::{Duration, Instant};
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let env = Env::new().await;
    let mut config = env.config.clone();
    config.operator.events_url = Some(env.receiver.url("ops"));
    config.operator.signing_secret = Some(SECRET.into());
    env.receiver.set("bad", Behavior::Status(500));
    let spec = SourceSpec {
        sinks: vec![
            SinkEntry {
                disable_after_ms: Some(3_000),
                ..env.http_sink("bad")
            },
            env.http_sink("good"),
        ],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let ids = env.commit_n("acme", "s", 5).await;
    let worker = ankusa::Worker::start(config, Some("test"))
        .await
        .expect("worker starts");
    // Disabled after about 3 s of continuous failure (breakers open meanwhile: default 5
    // failures, so the disable cannot wait for attempts).
    let spec = common::procs::eventually("entry 0 is disabled", LIVENESS, || async {
        let s = env.store.get_source("acme", "s").await.unwrap().unwrap();
        match s.sinks[0].disabled {
            Some(_) => Ok(s),
            None => Err("still enabled".to_string()),
        }
    })
    .await;
    let first_failure = env.receiver.requests_for("bad")[0].at;
    let after = first_failure.elapsed();
    let mark = spec.sinks[0].disabled.clone().expect("entry 0 disabled");
    assert!(mark.reason.contains("http 500"), "{mark:?}");
    assert!(spec.sinks[1].disabled.is_none());
    assert!(
        after >= Duration::from_millis(2_900),
        "disabled {after:?} after the first failure"
    );
    assert!(
        after < Duration::from_secs(10),
        "disabled only {after:?} after the first failure"
    );
    // Its rows are dead-lettered sink_disabled(0) (queued ones at once, parked ones when due).
    let deadline = Instant::now() + LIVENESS;
    let dead = loop {
        let d = env.dead_letters("acme").await;
        if d.len() >= 5 || Instant::now() > deadline {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let rows: BTreeSet<String> = dead.iter().map(|d| d.get("row")).collect();
    let want: BTreeSet<String> = ids.iter().map(|h| format!("{h}.0")).collect();
    assert_eq!(rows, want);
    assert!(
        dead.iter().all(|d| d.get("reason") == "sink_disabled(0)"),
        "{dead:?}"
    );
    assert_eq!(env.receiver.count_for("good"), 5);
    // The operational event: in the stream, and POSTed signed to the operator's URL (the
    // breaker's events are beside it).
    let sink_events = || async {
        let all = env.store.sink_events(10).await.unwrap();
        all.into_iter()
            .filter(|e| e.kind.starts_with("sink_"))
            .collect::<Vec<_>>()
    };
    let events = sink_events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let ev = &events[0];
    assert_eq!(
        (
            ev.kind.as_str(),
            ev.tenant.as_str(),
            ev.source.as_str(),
            ev.sink,
            ev.module.as_str()
        ),
        ("sink_disabled", "acme", "s", 0, "http")
    );
    let posted = |r: &ankusa::testkit::Received| {
        r.path == "ops" && r.header("webhook-id") == Some(ev.id.as_str())
    };
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(posted))
            .await
    );
    let post = env
        .receiver
        .requests_for("ops")
        .into_iter()
        .find(|r| posted(r))
        .unwrap();
    let body = serde_json::to_vec(ev).unwrap();
    assert_eq!(post.body_sha256, sha256_hex(&body), "the event as stored");
    assert_eq!(post.header("webhook-id"), Some(ev.id.as_str()));
    let ts: u64 = post.header("webhook-timestamp").unwrap().parse().unwrap();
    let key = ankusa::sinks::signing::SigningKey::parse(SECRET).unwrap();
    assert_eq!(
        post.header("webhook-signature"),
        Some(key.sign(&ev.id, ts, &body).as_str())
    );
    // New hooks skip the disabled entry.
    let r = env
        .producer
        .commit("acme", "s", Hook::new("later"))
        .await
        .unwrap();
    assert_eq!(r.rows_per_hook, 1);
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("good"), 6);
    // `source enable` restores it (the CLI and admin API call the same operation), and
    // the sink_disabled dead letters replay once the endpoint answers.
    env.receiver.set("bad", Behavior::Ok);
    let bad_before = env.receiver.count_for("bad");
    let en = ankusa::ops::enable_sink(&env.store, "acme", "s", 0, 100)
        .await
        .unwrap();
    assert!(en.was_disabled);
    let spec = env.store.get_source("acme", "s").await.unwrap().unwrap();
    assert!(spec.sinks[0].disabled.is_none());
    assert_eq!(sink_events().await[1].kind, "sink_enabled");
    let r = env
        .producer
        .commit("acme", "s", Hook::new("again"))
        .await
        .unwrap();
    assert_eq!(r.rows_per_hook, 2);
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("bad"), bad_before + 1);
    // The sink_disabled dead letters are replayable: now the endpoint answers, they arrive.
    let filter = ankusa::dlq::Filter {
        tenant: Some("acme".into()),
        reason: Some("sink_disabled".into()),
        ..Default::default()
    };
    let report = ankusa::dlq::replay(&env.store, &filter, &Default::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.replayed, 5, "{report:?}");
    env.drain(&worker).await;
    assert_eq!(env.receiver.count_for("bad"), bad_before + 6);
    assert!(env.dead_letters("acme").await.is_empty());
    worker.shutdown().await;
}

/// a filter applies as it is when a row is bound, not only at commit. Rows already
/// waiting when the entry's filter is narrowed are dropped if it no longer takes their hook:
/// not delivered, never dead-lettered, counted as dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_narrowed_after_the_commit_drops_the_waiting_rows_it_no_longer_takes() {
    let env = Env::new().await;
    let spec = |patterns: &[&str]| SourceSpec {
        sinks: vec![filtered(&env, "f", patterns)],
    };
    env.store
        .put_source("acme", "s", &spec(&["push", "issues"]))
        .await
        .unwrap();
    let hooks: Vec<Hook> = ["push", "issues", "push", "issues", "issues"]
        .iter()
        .enumerate()
        .map(|(i, t)| Hook::new(format!("{{\"n\":{i}}}")).event_type(*t))
        .collect();
    let first = env
        .producer
        .commit_many("acme", "s", &hooks)
        .await
        .unwrap()
        .first_hook;
    assert_eq!(
        due_rows(&env, "acme").len(),
        5,
        "a row for each hook at commit"
    );
    // Narrowed before any worker runs: the five rows are waiting.
    env.store
        .put_source("acme", "s", &spec(&["push"]))
        .await
        .unwrap();
    let worker = env.worker().await;
    let settled = || async {
        let t = env.store.totals().await.unwrap();
        t.delivered + t.dropped + t.dead_lettered
    };
    assert!(
        common::procs::poll_until(LIVENESS, || async { settled().await == 5 }).await,
        "rows not settled: {:?}",
        env.store.totals().await
    );
    let t = env.store.totals().await.unwrap();
    assert_eq!(
        (t.delivered, t.dropped, t.dead_lettered),
        (2, 3, 0),
        "{t:?}"
    );
    let got = env.receiver.requests_for("f");
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|r| r.header("ankusa-event-type") == Some("push")));
    assert!(ankusa::dlq::tenants(&env.store).await.unwrap().is_empty());
    // What a tenant reads of a dropped hook (the second, `issues`): dropped, with the
    // reason; never delivered.
    let v = ankusa::visibility::show_hook(&env.store, "acme", first + 1)
        .await
        .unwrap();
    assert_eq!(
        v.rows[0].state,
        ankusa::visibility::RowState::Dropped,
        "{v:?}"
    );
    let last = v.attempts.last().expect("a record of the drop");
    assert_eq!(last.outcome, "dropped");
    assert!(
        last.reason.as_deref().unwrap_or("").contains("filter"),
        "{last:?}"
    );
    worker.shutdown().await;
}
