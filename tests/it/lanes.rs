//! Ordered lanes against a real redis-server and receiver: per-lane commit
//! order, release on every terminal outcome, the sweep, awkward keys.

use crate::common;

use ankusa::model::{SinkEntry, SourceSpec};
use ankusa::store::{ClaimRequest, LeaseAcquire};
use ankusa::testkit::{Behavior, Reply};
use ankusa::Hook;
use common::*;
use std::collections::HashMap;

fn ordered(env: &Env, path: &str, key: &str) -> SinkEntry {
    SinkEntry {
        ordered: true,
        key: Some(key.into()),
        ..env.http_sink(path)
    }
}

/// Commit hooks `{"lane": k, "n": i}` in batches; returns (lane key, n) per hook id.
async fn commit_lanes(
    env: &Env,
    source: &str,
    keys: &[String],
    per_lane: usize,
) -> HashMap<u64, (String, usize)> {
    let mut out = HashMap::new();
    for n in 0..per_lane {
        let hooks: Vec<Hook> = keys
            .iter()
            .map(|k| Hook::new(serde_json::json!({"lane": k, "n": n}).to_string()))
            .collect();
        for (chunk_i, chunk) in hooks.chunks(100).enumerate() {
            let r = env
                .producer
                .commit_many("acme", source, chunk)
                .await
                .unwrap();
            for j in 0..chunk.len() {
                out.insert(
                    r.first_hook + j as u64,
                    (keys[chunk_i * 100 + j].clone(), n),
                );
            }
        }
    }
    out
}

