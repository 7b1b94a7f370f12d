//! Fair scheduling and isolation against a real redis-server and receiver.

use crate::common;

use ankusa::config::TenantLimits;
use ankusa::store::{ClaimRequest, LeaseAcquire};
use ankusa::testkit::Behavior;
use common::*;
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_tenants_are_claimed_in_the_first_scans_despite_a_huge_backlog() {
    let env = Env::new().await;
    env.http_source("big", "s", &["big"]).await;
    for t in ["s1", "s2", "s3", "s4"] {
        env.http_source(t, "s", &[t]).await;
    }
    // The big tenant commits first: its rows are the oldest in the line.
    let big: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let hooks: Vec<ankusa::Hook> = (0..500)
        .map(|i| ankusa::Hook::new(format!("{{\"i\":{i}}}")))
        .collect();
    for _ in 0..big / 500 {
        env.producer.commit_many("big", "s", &hooks).await.unwrap();
    }
    for t in ["s1", "s2", "s3", "s4"] {
        env.commit_n(t, "s", 100).await;
    }
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 60_000).await.unwrap()
    else {
        panic!()
    };
    let mut per_scan: Vec<HashMap<String, usize>> = Vec::new();
    for _ in 0..3 {
        let c = env
            .store
            .claim(&token, epoch, ClaimRequest::new(500, 100_000))
            .await
            .unwrap();
        assert_eq!(c.rows.len(), 500, "a full page each scan");
        let mut m = HashMap::new();
        for r in &c.rows {
            *m.entry(r.tenant.clone()).or_insert(0) += 1;
        }
        per_scan.push(m);
    }
    // Scan 1: five tenants share the page: 100 each (the small ones have exactly 100).
    for t in ["big", "s1", "s2", "s3", "s4"] {
        assert_eq!(per_scan[0].get(t), Some(&100), "scan 1: {:?}", per_scan[0]);
    }
    // Scan 2 onwards: the small tenants are drained, the big one takes the whole page.
    assert_eq!(
        per_scan[1].get("big"),
        Some(&500),
        "scan 2: {:?}",
        per_scan[1]
    );
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("claimed")]), "1500");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_was_not_reached_goes_first_in_the_next_scan() {
    let env = Env::new().await;
    let tenants: Vec<String> = (0..30).map(|i| format!("t{i:02}")).collect();
    for t in &tenants {
        env.http_source(t, "s", &["x"]).await;
        env.commit_n(t, "s", 5).await;
    }
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 60_000).await.unwrap()
    else {
        panic!()
    };
    // A page of 10 reaches 10 of 30 tenants; the other 20 go first in the next two scans.
    let mut reached = Vec::new();
    for _ in 0..3 {
        let c = env
            .store
            .claim(&token, epoch, ClaimRequest::new(10, 100))
            .await
            .unwrap();
        let mut ts: Vec<String> = c.rows.iter().map(|r| r.tenant.clone()).collect();
        ts.sort();
        ts.dedup();
        assert_eq!(ts.len(), 10, "one row each for ten tenants");
        reached.extend(ts);
    }
    reached.sort();
    reached.dedup();
    assert_eq!(reached.len(), 30, "every tenant reached within three scans");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_sink_hangs_holds_only_its_window_and_others_are_delivered() {
    let env = Env::with(Default::default(), |c| {
        c.dispatch.tenants.insert(
            "default".into(),
            TenantLimits {
                max_inflight: Some(40),
                max_inflight_bytes: None,
                concurrency: Some(16),
                weight: None,
            },
        );
        c.dispatch.attempt_timeout_ms = 30_000;
    })
    .await;
    env.receiver.set("hang", Behavior::Hang);
    env.http_source("stuck", "s", &["hang"]).await;
    env.commit_n("stuck", "s", 300).await;
    for t in ["a", "b", "c"] {
        env.http_source(t, "s", &[t]).await;
        env.commit_n(t, "s", 200).await;
    }
    let worker = env.worker().await;
    let ok = env
        .receiver
        .wait_until_async(LIVENESS, |r| {
            r.iter().filter(|r| r.status == 200).count() >= 600
        })
        .await;
    assert!(
        ok,
        "the other tenants' 600 rows are delivered while one tenant hangs"
    );
    let claimed = env.redis_cmd(&["ZRANGE", &env.key("claimed"), "0", "-1"]);
    let stuck = claimed.lines().filter(|m| m.starts_with("stuck/")).count();
    assert!(
        stuck <= 40,
        "the hanging tenant holds at most its window: {stuck}"
    );
    assert!(
        env.receiver.count_for("hang") <= 16,
        "and at most its concurrency in attempts"
    );
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_source_is_interleaved_with_a_large_one_of_the_same_tenant() {
    // Isolation between sinks is about claimed rows: they wait in one queue per sink key and slots go round-robin
    // across keys. One scan claims the whole backlog here (batch ≥ rows), so the order of
    // starts is the slots' decision alone. (Claims within a tenant are FIFO by due time.)
    let env = Env::with(Default::default(), |c| {
        c.dispatch.concurrency = 4;
        c.dispatch.sink_concurrency = 4;
        c.dispatch.batch = 10_000;
    })
    .await;
    env.http_source("acme", "bulk", &["bulk"]).await;
    env.http_source("acme", "alerts", &["alerts"]).await;
    let big = 9_000;
    env.commit_n("acme", "bulk", big).await;
    env.commit_n("acme", "alerts", 100).await;
    let worker = env.worker().await;
    let ok = env
        .receiver
        .wait_until_async(LIVENESS * 2, |r| {
            r.iter().filter(|r| r.path == "alerts").count() >= 100
        })
        .await;
    assert!(ok);
    let reqs = env.receiver.requests();
    let last_alert = reqs.iter().rposition(|r| r.path == "alerts").unwrap();
    // Keys take slots in turn: the 100 alerts are done within roughly the first 200 requests,
    // not queued behind the bulk source's backlog.
    assert!(
        last_alert < 400,
        "last alert arrived as request #{last_alert}"
    );
    worker.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receiver_never_sees_more_than_sink_concurrency_requests_per_key() {
    let env = Env::with(Default::default(), |c| c.dispatch.sink_concurrency = 3).await;
    env.receiver.set("slow", Behavior::Delay { ms: 20 });
    env.http_source("acme", "s", &["slow"]).await;
    env.commit_n("acme", "s", 60).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    assert_eq!(env.receiver.count_for("slow"), 60);
    assert_eq!(env.receiver.max_concurrency("slow"), 3);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconfigure_under_load_changes_the_cap_and_drops_nothing() {
    let env = Env::with(Default::default(), |c| c.dispatch.sink_concurrency = 8).await;
    env.receiver.set("slow", Behavior::Delay { ms: 10 });
    env.http_source("acme", "s", &["slow"]).await;
    env.commit_n("acme", "s", 400).await;
    let worker = env.worker().await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 50)
            .await
    );
    let mut cfg = (*worker.config()).clone();
    cfg.dispatch.sink_concurrency = 2;
    worker.reconfigure(&cfg).unwrap();
    let mark = env.receiver.count();
    // Attempts already running finish; after them at most 2 run at once.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= mark + 20)
            .await
    );
    let later: Vec<usize> = env
        .receiver
        .requests()
        .iter()
        .skip(mark + 10)
        .map(|r| r.concurrent)
        .collect();
    assert!(later.iter().all(|c| *c <= 2), "{later:?}");
    worker.tick().await.unwrap();
    let ids = env.receiver.header_counts("ankusa-delivery-id");
    assert_eq!(ids.len(), 400, "every row delivered");
    assert_eq!(env.store.totals().await.unwrap().delivered, 400);
    worker.shutdown().await;
}

