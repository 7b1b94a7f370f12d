//! The Kinesis and EventBridge sinks against a real `moto_server`, observed through the
//! recording proxy of `common_sinks` (which also fails chosen entries inside a batch, as the
//! services report throttling per entry). Kinesis records are read back with
//! `GetShardIterator`/`GetRecords`; EventBridge events through a rule whose target is an
//! SQS queue. Counts are exact; times are liveness bounds only.

use crate::common;
use crate::common_bench;
use crate::common_sinks;

use ankusa::model::SourceSpec;
use ankusa::Hook;
use common::*;
use common_sinks::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// `n` real webhook payloads (JSON objects), cycling through the fixture directory; a
/// built-in JSON object per hook when the fixtures are absent.
fn fixture_bodies(n: usize) -> Vec<Vec<u8>> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/github-webhooks");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    (0..n)
        .map(|i| match files.get(i % files.len().max(1)) {
            Some(f) => std::fs::read(f).expect("a fixture"),
            None => format!("{{\"hook\":{i},\"pad\":\"{}\"}}", "x".repeat(i)).into_bytes(),
        })
        .collect()
}

/// A moto server, a proxy in front of it, the test's Kinesis client and one stream of
/// `shards` shards (its ARN).
async fn kinesis_world(
    stream: &str,
    shards: i32,
) -> (Moto, Proxy, aws_sdk_kinesis::Client, String) {
    let moto = Moto::start().await;
    let proxy = Proxy::start(&moto.url).await;
    let kinesis = kinesis_client(&moto.url);
    let arn = create_stream(&kinesis, stream, shards).await;
    (moto, proxy, kinesis, arn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_takes_every_hook_byte_exact_once_keyed_by_hook_id() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    let (_moto, proxy, kinesis, _arn) = kinesis_world("events", 4).await;
    env.put_source(
        "acme",
        "s",
        vec![kinesis_entry(
            &proxy.url,
            "events",
            serde_json::json!({"linger_ms": 50}),
        )],
    )
    .await;
    let bodies = fixture_bodies(200);
    let hooks: Vec<Hook> = bodies.iter().map(|b| Hook::new(b.clone())).collect();
    let r = env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 200).await, 200);

    let batches = proxy.batches();
    assert!(
        batches.iter().all(|b| b.entries.len() <= 50),
        "{:?}",
        batches.iter().map(|b| b.entries.len()).collect::<Vec<_>>()
    );
    assert!(
        batches.len() < 200,
        "records were batched: {} requests",
        batches.len()
    );
    assert_eq!(
        batches.iter().map(|b| b.entries.len()).sum::<usize>(),
        200,
        "one record per row, no retries"
    );
    let got = read_stream_n(&kinesis, "events", 200).await;
    assert_eq!(got.len(), 200, "exactly once");
    let by_key: HashMap<&str, &StreamRecord> =
        got.iter().map(|g| (g.partition_key.as_str(), g)).collect();
    assert_eq!(by_key.len(), 200, "one partition key per hook");
    for (i, body) in bodies.iter().enumerate() {
        let key = (r.first_hook + i as u64).to_string();
        let rec = by_key
            .get(key.as_str())
            .unwrap_or_else(|| panic!("no record keyed by hook {key}"));
        assert!(rec.data == *body, "hook {key}: data differs from the body");
    }
    let shards: HashSet<&str> = got.iter().map(|g| g.shard.as_str()).collect();
    assert!(
        shards.len() > 1,
        "hook ids spread over the shards: {shards:?}"
    );
    let totals = env.store.totals().await.unwrap();
    assert_eq!((totals.delivered, totals.dead_lettered), (200, 0));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_keys_an_ordered_entry_by_its_lane_and_keeps_commit_order_across_a_retry() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    let (_moto, proxy, kinesis, arn) = kinesis_world("orders", 3).await;
    // By ARN this time: sent as StreamARN.
    let mut sink = kinesis_entry(&proxy.url, &arn, serde_json::json!({"linger_ms": 5}));
    sink.ordered = true;
    sink.key = Some("header:X-Order".into());
    env.put_source("acme", "s", vec![sink]).await;
    // The third record of order b fails once: its retry must still come before b's fourth.
    let failed = Arc::new(Mutex::new(false));
    let f2 = failed.clone();
    proxy.fail_entries(move |e| {
        e.body == "b-2" && !std::mem::replace(&mut *f2.lock().unwrap(), true)
    });
    let mut hooks = Vec::new();
    for i in 0..8 {
        for k in ["a", "b", "c"] {
            hooks.push(Hook::new(format!("{k}-{i}")).header("X-Order", k));
        }
    }
    env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 24).await, 24);
    assert!(*failed.lock().unwrap(), "b-2 was failed once");
    assert!(
        proxy.batches().iter().all(|b| b.target == arn),
        "every request names the stream by its ARN"
    );

    let got = read_stream_n(&kinesis, "orders", 24).await;
    assert_eq!(got.len(), 24, "exactly once, the retried record included");
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in &got {
        per_key
            .entry(g.partition_key.clone())
            .or_default()
            .push(String::from_utf8(g.data.clone()).unwrap());
    }
    assert_eq!(
        per_key.len(),
        3,
        "one partition key per lane: {:?}",
        per_key.keys()
    );
    for (key, bodies) in &per_key {
        let (prefix, hash) = key.rsplit_once(':').unwrap();
        assert_eq!(prefix, "acme:s:0", "the lane id is the key: {key}");
        assert!(
            hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "{key}"
        );
        let k = &bodies[0][..1];
        let want: Vec<String> = (0..8).map(|i| format!("{k}-{i}")).collect();
        assert_eq!(bodies, &want, "commit order within the lane's shard");
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinesis_partial_failure_retries_only_the_failed_records() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    let (_moto, proxy, kinesis, _arn) = kinesis_world("partial", 2).await;
    env.put_source(
        "acme",
        "s",
        vec![kinesis_entry(
            &proxy.url,
            "partial",
            serde_json::json!({"linger_ms": 100}),
        )],
    )
    .await;
    // Records whose data says "fail" fail once, inside a request that otherwise succeeds.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let s2 = seen.clone();
    proxy.fail_entries(move |e| {
        e.body.contains("fail")
            && s2
                .lock()
                .unwrap()
                .insert(e.group.clone().unwrap_or_default())
    });
    let hooks: Vec<Hook> = (0..10)
        .map(|i| {
            Hook::new(if i % 3 == 0 {
                format!("{{\"fail\":{i}}}")
            } else {
                format!("{{\"ok\":{i}}}")
            })
        })
        .collect();
    let r = env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 10).await, 10);

    let batches = proxy.batches();
    assert_eq!(batches[0].entries.len(), 10, "one request carried all ten");
    assert_eq!(
        batches[0].failed.len(),
        4,
        "hooks 0, 3, 6, 9 failed inside it"
    );
    let mut sends: HashMap<String, usize> = HashMap::new();
    for e in batches.iter().flat_map(|b| &b.entries) {
        *sends.entry(e.group.clone().unwrap()).or_default() += 1;
    }
    for i in 0..10u64 {
        let key = (r.first_hook + i).to_string();
        let want = if i % 3 == 0 { 2 } else { 1 };
        assert_eq!(sends[&key], want, "hook {key} sent {want} time(s)");
    }
    // Exactly one record per hook: the six that succeeded were not put again.
    let got = read_stream_n(&kinesis, "partial", 10).await;
    assert_eq!(got.len(), 10);
    let keys: HashSet<&str> = got.iter().map(|g| g.partition_key.as_str()).collect();
    assert_eq!(keys.len(), 10);
    let totals = env.store.totals().await.unwrap();
    assert_eq!((totals.delivered, totals.dead_lettered), (10, 0));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stream_dead_letters_its_rows_as_permanent() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    let moto = Moto::start().await;
    env.put_source(
        "acme",
        "s",
        vec![kinesis_entry(&moto.url, "nope", serde_json::json!({}))],
    )
    .await;
    env.commit_n("acme", "s", 3).await;
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 3).await, 3);
    let dead = ankusa::dlq::list(&env.store, "acme", 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    for d in &dead {
        let reason = d.get("reason");
        assert!(
            reason.starts_with("permanent(kinesis ResourceNotFoundException"),
            "{reason}"
        );
    }
    worker.shutdown().await;
}