/// For each lane, the `n` of each hook's first successful delivery, in arrival order.
fn first_success_order(
    env: &Env,
    path: &str,
    hooks: &HashMap<u64, (String, usize)>,
) -> HashMap<String, Vec<usize>> {
    let mut seen = std::collections::HashSet::new();
    let mut order: HashMap<String, Vec<usize>> = HashMap::new();
    for r in env.receiver.requests_for(path) {
        if !(200..300).contains(&r.status) {
            continue;
        }
        let id: u64 = r.header("ankusa-hook-id").unwrap().parse().unwrap();
        if seen.insert(id) {
            let (lane, n) = &hooks[&id];
            order.entry(lane.clone()).or_default().push(*n);
        }
    }
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lane_delivers_in_commit_order_while_a_fifth_of_first_attempts_fail() {
    // Breakers off: this test is about lane order under failures (tests/breakers.rs covers
    // breakers). Five failures in a row somewhere among ~2 500 attempts at 20 % are likely,
    // and an open breaker would park all 100 lanes of the one sink key for 5 s, then 10 s.
    let env = Env::tuned(|c| c.dispatch.breaker_failures = 0).await;
    env.receiver.set(
        "o",
        Behavior::FailFraction {
            status: 500,
            fraction: 0.2,
            seed: 11,
        },
    );
    let spec = SourceSpec {
        sinks: vec![ordered(&env, "o", "json:/lane")],
    };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("order-{i}")).collect();
    let hooks = commit_lanes(&env, "orders", &keys, 20).await;
    let worker = env.worker().await;
    let total = hooks.len();
    let done = env.receiver.wait_until_async(LIVENESS, |reqs| {
        reqs.iter()
            .filter(|r| r.status == 200)
            .filter_map(|r| r.header("ankusa-hook-id"))
            .collect::<std::collections::HashSet<_>>()
            .len()
            >= total
    });
    assert!(done.await, "all {total} hooks delivered");
    let order = first_success_order(&env, "o", &hooks);
    assert_eq!(order.len(), 100);
    for (lane, ns) in &order {
        assert_eq!(ns, &(0..20).collect::<Vec<_>>(), "lane {lane} out of order");
    }
    let failures = env
        .receiver
        .requests_for("o")
        .iter()
        .filter(|r| r.status == 500)
        .count();
    assert!(
        failures > 100,
        "the endpoint failed a fraction of attempts ({failures})"
    );
    // Lanes progress in parallel: the receiver saw more than one lane in flight at once.
    assert!(env.receiver.max_concurrency("o") > 1);
    worker.tick().await.unwrap();
    assert_eq!(env.redis_cmd(&["GET", &env.key("lane_members")]), "0");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_head_blocks_only_its_lane_and_its_dead_letter_releases_the_next_member() {
    use sha2::Digest;
    let env = Env::with(Default::default(), |c| c.retry.max_elapsed_ms = 500).await;
    let poison_sha = hex::encode(sha2::Sha256::digest(b"poison"));
    env.receiver.set(
        "o",
        Behavior::FailBodies {
            status: 500,
            sha256: vec![poison_sha],
        },
    );
    let spec = SourceSpec {
        sinks: vec![ordered(&env, "o", "header:x-lane")],
    };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let commit = |body: &'static str, lane: &'static str| {
        let p = env.producer.clone();
        async move {
            p.commit("acme", "orders", Hook::new(body).header("x-lane", lane))
                .await
                .unwrap()
                .first_hook
        }
    };
    let poison = commit("poison", "a").await;
    let a2 = commit("a2", "a").await;
    let a3 = commit("a3", "a").await;
    let b1 = commit("b1", "b").await;
    let b2 = commit("b2", "b").await;
    let worker = env.worker().await;
    // Lane b is not held up by lane a's poison head.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.status == 200).count()
                >= 2)
            .await
    );
    let early: Vec<u64> = env
        .receiver
        .requests_for("o")
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.header("ankusa-hook-id").unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        early,
        [b1, b2],
        "lane b delivered while lane a's head retries"
    );
    // At its horizon the poison head is dead-lettered and the lane moves on, in order.
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.iter().filter(|r| r.status == 200).count()
                >= 4)
            .await
    );
    worker.tick().await.unwrap();
    let ok: Vec<u64> = env
        .receiver
        .requests_for("o")
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.header("ankusa-hook-id").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ok, [b1, b2, a2, a3]);
    let attempts_on_poison = env
        .receiver
        .requests_for("o")
        .iter()
        .filter(|r| r.status == 500)
        .count();
    assert!(
        attempts_on_poison >= 2,
        "the poison head was retried ({attempts_on_poison})"
    );
    let dead = ankusa::dlq::list(&env.store, "acme", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].get("hook"), poison.to_string());
    assert_eq!(dead[0].get("reason"), "retry_horizon(http)");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_on_the_head_releases_the_lane_at_once() {
    let env = Env::new().await;
    env.receiver
        .set("o", Behavior::Sequence(vec![Reply::status(404)]));
    let spec = SourceSpec {
        sinks: vec![ordered(&env, "o", "json:/lane")],
    };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let keys = vec!["k".to_string()];
    let hooks = commit_lanes(&env, "orders", &keys, 5).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    let reqs = env.receiver.requests_for("o");
    assert_eq!(reqs.len(), 5, "one attempt each: the 404 is permanent");
    assert_eq!(reqs[0].status, 404);
    let order: Vec<usize> = reqs
        .iter()
        .map(|r| hooks[&r.header("ankusa-hook-id").unwrap().parse::<u64>().unwrap()].1)
        .collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
    let dead = ankusa::dlq::list(&env.store, "acme", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].get("reason").starts_with("permanent(http 404"),
        "{}",
        dead[0].get("reason")
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_heals_a_lane_whose_head_row_vanished() {
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![ordered(&env, "o", "json:/lane")],
    };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let hooks = commit_lanes(&env, "orders", &["x".to_string()], 3).await;
    let head = hooks
        .iter()
        .find(|(_, (_, n))| *n == 0)
        .map(|(id, _)| *id)
        .unwrap();
    // Delete the head's due entry behind the scheduler's back: the lane has a head pointer
    // to a row that is nowhere, and two members waiting.
    assert_eq!(
        env.redis_cmd(&["ZREM", &env.key("due:acme"), &format!("{head}.0")]),
        "1"
    );
    let worker = env.worker().await;
    let ok = env
        .receiver
        .wait_until_async(LIVENESS, |r| r.len() >= 2)
        .await;
    assert!(ok, "the members were promoted and delivered");
    worker.tick().await.unwrap();
    let order: Vec<usize> = env
        .receiver
        .requests_for("o")
        .iter()
        .map(|r| hooks[&r.header("ankusa-hook-id").unwrap().parse::<u64>().unwrap()].1)
        .collect();
    assert_eq!(order, [1, 2]);
    assert_eq!(env.redis_cmd(&["GET", &env.key("lane_members")]), "0");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_ordered_sink_the_claim_runs_no_sweep() {
    let env = Env::new().await;
    env.http_source("acme", "plain", &["p"]).await;
    env.commit_n("acme", "plain", 10).await;
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 5_000).await.unwrap()
    else {
        panic!("lease")
    };
    let c = env
        .store
        .claim(&token, epoch, ClaimRequest::new(100, 100))
        .await
        .unwrap();
    assert_eq!(c.rows.len(), 10);
    assert_eq!(
        c.lane_members, None,
        "no sweep: the partition holds no lane member"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_lane_keys_never_collide_and_all_deliver_in_order() {
    let env = Env::new().await;
    let spec = SourceSpec {
        sinks: vec![ordered(&env, "o", "json:/lane")],
    };
    env.store.put_source("acme", "orders", &spec).await.unwrap();
    let keys: Vec<String> = vec![
        "a:b".into(),
        "a".into(),
        "{x}".into(),
        "}{".into(),
        "with space".into(),
        "ünïcødé ✓".into(),
        "".into(),
        "k".repeat(1024),
        "acme:orders:0:".into(),
    ];
    let ids: std::collections::HashSet<String> = keys
        .iter()
        .map(|k| ankusa::keyspace::Keyspace::lane_id("acme", "orders", 0, k))
        .collect();
    assert_eq!(ids.len(), keys.len());
    let hooks = commit_lanes(&env, "orders", &keys, 4).await;
    let worker = env.worker().await;
    worker.tick().await.unwrap();
    let order = first_success_order(&env, "o", &hooks);
    assert_eq!(order.len(), keys.len());
    for (lane, ns) in order {
        assert_eq!(ns, [0, 1, 2, 3], "lane {lane:?}");
    }
    // Every key sits in the partition's slot: one hash tag, nothing user-made inside braces
    // (besides the instance's own keys: its partition count and the workers' heartbeats).
    let all = env.redis_cmd(&["KEYS", "*"]);
    assert!(
        all.lines()
            .all(|k| k.starts_with(&env.key("")) || k.starts_with(&env.instance_key(""))),
        "{all}"
    );
    worker.shutdown().await;
}