/// Fairness across a tenant's sources holds inside the claim, not
/// only among claimed rows. Tenant window 50, source A with 1 000 hooks to a slow sink
/// (200 ms), then 5 hooks on source B of the same tenant: B's hooks are delivered while most
/// of A is still pending, not behind A's backlog (commit scores a source's rows by virtual
/// time, so the claim's oldest-first order interleaves the sources).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_source_of_a_tenant_is_claimed_before_the_first_ones_backlog() {
    let env = Env::with(Default::default(), |c| {
        c.dispatch.tenants.insert(
            "default".into(),
            TenantLimits {
                max_inflight: Some(50),
                max_inflight_bytes: None,
                concurrency: None,
                weight: None,
            },
        );
    })
    .await;
    env.receiver.set("slow", Behavior::Delay { ms: 200 });
    env.http_source("acme", "a", &["slow"]).await;
    env.http_source("acme", "b", &["b"]).await;
    env.commit_n("acme", "a", 1_000).await;
    let worker = env.worker().await;
    // A's backlog is being worked on (its window is full of A's rows) before B commits.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().any(|r| r.path == "slow"))
            .await
    );
    env.commit_n("acme", "b", 5).await;
    let ok = env
        .receiver
        .wait_until_async(LIVENESS, |r| {
            r.iter().filter(|r| r.path == "b").count() >= 5
        })
        .await;
    assert!(ok, "B's hooks were delivered");
    let a_done = env.receiver.count_for("slow");
    assert!(
        a_done < 500,
        "B waited behind A's backlog: {a_done} of A's 1000 were delivered first"
    );
    assert!(env.pending_rows() >= 500, "most of A is still pending");
    worker.abort();
}