/// A moto server, a proxy, the test's EventBridge and SQS clients, and bus `bus` whose rule
/// sends every event of `source` to a queue (its URL).
/// The test env for EventBridge through moto, tenant `acme` granted custom endpoints.
///
/// moto matches each event of a request against the bus's rules and sends it to the
/// queue before answering, up to 0.2 s an event on a loaded machine: a request of nine
/// or ten outlasts the test config's 2 s attempt timeout, which would retry it whole and
/// break the tests' request counts (a CI run saw 18 entries sent where 12 were due).
async fn events_env() -> Env {
    Env::tuned(|c| {
        grant_custom_endpoints(c, &["acme"]);
        c.dispatch.attempt_timeout_ms = 20_000;
    })
    .await
}

async fn events_world(bus: &str, source: &str) -> (Moto, Proxy, aws_sdk_sqs::Client, String) {
    let moto = Moto::start().await;
    let proxy = Proxy::start(&moto.url).await;
    let events = events_client(&moto.url);
    let sqs = sqs_client(&moto.url);
    let q = bus_into_queue(&events, &sqs, bus, source, &format!("{bus}-events")).await;
    (moto, proxy, sqs, q)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventbridge_puts_at_most_ten_events_a_request_with_detail_type_source_and_detail() {
    let env = events_env().await;
    let (_moto, proxy, sqs, q) = events_world("orders", "acme.shop").await;
    env.put_source(
        "acme",
        "s",
        vec![eventbridge_entry(
            &proxy.url,
            "orders",
            "acme.shop",
            serde_json::json!({"linger_ms": 50}),
        )],
    )
    .await;
    // Even hooks have an event type (their detail-type); odd ones get the default.
    let bodies = fixture_bodies(30);
    let hooks: Vec<Hook> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let h = Hook::new(b.clone());
            match i % 2 {
                0 => h.event_type(format!("order.created.{i}")),
                _ => h,
            }
        })
        .collect();
    env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 30).await, 30);

    let batches = proxy.batches();
    let sizes: Vec<usize> = batches.iter().map(|b| b.entries.len()).collect();
    assert!(sizes.iter().all(|n| *n <= 10), "{sizes:?}");
    assert!(
        sizes.iter().any(|n| *n > 1),
        "events were batched: {sizes:?}"
    );
    assert_eq!(
        sizes.iter().sum::<usize>(),
        30,
        "one event per row, no retries"
    );
    assert!(batches
        .iter()
        .flat_map(|b| &b.entries)
        .all(|e| e.attr("source") == "acme.shop" && e.attr("bus") == "orders"));

    let got = receive_n(&sqs, &q, 30).await;
    assert_eq!(got.len(), 30, "every event reached the rule's queue");
    let mut want: HashMap<(String, serde_json::Value), usize> = HashMap::new();
    for (i, b) in bodies.iter().enumerate() {
        let dt = match i % 2 {
            0 => format!("order.created.{i}"),
            _ => "ankusa.hook".to_string(),
        };
        *want
            .entry((dt, serde_json::from_slice(b).unwrap()))
            .or_default() += 1;
    }
    let mut seen: HashMap<(String, serde_json::Value), usize> = HashMap::new();
    for m in &got {
        let ev: serde_json::Value = serde_json::from_str(&m.body).unwrap();
        assert_eq!(ev["source"], "acme.shop");
        let dt = ev["detail-type"].as_str().unwrap().to_string();
        *seen.entry((dt, ev["detail"].clone())).or_default() += 1;
    }
    assert!(seen == want, "every (detail-type, detail) exactly once");
    let totals = env.store.totals().await.unwrap();
    assert_eq!((totals.delivered, totals.dead_lettered), (30, 0));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventbridge_fails_a_non_json_body_alone_and_retries_only_failed_entries() {
    let env = events_env().await;
    let (_moto, proxy, sqs, q) = events_world("bus", "acme.test").await;
    env.put_source(
        "acme",
        "s",
        vec![eventbridge_entry(
            &proxy.url,
            "bus",
            "acme.test",
            serde_json::json!({"linger_ms": 100}),
        )],
    )
    .await;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let s2 = seen.clone();
    proxy.fail_entries(move |e| {
        e.body.contains("fail") && s2.lock().unwrap().insert(e.body.clone())
    });
    let mut hooks: Vec<Hook> = (0..9)
        .map(|i| {
            Hook::new(if i % 3 == 0 {
                format!("{{\"fail\":{i}}}")
            } else {
                format!("{{\"ok\":{i}}}")
            })
        })
        .collect();
    hooks.push(Hook::new("not json"));
    hooks.push(Hook::new("[1, 2]"));
    env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    assert_eq!(until_ended(&worker, &env.store, 11).await, 11);

    let batches = proxy.batches();
    assert_eq!(
        batches[0].entries.len(),
        9,
        "the nine JSON objects in one request"
    );
    assert_eq!(batches[0].failed.len(), 3);
    assert_eq!(
        batches.iter().map(|b| b.entries.len()).sum::<usize>(),
        12,
        "only the three failed entries were sent again"
    );
    let got = receive_n(&sqs, &q, 9).await;
    assert_eq!(got.len(), 9);
    let details: HashSet<String> = got
        .iter()
        .map(|m| serde_json::from_str::<serde_json::Value>(&m.body).unwrap()["detail"].to_string())
        .collect();
    assert_eq!(details.len(), 9, "each event once");
    let dead = ankusa::dlq::list(&env.store, "acme", 10).await.unwrap();
    assert_eq!(dead.len(), 2, "the two bodies that are not JSON objects");
    for d in &dead {
        let reason = d.get("reason");
        assert!(
            reason.starts_with("permanent(eventbridge: body is not a JSON object"),
            "{reason}"
        );
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_put_names_the_bad_option_and_refuses_blocked_or_ungranted_endpoints() {
    // Loopback is exempt in the test config; the metadata address is not.
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["granted"])).await;
    let put = |tenant: &'static str, sink: ankusa::model::SinkEntry| {
        let store = env.store.clone();
        async move {
            store
                .put_source(tenant, "s", &SourceSpec { sinks: vec![sink] })
                .await
                .map_err(|e| e.to_string())
        }
    };
    let local = "http://127.0.0.1:9";
    let cases = [
        (
            kinesis_entry(local, "a b", serde_json::json!({})),
            "sinks[0].opts: stream",
        ),
        (
            kinesis_entry(local, "s", serde_json::json!({"linger_ms": 99_999})),
            "sinks[0].opts: linger_ms",
        ),
        (
            kinesis_entry(local, "s", serde_json::json!({"secret_access_key": null})),
            "sinks[0].opts: access_key_id and secret_access_key: set both or neither",
        ),
        (
            eventbridge_entry(local, "bus", "aws.ec2", serde_json::json!({})),
            "sinks[0].opts: source",
        ),
        (
            eventbridge_entry(local, "b us", "acme", serde_json::json!({})),
            "sinks[0].opts: event_bus",
        ),
        (
            eventbridge_entry(local, "bus", "acme", serde_json::json!({"detail_type": ""})),
            "sinks[0].opts: detail_type",
        ),
        (
            kinesis_entry("http://169.254.169.254", "s", serde_json::json!({})),
            "sinks[0].opts: endpoint_url: ",
        ),
        (
            eventbridge_entry(
                "http://169.254.169.254",
                "bus",
                "acme",
                serde_json::json!({}),
            ),
            "sinks[0].opts: endpoint_url: ",
        ),
    ];
    for (sink, want) in cases {
        let e = put("granted", sink.clone()).await.expect_err(want);
        assert!(e.contains(want), "{:?}: {e}", sink.opts);
    }
    // The metadata address is refused as a blocked address, naming the config key.
    let e = put(
        "granted",
        kinesis_entry("http://169.254.169.254", "s", serde_json::json!({})),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("169.254.169.254") && e.contains("http.allow_cidrs"),
        "{e}"
    );
    // A custom endpoint needs the tenant's grant.
    for sink in [
        kinesis_entry(local, "s", serde_json::json!({})),
        eventbridge_entry(local, "bus", "acme", serde_json::json!({})),
    ] {
        let e = put("acme", sink.clone()).await.unwrap_err();
        assert!(
            e.contains("sinks[0].opts: endpoint_url: custom endpoints are off")
                && e.contains("tenants.acme.custom_endpoints = true"),
            "{e}"
        );
        put("granted", sink).await.expect("the granted tenant may");
    }
}

