//! Circuit breakers per sink key against a real redis-server and receiver. Times
//! below are lower bounds the breaker guarantees (no request during an open period), not
//! performance claims.

use crate::common;

use ankusa::keyspace::partition_of;
use ankusa::testkit::{Behavior, Reply};
use common::*;
use std::time::Duration;

fn breaker_env(open_ms: u64, max_open_ms: u64) -> impl FnOnce(&mut ankusa::Config) {
    move |c| {
        c.dispatch.breaker_failures = 3;
        c.dispatch.breaker_open_ms = open_ms;
        c.dispatch.breaker_max_open_ms = max_open_ms;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 20;
        c.dispatch.sink_concurrency = 1;
    }
}

/// Three failures open `acme`'s sink key, its rows are parked (no request) for `open_ms`,
/// one probe succeeds and closes it, the rest flow. With `partitions` > 1 the
/// breaker is in the session of `acme`'s partition only (its snapshot in that partition's
/// keys, none in the others'), and a tenant of another partition committed while it is open
/// is delivered before the probe; with one partition, the other tenant's own key is not held
/// either.
async fn three_failures_open_the_breaker_and_one_probe_closes_it(partitions: u32) {
    const OPEN_MS: u64 = 2_000;
    let env = Env::with(Default::default(), |c| {
        breaker_env(OPEN_MS, 4 * OPEN_MS)(c);
        c.partitions = partitions;
    })
    .await;
    let home = partition_of("acme", partitions);
    let other = common::spread::tenants_covering(partitions, partitions as usize)
        .into_iter()
        .find(|t| partitions == 1 || partition_of(t, partitions) != home)
        .expect("a tenant of another partition");
    env.receiver.set(
        "e",
        Behavior::Sequence(vec![
            Reply::status(500),
            Reply::status(500),
            Reply::status(500),
        ]),
    );
    env.http_source("acme", "s", &["e"]).await;
    env.http_source(&other, "s", &["f"]).await;
    env.commit_n("acme", "s", 10).await;
    let breakers = |n: u32| env.part_key(n, "breakers");
    let worker = env.worker().await;
    common::procs::eventually("acme's breaker is open", LIVENESS, || async {
        let v = env.redis_cmd(&["HVALS", &breakers(home)]);
        match v.lines().next() {
            Some(s) if s.ends_with(":1") => Ok(()),
            _ => Err(format!("snapshot {v:?}")),
        }
    })
    .await;
    // While it is open, another tenant (another partition's session when P > 1) flows.
    env.commit_n(&other, "s", 10).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r
                .iter()
                .filter(|r| r.path == "f" && r.status == 200)
                .count()
                == 10)
            .await,
        "{other}'s rows delivered"
    );
    assert_eq!(
        env.receiver.count_for("e"),
        3,
        "{other}'s rows were delivered while acme's key was still open (no probe yet)"
    );
    for n in (0..partitions).filter(|n| *n != home) {
        assert_eq!(
            env.redis_cmd(&["HLEN", &breakers(n)]),
            "0",
            "partition {n} has no breaker of acme's"
        );
    }
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r
                .iter()
                .filter(|r| r.path == "e" && r.status == 200)
                .count()
                == 10)
            .await
    );
    let reqs = env.receiver.requests_for("e");
    assert_eq!(reqs.iter().filter(|r| r.status == 500).count(), 3);
    // No request reached the key while it was open: the probe came ≥ open_ms after the 3rd failure.
    let gap = reqs[3].at.duration_since(reqs[2].at);
    assert!(
        gap >= Duration::from_millis(OPEN_MS - 20),
        "probe after {gap:?}"
    );
    // After the probe succeeded the rest flowed without another open period.
    assert_eq!(reqs.len(), 13);
    assert!(ankusa::dlq::list(&env.store, "acme", 10)
        .await
        .unwrap()
        .is_empty());
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failures_open_the_breaker_and_one_successful_probe_closes_it() {
    three_failures_open_the_breaker_and_one_probe_closes_it(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_four_partitions_a_breaker_opens_in_its_tenants_partition_only() {
    three_failures_open_the_breaker_and_one_probe_closes_it(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_reopens_for_twice_as_long_after_a_failed_probe_up_to_the_maximum() {
    let env = Env::with(Default::default(), breaker_env(200, 800)).await;
    env.receiver.set("e", Behavior::Status(500));
    env.http_source("acme", "s", &["e"]).await;
    env.commit_n("acme", "s", 4).await;
    let worker = env.worker().await;
    // 3 failures, then probes after 200, 400, 800, 800 ms.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 7)
            .await
    );
    let reqs = env.receiver.requests_for("e");
    let gaps: Vec<u128> = reqs
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at).as_millis())
        .collect();
    let probes = &gaps[2..6];
    for (gap, open) in probes.iter().zip([200u128, 400, 800, 800]) {
        assert!(
            *gap >= open - 20,
            "probe gaps {probes:?} (all gaps {gaps:?})"
        );
    }
    // Parked rows keep their attempt count: every row attempted at most as often as requests.
    let mut attempts = 0;
    for id in env
        .redis_cmd(&["ZRANGE", &env.key("due:acme"), "0", "-1"])
        .lines()
    {
        let a = env.redis_cmd(&["HGET", &env.key(&format!("row:{id}")), "a"]);
        attempts += a.parse::<usize>().unwrap_or(0);
    }
    assert!(
        attempts <= env.receiver.count_for("e"),
        "attempts {attempts} never exceed requests"
    );
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_never_open_the_breaker() {
    let env = Env::with(Default::default(), breaker_env(60_000, 60_000)).await;
    env.receiver.set("e", Behavior::Status(404));
    env.http_source("acme", "s", &["e"]).await;
    env.commit_n("acme", "s", 10).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(
        env.receiver.count_for("e"),
        10,
        "every row attempted once: nothing parked"
    );
    let dead = ankusa::dlq::list(&env.store, "acme", 100).await.unwrap();
    assert_eq!(dead.len(), 10);
    assert!(dead
        .iter()
        .all(|d| d.get("reason").starts_with("permanent(http 404")));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_parked_past_its_retry_horizon_is_dead_lettered() {
    let env = Env::with(Default::default(), |c| {
        breaker_env(5_000, 5_000)(c);
        c.retry.max_elapsed_ms = 300;
    })
    .await;
    env.receiver.set("e", Behavior::Status(503));
    env.http_source("acme", "s", &["e"]).await;
    env.commit_n("acme", "s", 6).await;
    let worker = env.worker().await;
    // The breaker stays open far longer than the horizon: parks end at the horizon, and a
    // row parked again at or past it is dead-lettered, without another request.
    let store = env.store.clone();
    let mut dead = 0;
    let mut state = worker.watch_state();
    for _ in 0..1000 {
        dead = store.totals().await.unwrap().dead_lettered;
        if dead == 6 {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), state.changed()).await;
    }
    assert_eq!(dead, 6);
    let letters = ankusa::dlq::list(&env.store, "acme", 100).await.unwrap();
    assert!(
        letters
            .iter()
            .all(|d| d.get("reason") == "retry_horizon(http)"),
        "{letters:?}"
    );
    assert!(
        env.receiver.count_for("e") < 6 + 3,
        "parked rows spent no attempts: {} requests",
        env.receiver.count_for("e")
    );
    worker.shutdown().await;
}

/// A breaker survives a leader change. The leader dies with a
/// breaker open on a sink that is still down; the new leader starts it open (the snapshot
/// the old one wrote to Redis), parks the rows for what is left of the period, then sends
/// exactly one probe, which fails and opens it again for twice as long. Before, the new
/// leader started every breaker closed and sent a burst of requests at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_starts_an_open_breaker_open_and_sends_one_probe() {
    let env = Env::with(Default::default(), breaker_env(3_000, 60_000)).await;
    env.receiver.set("e", Behavior::Status(503));
    env.http_source("acme", "s", &["e"]).await;
    env.commit_n("acme", "s", 20).await;
    let breakers = env.key("breakers");
    let snapshot = || {
        let v = env.redis_cmd(&["HVALS", &breakers]);
        v.lines().next().map(str::to_string).unwrap_or_default()
    };
    let worker = env.worker().await;
    assert!(
        common::procs::poll_until(LIVENESS, || async { snapshot().ends_with(":1") }).await,
        "the open breaker is kept in Redis"
    );
    let state = worker.watch_state();
    assert!(common::procs::poll_until(LIVENESS, || async { state.borrow().running == 0 }).await);
    let before = env.receiver.count_for("e");
    assert!(before >= 3);
    worker.abort(); // the leader dies with the breaker open

    let worker = env.worker().await;
    assert!(
        common::procs::poll_until(LIVENESS, || async { snapshot().ends_with(":2") }).await,
        "the new leader's probe failed and reopened the breaker"
    );
    assert_eq!(
        env.receiver.count_for("e"),
        before + 1,
        "the new leader sent one probe, nothing else"
    );
    assert_eq!(env.store.totals().await.unwrap().delivered, 0);
    worker.abort();
}

/// a breaker's transitions and dead letters are operational events in the
/// partition's `events` stream: `breaker_opened` (with the last error) when three failures
/// open it, `breaker_closed` when the probe is answered; `row_dead_lettered` for a row out of
/// attempts — one per sink entry per minute, carrying the hook, its event type and the start
/// of its body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_transitions_and_dead_letters_are_operational_events() {
    use ankusa::model::{EntryRetry, SinkEntry};
    // Each tenant's own events URL (`tenants.<id>.events_url`): acme's gets acme's events,
    // beta's none of them.
    let tenant_events = ankusa::testkit::Receiver::start_with(ankusa::testkit::ReceiverOptions {
        record_bodies: true,
        threads: 1,
    })
    .expect("receiver starts");
    let (acme_url, beta_url) = (tenant_events.url("acme"), tenant_events.url("beta"));
    let env = Env::with(Default::default(), move |c| {
        breaker_env(500, 2_000)(c);
        for (tenant, url) in [("acme", acme_url), ("beta", beta_url)] {
            let t = c.tenants.entry(tenant.into()).or_default();
            t.events_url = Some(url);
            t.events_signing_secret = Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into());
        }
    })
    .await;
    env.receiver.set(
        "e",
        Behavior::Sequence(vec![
            Reply::status(503),
            Reply::status(503),
            Reply::status(503),
        ]),
    );
    env.http_source("acme", "s", &["e"]).await;
    env.receiver.set("d", Behavior::Status(500));
    let once = SinkEntry {
        retry: Some(EntryRetry {
            max_attempts: Some(1),
            ..Default::default()
        }),
        ..env.http_sink("d")
    };
    env.put_source("acme", "dead", vec![once.clone()]).await;
    // One hook to two entries, one of which dead-letters it: exhausted once both ended.
    env.put_source("acme", "mixed", vec![env.http_sink("m"), once])
        .await;
    env.commit_n("acme", "mixed", 1).await;
    env.commit_n("acme", "s", 5).await;
    let dead: Vec<u64> = {
        let hooks: Vec<ankusa::Hook> = (0..3)
            .map(|i| ankusa::Hook::new(format!("{{\"order\":{i}}}")).event_type("order.created"))
            .collect();
        let (_, ids) = env
            .producer
            .commit_ids("acme", "dead", &hooks)
            .await
            .unwrap();
        ids
    };
    let worker = env.worker().await;
    let events = || async { env.store.sink_events(100).await.unwrap() };
    let of = |evs: &[ankusa::store::SinkEvent], kind: &str, source: &str| {
        evs.iter()
            .filter(|e| e.kind == kind && e.source == source)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(
        common::procs::poll_until(LIVENESS, || async {
            let evs = events().await;
            !of(&evs, "breaker_closed", "s").is_empty()
                && env.store.totals().await.unwrap().dead_lettered == 4
                && of(&evs, "hook_exhausted", "dead").len() >= 3
                && !of(&evs, "hook_exhausted", "mixed").is_empty()
        })
        .await,
        "events: {:#?}",
        events().await
    );
    let evs = events().await;
    let opened = of(&evs, "breaker_opened", "s");
    assert_eq!(opened.len(), 1, "{evs:#?}");
    assert_eq!((opened[0].tenant.as_str(), opened[0].sink), ("acme", 0));
    assert!(
        opened[0].reason.contains("http 503"),
        "{:?}",
        opened[0].reason
    );
    assert!(opened[0].id < of(&evs, "breaker_closed", "s")[0].id);
    let dl = of(&evs, "row_dead_lettered", "dead");
    assert_eq!(dl.len(), 1, "one per entry per minute: {evs:#?}");
    let e = &dl[0];
    assert!(dead.contains(&e.hook.expect("hook")), "{e:?}");
    // An event about one of the dead hooks names it: its event type and body's start.
    let names_the_order = |e: &ankusa::store::SinkEvent| {
        e.event_type.as_deref() == Some("order.created")
            && e.body_prefix
                .as_deref()
                .unwrap_or("")
                .starts_with("{\"order\":")
    };
    assert!(names_the_order(e), "{e:?}");
    assert_eq!((e.attempts, e.suppressed), (Some(1), Some(0)));
    assert!(e.reason.starts_with("max_attempts(http)"), "{:?}", e.reason);
    // `hook_exhausted`: once per hook whose rows all ended with one dead-lettered — each
    // of the three (their only row dead-lettered), none of the five hooks of `s`
    // (delivered once the breaker closed).
    let ex = of(&evs, "hook_exhausted", "dead");
    let mut hooks: Vec<u64> = ex.iter().filter_map(|e| e.hook).collect();
    hooks.sort_unstable();
    let mut want = dead.clone();
    want.sort_unstable();
    assert_eq!(hooks, want, "one each: {evs:#?}");
    for e in &ex {
        assert_eq!(
            (e.tenant.as_str(), e.sink, e.module.as_str()),
            ("acme", 0, "http")
        );
        assert!(names_the_order(e), "{e:?}");
        assert!(
            e.reason.starts_with("1 row dead-lettered"),
            "{:?}",
            e.reason
        );
    }
    assert!(of(&evs, "hook_exhausted", "s").is_empty(), "{evs:#?}");
    let mixed = of(&evs, "hook_exhausted", "mixed");
    assert_eq!(mixed.len(), 1, "{evs:#?}");
    assert!(
        mixed[0].reason.starts_with("1 row dead-lettered"),
        "{mixed:?}"
    );
    assert_eq!(
        env.receiver.count_for("m"),
        1,
        "the other entry delivered it"
    );
    // Every event of the stream (all acme's) reached acme's events URL, signed, as it is in
    // the stream; beta's got nothing (the POSTs run in the background: wait for them).
    let posted = || {
        tenant_events
            .requests_for("acme")
            .iter()
            .map(|r| {
                assert!(r.header("webhook-signature").is_some(), "signed: {r:?}");
                let body = r.body.as_deref().expect("body recorded");
                serde_json::from_slice::<ankusa::store::SinkEvent>(body).expect("an event")
            })
            .collect::<Vec<_>>()
    };
    let streamed = events().await;
    assert!(
        common::procs::poll_until(LIVENESS, || async {
            let got = posted();
            streamed.iter().all(|e| got.contains(e))
        })
        .await,
        "acme's events URL got {:?} of {streamed:?}",
        posted()
    );
    let now = events().await;
    let got = posted();
    assert!(
        got.iter().all(|e| now.contains(e)),
        "{got:?} not all in {now:?}"
    );
    assert!(got.iter().all(|e| e.tenant == "acme"));
    assert!(tenant_events.requests_for("beta").is_empty());
    worker.shutdown().await;
}