/// Weighted shares (`dispatch.tenants.<id>.weight`) inside one claim: a page splits 3:1
/// between tenants of weights 3 and 1, rows and bytes of the byte window alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_page_and_its_byte_room_split_by_the_tenants_weights() {
    let env = Env::new().await;
    for t in ["heavy", "light"] {
        env.http_source(t, "s", &[t]).await;
        let hooks: Vec<ankusa::Hook> = (0..400).map(|_| ankusa::Hook::new("0123456789")).collect();
        env.producer.commit_many(t, "s", &hooks).await.unwrap();
    }
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 60_000).await.unwrap()
    else {
        panic!()
    };
    let weights = ankusa::store::ClaimWeights {
        default: 1,
        tenants: vec![("heavy".into(), 3)],
    };
    let per_tenant = |c: &ankusa::store::ClaimResult| {
        let mut m: HashMap<String, usize> = HashMap::new();
        for r in &c.rows {
            *m.entry(r.tenant.clone()).or_insert(0) += 1;
        }
        (m.get("heavy").copied(), m.get("light").copied())
    };
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                weights: Some(&weights),
                ..ClaimRequest::new(100, 1_000)
            },
        )
        .await
        .unwrap();
    assert_eq!(per_tenant(&c), (Some(75), Some(25)), "rows split 3:1");
    // The byte window: 400 bytes of 10-byte hooks, 300 to heavy and 100 to light.
    let bytes = ankusa::store::ByteRooms {
        global: 400,
        alone: false,
        default_tenant: 1 << 20,
        tenants: Vec::new(),
    };
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                bytes: Some(&bytes),
                weights: Some(&weights),
                ..ClaimRequest::new(100, 1_000)
            },
        )
        .await
        .unwrap();
    assert_eq!(per_tenant(&c), (Some(30), Some(10)), "bytes split 3:1");
    // Without weights the page splits evenly, as before.
    let c = env
        .store
        .claim(&token, epoch, ClaimRequest::new(100, 1_000))
        .await
        .unwrap();
    assert_eq!(per_tenant(&c), (Some(50), Some(50)));
}

fn weighted(tenant: &str, weight: u32) -> (String, TenantLimits) {
    (
        tenant.into(),
        TenantLimits {
            weight: Some(weight),
            ..Default::default()
        },
    )
}

/// Two saturated tenants at weights 3 and 1, with the global slots and window the contended
/// resources: the receiver sees 3:1 (±10 %) of the deliveries while both have a backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_tenants_of_weights_three_and_one_get_three_to_one_of_the_deliveries() {
    let env = Env::tuned(|c| {
        c.dispatch.tenants.extend([weighted("heavy", 3)]);
        c.dispatch.concurrency = 8;
        c.dispatch.sink_concurrency = 64;
        c.dispatch.max_inflight = 400;
    })
    .await;
    for t in ["heavy", "light"] {
        env.receiver.set(t, Behavior::Delay { ms: 5 });
        env.http_source(t, "s", &[t]).await;
        env.commit_n(t, "s", 3_000).await;
    }
    let worker = env.worker().await;
    // 2 000 deliveries: heavy (3/4 of them) and light both still have a backlog by then.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 2_000)
            .await,
        "2000 deliveries"
    );
    let first: Vec<String> = env
        .receiver
        .requests()
        .into_iter()
        .take(2_000)
        .map(|r| r.path)
        .collect();
    let heavy = first.iter().filter(|p| *p == "heavy").count() as f64;
    let light = first.iter().filter(|p| *p == "light").count() as f64;
    let ratio = heavy / light;
    assert!(
        (2.7..=3.3).contains(&ratio),
        "heavy {heavy}, light {light}: {ratio:.2}, not 3:1 ±10 %"
    );
    worker.abort();
}

/// A weight-1 tenant's burst beside a weight-10 backlog is served within its share: while
/// its 20 hooks are delivered the heavy tenant gets at most about ten times as many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_burst_of_a_weight_one_tenant_is_served_within_its_share_beside_a_weight_ten_backlog(
) {
    let env = Env::tuned(|c| {
        c.dispatch.tenants.extend([weighted("heavy", 10)]);
        c.dispatch.concurrency = 8;
        c.dispatch.sink_concurrency = 64;
    })
    .await;
    for t in ["heavy", "light"] {
        env.receiver.set(t, Behavior::Delay { ms: 5 });
        env.http_source(t, "s", &[t]).await;
    }
    env.commit_n("heavy", "s", 3_000).await;
    let worker = env.worker().await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 100)
            .await,
        "the heavy backlog is being delivered"
    );
    let burst = std::time::Instant::now();
    env.commit_n("light", "s", 20).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.path == "light").count()
                >= 20)
            .await,
        "the burst is delivered"
    );
    let reqs = env.receiver.requests();
    let last_light = reqs
        .iter()
        .filter(|r| r.path == "light")
        .map(|r| r.at)
        .max()
        .unwrap();
    let heavy_meanwhile = reqs
        .iter()
        .filter(|r| r.path == "heavy" && r.at > burst && r.at <= last_light)
        .count();
    let heavy_total = reqs.iter().filter(|r| r.path == "heavy").count();
    assert!(
        heavy_total < 3_000,
        "the heavy backlog lasted past the burst"
    );
    // Its share is 1/11: 20 hooks beside 200 heavy ones, plus the attempts already running
    // and the commit's own time; a burst queued behind the backlog would see thousands.
    assert!(
        heavy_meanwhile <= 300,
        "{heavy_meanwhile} heavy deliveries while the light burst of 20 waited"
    );
    worker.abort();
}