/// Benchmark (not run by default): deliveries/s and worker CPU per delivery of `kinesis` and
/// `eventbridge` against moto, beside `http` to an `ankusa receiver` process, one GitHub push
/// body per hook (`BENCHMARKS.md` "Destinations side by side"). moto bounds these: it
/// answers in Python on the same cores. The EventBridge bus has no rule (moto's matching of
/// a rule into SQS costs it ~0.2 s an event: 6 events/s, which would measure moto alone).
/// `ANKUSA_BENCH_ROWS=20000 ANKUSA_BENCH_EVENTS=200 cargo test --release --features
/// fault-injection --test sinks_aws_streams -- --ignored --nocapture bench_aws_streams`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_aws_streams_deliveries_per_second() {
    use common_bench::{measure, push_body, report, ReceiverProcess};
    let rows = |var: &str, default: usize| -> usize {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n, events) = (
        rows("ANKUSA_BENCH_ROWS", 2_000),
        rows("ANKUSA_BENCH_EVENTS", 200),
    );
    let receiver = ReceiverProcess::start();
    let env = Env::tuned(|c| {
        grant_custom_endpoints(c, &["bench"]);
        c.dispatch.batch = 1_000;
        c.dispatch.attempt_timeout_ms = 60_000;
    })
    .await;
    let moto = Moto::start().await;
    create_stream(&kinesis_client(&moto.url), "bench", 4).await;
    let sqs = sqs_client(&moto.url);
    bus_into_queue(
        &events_client(&moto.url),
        &sqs,
        "bench",
        "bench.push",
        "bench-events",
    )
    .await;
    let body = push_body();
    let mut all = vec![measure(&env, "http", receiver.entry(), n, &body).await];
    let e = kinesis_entry(&moto.url, "bench", serde_json::json!({}));
    all.push(measure(&env, "kinesis", e, n, &body).await);
    let e = eventbridge_entry(&moto.url, "bench", "bench.push", serde_json::json!({}));
    all.push(measure(&env, "eventbridge", e, events, &body).await);
    report(&all);
}
