//! The Pub/Sub sink against Google's real emulator, observed through a recording
//! proxy. Where the emulator is not installed the tests fail, naming the package to install.

use crate::common;
use crate::common_sinks;

use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::Hook;
use common::*;
use common_sinks::*;
use std::collections::{BTreeMap, HashSet};

fn pubsub_sink(opts: serde_json::Value, ordered: bool, key: Option<&str>) -> SinkEntry {
    SinkEntry {
        module: "pubsub".into(),
        opts: opts.as_object().cloned().unwrap(),
        ordered,
        key: key.map(str::to_string),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_publishes_in_requests_of_at_most_1000_via_pubsub_emulator_host() {
    let emu = PubSubEmulator::start().await;
    let proxy = Proxy::start(&emu.url).await;
    // The sink names no endpoint: PUBSUB_EMULATOR_HOST sends it to the emulator (through
    // the proxy, which counts requests).
    std::env::set_var(
        "PUBSUB_EMULATOR_HOST",
        proxy.url.trim_start_matches("http://"),
    );
    emu.topic("p", "events", "events-sub", false).await;
    let env = Env::with(Default::default(), |c| {
        grant_custom_endpoints(c, &["acme"]);
        c.dispatch.batch = 5_000;
        c.dispatch.max_inflight = 5_000;
        // Room for the 5 s linger below inside one attempt.
        c.dispatch.attempt_timeout_ms = 20_000;
    })
    .await;
    let spec = SourceSpec {
        sinks: vec![pubsub_sink(
            // A request leaves when it is full or when its oldest entry waited linger_ms:
            // 5 s (not 200 ms) so a loaded machine that claims and stages the 2 500 rows
            // slowly still fills the first two requests, which is what this test checks
            // (at 200 ms it once saw [1000, 996, 504]). The last 500 wait out the linger.
            serde_json::json!({"topic": "projects/p/topics/events", "linger_ms": 5_000}),
            false,
            None,
        )],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let mut ids = Vec::new();
    for chunk in 0..25 {
        let hooks: Vec<Hook> = (0..100)
            .map(|i| {
                let h =
                    Hook::new(format!("{{\"n\":{}}}", chunk * 100 + i)).header("X-Event", "push");
                // Even hooks have an event type, delivered as the `ankusa-event-type` attribute.
                if i % 2 == 0 {
                    h.event_type("order.created")
                } else {
                    h
                }
            })
            .collect();
        let r = env.producer.commit_many("acme", "s", &hooks).await.unwrap();
        ids.extend((0..100).map(|i| format!("{}.0", r.first_hook + i)));
    }
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 2_500);

    let sizes: Vec<usize> = proxy.batches().iter().map(|b| b.entries.len()).collect();
    assert!(sizes.iter().all(|n| *n <= 1_000), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 2_500);
    assert_eq!(
        sizes,
        vec![1_000, 1_000, 500],
        "full requests when the rows are there"
    );
    let got = emu.pull_n("p", "events-sub", 2_500).await;
    assert_eq!(got.len(), 2_500);
    let seen: HashSet<String> = got
        .iter()
        .map(|(_, a, _)| a["ankusa-delivery-id"].clone())
        .collect();
    assert_eq!(seen, ids.into_iter().collect::<HashSet<_>>());
    for (data, attrs, _) in &got {
        assert!(data.starts_with(b"{\"n\":"));
        assert_eq!(attrs["X-Event"], "push");
        assert_eq!(attrs["ankusa-tenant"], "acme");
        assert_eq!(attrs["ankusa-attempt"], "1");
        let n = serde_json::from_slice::<serde_json::Value>(data).unwrap()["n"]
            .as_u64()
            .unwrap();
        let et = attrs.get("ankusa-event-type").map(String::as_str);
        assert_eq!(
            et,
            n.is_multiple_of(2).then_some("order.created"),
            "hook {n}"
        );
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_entries_publish_with_their_lane_as_ordering_key_in_commit_order() {
    let emu = PubSubEmulator::start().await;
    emu.topic("p", "orders", "orders-sub", true).await;
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    let spec = SourceSpec {
        sinks: vec![pubsub_sink(
            serde_json::json!({"topic": "projects/p/topics/orders", "endpoint": emu.url, "no_auth": true, "linger_ms": 5}),
            true,
            Some("header:X-Key"),
        )],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let mut hooks = Vec::new();
    for i in 0..6 {
        for k in ["a", "b", "c"] {
            hooks.push(Hook::new(format!("{k}-{i}")).header("X-Key", k));
        }
    }
    env.producer.commit_many("acme", "s", &hooks).await.unwrap();
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.settled().await, 18);
    let got = emu.pull_n("p", "orders-sub", 18).await;
    assert_eq!(got.len(), 18);
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (data, _, key) in got {
        assert!(
            key.starts_with("acme:s:0:"),
            "ordering key is the lane id: {key}"
        );
        per_key
            .entry(key)
            .or_default()
            .push(String::from_utf8(data).unwrap());
    }
    assert_eq!(per_key.len(), 3);
    for bodies in per_key.values() {
        let k = &bodies[0][..1];
        let want: Vec<String> = (0..6).map(|i| format!("{k}-{i}")).collect();
        assert_eq!(bodies, &want);
    }
    worker.shutdown().await;
}

/// An endpoint that answers a publish 2xx without Pub/Sub's answer (`{"messageIds": …}`) —
/// a proxy, a captive portal, a wrong endpoint — did not take the messages: the row is
/// retried with that said, never counted delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_without_message_ids_is_retried_not_counted_delivered() {
    let env = Env::tuned(|c| grant_custom_endpoints(c, &["acme"])).await;
    // The receiver answers every request `200 ok`.
    let spec = SourceSpec {
        sinks: vec![pubsub_sink(
            serde_json::json!({"topic": "projects/p/topics/orders",
                "endpoint": env.receiver.url("pubsub"), "no_auth": true, "linger_ms": 5}),
            false,
            None,
        )],
    };
    env.store.put_source("acme", "s", &spec).await.unwrap();
    let r = env
        .producer
        .commit("acme", "s", Hook::new("{\"n\":1}"))
        .await
        .unwrap();
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert!(
        env.receiver.requests().len() == 1,
        "the publish reached the endpoint"
    );
    let totals = env.store.totals().await.unwrap();
    assert_eq!(totals.delivered, 0, "{totals:?}");
    let v = ankusa::visibility::show_hook(&env.store, "acme", r.first_hook)
        .await
        .unwrap();
    let row = &v.rows[0];
    assert_eq!(
        (row.state, row.attempts),
        (ankusa::visibility::RowState::Retrying, 1),
        "{row:?}"
    );
    let err = row.last_error.as_deref().unwrap_or_default();
    assert!(
        err.contains("pubsub http 200 without the publish answer") && err.contains("ok"),
        "{err}"
    );
    worker.shutdown().await;
}
