//! The SQS sink and its batcher against a real `moto_server`, observed through a
//! recording proxy. Counts are exact; times are liveness bounds only.

use crate::common;
use crate::common_sinks;

use ankusa::Hook;
use common::*;
use common_sinks::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_requests_carry_at_most_ten_entries_and_every_message_its_attributes() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme", "a", "b"])).await;
    let SqsWorld {
        moto: _moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("events").await;
    env.put_source(
        "acme",
        "s",
        vec![sqs_entry(&proxy.url, &q, serde_json::json!({}))],
    )
    .await;
    // Even hooks have an event type, delivered as the `ankusa-event-type` attribute.
    let hooks: Vec<Hook> = (0..95)
        .map(|i| {
            let h = Hook::new(format!("{{\"n\":{i}}}")).header("X-Event", "push");
            if i % 2 == 0 {
                h.event_type("order.created")
            } else {
                h
            }
        })
        .collect();
    let r = env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 95);

    let batches = proxy.batches();
    assert!(
        batches.iter().all(|b| b.entries.len() <= 10),
        "{:?}",
        batches.iter().map(|b| b.entries.len()).collect::<Vec<_>>()
    );
    assert_eq!(
        batches.iter().map(|b| b.entries.len()).sum::<usize>(),
        95,
        "one entry per row, no retries"
    );
    let got = receive_n(&sqs, &q, 95).await;
    assert_eq!(got.len(), 95);
    let ids: HashSet<String> = got
        .iter()
        .map(|m| m.attrs["ankusa-delivery-id"].clone())
        .collect();
    let want: HashSet<String> = (0..95).map(|i| format!("{}.0", r.first_hook + i)).collect();
    assert_eq!(ids, want);
    for m in &got {
        assert_eq!(m.attrs["ankusa-tenant"], "acme");
        assert_eq!(m.attrs["X-Event"], "push");
        assert!(m.body.starts_with("{\"n\":"));
        let n: u64 = serde_json::from_str::<serde_json::Value>(&m.body).unwrap()["n"]
            .as_u64()
            .unwrap();
        let et = m.attrs.get("ankusa-event-type").map(String::as_str);
        assert_eq!(
            et,
            n.is_multiple_of(2).then_some("order.created"),
            "hook {n}"
        );
    }
    assert_eq!(env.store.totals().await.unwrap().delivered, 95);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_sink_with_sink_concurrency_8_sends_full_batches_of_10() {
    let env = Env::tuned(|c| {
        grant_custom_endpoints(c, &["acme", "a", "b"]);
        c.dispatch.sink_concurrency = 8;
    })
    .await;
    let SqsWorld {
        moto: _moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("full").await;
    env.put_source(
        "acme",
        "s",
        vec![sqs_entry(
            &proxy.url,
            &q,
            serde_json::json!({"linger_ms": 100}),
        )],
    )
    .await;
    env.commit_n("acme", "s", 200).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 200);
    let sizes: Vec<usize> = proxy.batches().iter().map(|b| b.entries.len()).collect();
    assert_eq!(sizes, vec![10; 20], "every request full: 10 entries, not 8");
    assert!(
        proxy.max_inflight() <= 8,
        "at most sink_concurrency requests in flight: {}",
        proxy.max_inflight()
    );
    assert_eq!(queue_depth(&sqs, &q).await, 200);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_stay_within_256_kib_counting_attributes_that_moto_does_not_count() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme", "a", "b"])).await;
    let SqsWorld {
        moto: _moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("big").await;
    env.put_source(
        "acme",
        "s",
        vec![sqs_entry(
            &proxy.url,
            &q,
            serde_json::json!({"linger_ms": 200}),
        )],
    )
    .await;
    // Ten bodies of 26 000 bytes: 260 000 bytes of bodies, under the 262 144 moto checks;
    // with a 400-byte header each, the messages are over it.
    let sig = "s".repeat(400);
    let hooks: Vec<Hook> = (0..10)
        .map(|i| {
            let pad = "x".repeat(26_000 - 15);
            Hook::new(format!("{{\"n\":{i:02},\"p\":\"{pad}\"}}"))
                .header("X-Signature", sig.clone())
        })
        .collect();
    assert!(hooks.iter().all(|h| h.body.len() == 26_000));
    env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 10);
    let batches = proxy.batches();
    let sizes: Vec<usize> = batches.iter().map(Batch::size).collect();
    assert!(
        sizes.iter().all(|s| *s <= 262_144),
        "request sizes {sizes:?}"
    );
    assert_eq!(
        batches.len(),
        2,
        "ten entries did not fit one request: {sizes:?}"
    );
    assert_eq!(batches.iter().map(|b| b.entries.len()).sum::<usize>(), 10);
    assert_eq!(queue_depth(&sqs, &q).await, 10);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_batch_failure_retries_only_the_failed_entries() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme", "a", "b"])).await;
    let SqsWorld {
        moto: _moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("partial").await;
    env.put_source(
        "acme",
        "s",
        vec![sqs_entry(
            &proxy.url,
            &q,
            serde_json::json!({"linger_ms": 100}),
        )],
    )
    .await;
    // Entries whose body says "fail" fail once, inside a batch that otherwise succeeds.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let s2 = seen.clone();
    proxy.fail_entries(move |e| {
        e.body.contains("fail")
            && s2
                .lock()
                .unwrap()
                .insert(e.attr("ankusa-delivery-id").to_string())
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
        *sends
            .entry(e.attr("ankusa-delivery-id").to_string())
            .or_default() += 1;
    }
    for i in 0..10u64 {
        let id = format!("{}.0", r.first_hook + i);
        let want = if i % 3 == 0 { 2 } else { 1 };
        assert_eq!(sends[&id], want, "row {id} sent {want} time(s)");
    }
    // Exactly one message per row: the six that succeeded were not sent again.
    let got = receive_n(&sqs, &q, 10).await;
    assert_eq!(got.len(), 10);
    assert_eq!(queue_depth(&sqs, &q).await, 0);
    let totals = env.store.totals().await.unwrap();
    assert_eq!((totals.delivered, totals.dead_lettered), (10, 0));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queues_keep_commit_order_per_message_group_across_a_retry() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme", "a", "b"])).await;
    let SqsWorld {
        moto: _moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("orders.fifo").await;
    let mut sink = sqs_entry(&proxy.url, &q, serde_json::json!({"linger_ms": 5}));
    sink.ordered = true;
    sink.key = Some("header:X-Order".into());
    env.put_source("acme", "s", vec![sink]).await;
    // The third message of order b fails once: its retry must still come before b's fourth.
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

    let got = receive_n(&sqs, &q, 24).await;
    assert_eq!(got.len(), 24);
    let mut per_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &got {
        let g = m.group.clone().expect("FIFO messages carry a group id");
        let dedup = m
            .dedup
            .as_deref()
            .expect("FIFO messages carry a deduplication id");
        let row = m.attrs["ankusa-delivery-id"].as_str();
        assert!(
            dedup.starts_with("msg_") && dedup.ends_with(&format!("_{row}")),
            "the delivery's message id deduplicates, not the bare row id: {dedup}"
        );
        per_group.entry(g).or_default().push(m.body.clone());
    }
    assert_eq!(per_group.len(), 3, "one group per lane");
    for bodies in per_group.values() {
        let k = &bodies[0][..1];
        let want: Vec<String> = (0..8).map(|i| format!("{k}-{i}")).collect();
        assert_eq!(bodies, &want, "commit order within the group");
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_a_with_an_open_breaker_never_shares_a_batch_with_tenant_b() {
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme", "a", "b"]);
        c.dispatch.breaker_failures = 3;
        c.dispatch.breaker_open_ms = 60_000;
        c.dispatch.breaker_max_open_ms = 60_000;
    })
    .await;
    let SqsWorld {
        moto: _moto,
        proxy,
        queue: q,
        ..
    } = SqsWorld::start("shared").await;
    let sink = sqs_entry(&proxy.url, &q, serde_json::json!({"linger_ms": 20}));
    env.put_source("a", "s", vec![sink.clone()]).await;
    env.put_source("b", "s", vec![sink]).await;
    proxy.fail_entries(|e| e.attr("ankusa-tenant") == "a");

    // Phase 1: A and B share one request; A's three entries fail and open its breaker.
    for i in 0..3 {
        env.commit("a", "s", format!("a-{i}")).await;
        env.commit("b", "s", format!("b-{i}")).await;
    }
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert!(proxy.wait_batches(|bs| !bs.is_empty()).await);
    let first = &proxy.batches()[0];
    assert_eq!(
        first.entries.len(),
        6,
        "before the breaker opened, A and B shared a request"
    );
    // A's two retries come due after their backoff and are parked at claim: wait for them.
    let due_key = env.key("due:a");
    let parked = procs::poll_until(std::time::Duration::from_secs(6), || async {
        if env.store.claimed_count().await.unwrap() != 0
            || env.store.pending_count("a").await.unwrap() != 3
        {
            return false;
        }
        let due = env.redis_cmd(&["ZRANGEBYSCORE", &due_key, "-inf", "+inf", "WITHSCORES"]);
        let now = env.store.now_ms().await.unwrap() as f64;
        let scores: Vec<f64> = due
            .lines()
            .skip(1)
            .step_by(2)
            .filter_map(|l| l.parse().ok())
            .collect();
        scores.len() == 3 && scores.iter().all(|s| *s > now + 30_000.0)
    });
    assert!(parked.await, "A's three rows parked for the open period");
    let phase1 = proxy.batches().len();
    let a_sent_phase1 = proxy
        .batches()
        .iter()
        .flat_map(|b| b.entries.clone())
        .filter(|e| e.attr("ankusa-tenant") == "a")
        .count();
    assert_eq!(
        a_sent_phase1, 3,
        "three failures opened A's breaker; its rows are parked, not retried"
    );

    // Phase 2: both commit; A's breaker is open, so only B's entries are batched.
    let mut hooks_a = Vec::new();
    let mut hooks_b = Vec::new();
    for i in 0..30 {
        hooks_a.push(Hook::new(format!("a2-{i}")));
        hooks_b.push(Hook::new(format!("b2-{i}")));
    }
    env.producer.commit_many("a", "s", &hooks_a).await.unwrap();
    env.producer.commit_many("b", "s", &hooks_b).await.unwrap();
    worker.tick().await.unwrap();
    let later = &proxy.batches()[phase1..];
    assert_eq!(
        later.iter().map(|b| b.entries.len()).sum::<usize>(),
        30,
        "all of B's 30, none of A's"
    );
    assert!(later
        .iter()
        .flat_map(|b| &b.entries)
        .all(|e| e.attr("ankusa-tenant") == "b"));
    assert_eq!(
        env.store.pending_count("a").await.unwrap(),
        33,
        "A's rows wait parked"
    );
    assert_eq!(
        env.store.totals().await.unwrap().delivered,
        33,
        "B's 3 + 30"
    );
    assert!(ankusa::dlq::list(&env.store, "a", 10)
        .await
        .unwrap()
        .is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_dead_letters_its_rows_as_permanent() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme", "a", "b"])).await;
    let moto = Moto::start().await;
    let proxy = Proxy::start(&moto.url).await;
    let q = format!("{}/123456789012/nope", moto.url);
    env.put_source(
        "acme",
        "s",
        vec![sqs_entry(&proxy.url, &q, serde_json::json!({}))],
    )
    .await;
    env.commit_n("acme", "s", 3).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 3);
    let dead = ankusa::dlq::list(&env.store, "acme", 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert!(
        dead.iter()
            .all(|d| d.get("reason").starts_with("permanent(sqs")),
        "{:?}",
        dead[0].get("reason")
    );
    worker.shutdown().await;
}

/// Benchmark (not run by default): deliveries/s and requests per delivery against moto.
/// `cargo test --release --test sinks_sqs -- --ignored --nocapture bench_sqs`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_sqs_deliveries_per_second_against_moto() {
    let n: usize = std::env::var("ANKUSA_BENCH_SQS_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme", "a", "b"]);
        c.dispatch.batch = 1_000;
        c.dispatch.attempt_timeout_ms = 30_000;
    })
    .await;
    let SqsWorld {
        moto,
        proxy,
        sqs,
        queue: q,
    } = SqsWorld::start("bench").await;
    let q2 = create_queue(&sqs, "bench-counted").await;
    // Straight to moto (the proxy only counts requests in a warm-up-free second run below).
    let direct = sqs_entry(&moto.url, &q, serde_json::json!({}));
    env.put_source("acme", "direct", vec![direct]).await;
    env.put_source(
        "acme",
        "counted",
        vec![sqs_entry(&proxy.url, &q2, serde_json::json!({}))],
    )
    .await;
    let body = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/github-webhooks/push.payload.json"),
    )
    .unwrap_or_else(|_| b"{\"x\":1}".to_vec());
    let hooks: Vec<Hook> = (0..100)
        .map(|_| Hook::new(body.clone()).header("X-GitHub-Event", "push"))
        .collect();
    for _ in 0..n / 100 {
        env.producer
            .commit_many("acme", "direct", &hooks)
            .await
            .unwrap();
    }
    let cpu = || {
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    let worker = env.worker().await;
    let (t, c0) = (std::time::Instant::now(), cpu());
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await as usize, n);
    let secs = t.elapsed().as_secs_f64();
    let worker_cpu_us = (cpu() - c0) * 1e6 / n as f64;
    for _ in 0..n / 100 {
        env.producer
            .commit_many("acme", "counted", &hooks)
            .await
            .unwrap();
    }
    worker.tick().await.unwrap();
    let reqs = proxy.batches().len();
    println!(
        "SQS bench: {n} deliveries of {} B in {secs:.2} s = {:.0} deliveries/s; worker CPU {worker_cpu_us:.0} µs/delivery; {reqs} requests for {n} deliveries = {:.3} requests/delivery",
        body.len(),
        n as f64 / secs,
        reqs as f64 / n as f64
    );
    worker.shutdown().await;
}
