//! The time budget of one script call (`dispatch.script_budget_ms`), against a
//! real redis-server: a claim or settle call over its budget stops early and leaves the rest
//! for the next call, without losing, repeating or reordering anything. These tests check
//! behaviour only (what is claimed, settled and delivered, in which order); how long a call
//! takes is measured by `ankusa bench --scripts` (BENCHMARKS.md), never asserted here.

use crate::common;

use ankusa::store::{ClaimRequest, LeaseAcquire, Outcome, SettleOp};
use common::*;
use std::collections::HashSet;
use std::time::Duration;

/// The process-wide metrics recorder, so the worker's budget counters can be read.
fn metrics() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static H: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    H.get_or_init(|| ankusa::metrics::install("test").expect("recorder installs"))
}

/// The sum of the series of `name` that carry `label` (e.g. `script="claim"`).
fn metric(name: &str, label: &str) -> f64 {
    metrics()
        .render()
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// `n` tenants `t0000…` with one source and one row each, committed in that order (so the
/// line of due tenants is in that order too: same due time, then by name).
async fn one_row_tenants(env: &Env, n: usize) -> Vec<String> {
    let tenants: Vec<String> = (0..n).map(|i| format!("t{i:04}")).collect();
    for t in &tenants {
        env.http_source(t, "s", &["small"]).await;
    }
    for t in &tenants {
        env.commit(t, "s", format!("{{\"tenant\":\"{t}\"}}")).await;
    }
    tenants
}

/// `EVALSHA` calls the test's own Redis has answered so far (`INFO commandstats`).
fn evalsha_calls(env: &Env) -> u64 {
    env.redis_cmd(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

async fn lease(env: &Env) -> (String, u64) {
    let LeaseAcquire::Acquired { token, epoch } =
        env.store.lease_acquire("t", 60_000).await.unwrap()
    else {
        panic!("lease not acquired")
    };
    (token, epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_out_of_budget_stops_early_and_the_next_goes_on_where_it_stopped() {
    let env = Env::new().await;
    let tenants = one_row_tenants(&env, 2_000).await;
    let (token, epoch) = lease(&env).await;
    // A 1 µs budget: every call stops after the first tenant it visits (at least one is
    // always visited, so each call makes progress).
    let tiny = Some(Duration::from_micros(1));
    let mut order: Vec<String> = Vec::new();
    let mut calls = 0;
    while order.len() < tenants.len() {
        let c = env
            .store
            .claim(
                &token,
                epoch,
                ClaimRequest {
                    budget: tiny,
                    ..ClaimRequest::new(500, 100)
                },
            )
            .await
            .unwrap();
        calls += 1;
        assert!(
            !c.rows.is_empty(),
            "call {calls}: every call claims something"
        );
        assert!(c.rows.len() < 500, "call {calls}: stopped before the page");
        order.extend(c.rows.iter().map(|r| r.tenant.clone()));
        if order.len() < tenants.len() {
            assert!(c.budget_stopped, "call {calls}: says the budget stopped it");
        }
        assert!(calls <= tenants.len(), "no progress");
    }
    // Every tenant exactly once, in the order of the line: a tenant a call did not reach
    // went first in the next one.
    assert_eq!(order, tenants);
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("claimed")]), "2000");
    assert_eq!(env.redis_cmd(&["ZCARD", &env.key("tenants")]), "0");

    // Without the pressure of a budget the same page is full: 500 tenants in one call.
    let more = one_row_tenants(&env, 1_000).await;
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                budget: Some(Duration::from_secs(1)),
                ..ClaimRequest::new(500, 100)
            },
        )
        .await
        .unwrap();
    assert_eq!(c.rows.len(), 500);
    assert!(!c.budget_stopped);
    let got: Vec<&String> = c.rows.iter().map(|r| &r.tenant).collect();
    assert_eq!(got, more[..500].iter().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_out_of_budget_applies_a_prefix_and_the_rest_applies_when_sent_again() {
    let env = Env::new().await;
    env.http_source("big", "s", &["big"]).await;
    env.commit_n("big", "s", 1_000).await;
    let (token, epoch) = lease(&env).await;
    let c = env
        .store
        .claim(&token, epoch, ClaimRequest::new(1_000, 1_000))
        .await
        .unwrap();
    assert_eq!(c.rows.len(), 1_000);
    let mut left: Vec<Outcome> = c
        .rows
        .iter()
        .map(|r| Outcome {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
            attempts: 1,
            first_attempt_ms: c.now_ms,
            claim: r.claim,
            op: SettleOp::Delivered,
        })
        .collect();
    let tiny = Some(Duration::from_micros(1));
    let mut calls = 0;
    while !left.is_empty() {
        let s = env
            .store
            .settle_budgeted(&token, epoch, &left, None, tiny)
            .await
            .unwrap();
        calls += 1;
        // The budget is checked every 16 outcomes: at least 16 (or all that are left).
        assert!(s.processed >= 16.min(left.len()), "call {calls}: {s:?}");
        if left.len() > 16 {
            assert!(s.processed < left.len(), "call {calls}: stopped early");
        }
        assert_eq!(s.applied, s.processed as u64, "call {calls}: {s:?}");
        assert_eq!(s.skipped, 0);
        // What the call did not look at is still claimed, under its token.
        let claimed: u64 = env
            .redis_cmd(&["ZCARD", &env.key("claimed")])
            .parse()
            .unwrap();
        assert_eq!(claimed, (left.len() - s.processed) as u64);
        left.drain(..s.processed);
    }
    assert!(calls > 1);
    let stats = env.redis_cmd(&["HGET", &env.key("stats"), "delivered"]);
    assert_eq!(stats, "1000", "each row delivered exactly once");
    assert_eq!(env.pending_rows(), 0);

    // A batch sent again after a partial call: the applied prefix is skipped, never applied
    // twice.
    env.commit_n("big", "s", 100).await;
    let c = env
        .store
        .claim(&token, epoch, ClaimRequest::new(100, 100))
        .await
        .unwrap();
    let batch: Vec<Outcome> = c
        .rows
        .iter()
        .map(|r| Outcome {
            tenant: r.tenant.clone(),
            row: r.row.clone(),
            attempts: 1,
            first_attempt_ms: c.now_ms,
            claim: r.claim,
            op: SettleOp::Delivered,
        })
        .collect();
    let first = env
        .store
        .settle_budgeted(&token, epoch, &batch, None, tiny)
        .await
        .unwrap();
    assert!(first.processed < 100);
    let again = env
        .store
        .settle_budgeted(&token, epoch, &batch, None, None)
        .await
        .unwrap();
    assert_eq!(again.processed, 100);
    assert_eq!(again.skipped, first.processed as u64);
    assert_eq!(again.applied, (100 - first.processed) as u64);
    let stats = env.redis_cmd(&["HGET", &env.key("stats"), "delivered"]);
    assert_eq!(stats, "1100");
}

/// The bounded-scripts scenario at CI size: one tenant with a large backlog plus 2 000
/// tenants with one row, drained by a worker whose budget is 1 ms: claims are cut short by
/// it (the page shrinks), yet every row is delivered exactly once and every one-row tenant
/// before the big backlog drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_tiny_budget_every_row_is_delivered_once_and_small_tenants_first() {
    let _ = metrics();
    let env = Env::tuned(|c| {
        c.dispatch.script_budget_ms = 1;
        c.dispatch.sink_concurrency = 32;
    })
    .await;
    let big = if cfg!(debug_assertions) {
        10_000
    } else {
        100_000
    };
    let small = 2_000;
    env.http_source("big", "s", &["big"]).await;
    let hooks: Vec<ankusa::Hook> = (0..500)
        .map(|i| ankusa::Hook::new(format!("{{\"i\":{i}}}")))
        .collect();
    for _ in 0..big / 500 {
        env.producer.commit_many("big", "s", &hooks).await.unwrap();
    }
    one_row_tenants(&env, small).await;
    let total = big + small;

    let stops_before = metric("ankusa_script_budget_stops_total", "script=\"claim\"");
    let worker = env.worker().await;
    let done = env
        .receiver
        .wait_until_async(Duration::from_secs(300), |r| r.len() >= total)
        .await;
    assert!(done, "{} of {total} delivered", env.receiver.count());
    env.drain(&worker).await;

    let reqs = env.receiver.requests();
    assert_eq!(reqs.len(), total, "no duplicate delivery");
    let ids: HashSet<&str> = reqs
        .iter()
        .map(|r| r.header("ankusa-delivery-id").expect("delivery id"))
        .collect();
    assert_eq!(ids.len(), total, "every row delivered once");
    let is_big = |r: &&ankusa::testkit::Received| r.path.ends_with("big");
    assert_eq!(reqs.iter().filter(is_big).count(), big);
    // Fairness: the last one-row tenant was served while most of the big backlog was
    // still waiting.
    let last_small = reqs.iter().rposition(|r| !r.path.ends_with("big")).unwrap();
    let big_before = reqs[..last_small].iter().filter(is_big).count();
    assert!(
        big_before < big / 2,
        "{big_before} of {big} big rows were delivered before the last small tenant"
    );
    let stats = env.redis_cmd(&["HGET", &env.key("stats"), "delivered"]);
    assert_eq!(stats, total.to_string());
    assert_eq!(env.pending_rows(), 0);
    // The budget did cut claims short: 2 000 tenants due at once cannot be visited in
    // 3/5 of a millisecond of Redis time.
    let stops = metric("ankusa_script_budget_stops_total", "script=\"claim\"") - stops_before;
    assert!(stops >= 1.0, "no claim stopped on its budget");
    worker.shutdown().await;
}

/// `hooks.lua` (a claimed page's hooks and bodies) under the budget: a call over it answers
/// the first hooks only and the rest are read by the next call, so a page of 1 000 hooks
/// reads the same, in the same order, as in one call (a gone hook included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_hooks_read_out_of_budget_is_read_in_several_calls_the_same() {
    let env = Env::new().await;
    env.http_source("big", "s", &["big"]).await;
    let mut ids = env.commit_n("big", "s", 1_000).await;
    ids.push(u64::MAX >> 1); // a hook that is not there
    let whole = env.store.fetch_hooks(&ids, None).await.unwrap();
    assert_eq!(whole.len(), ids.len());
    assert!(whole[..1_000].iter().all(|h| matches!(h, Some(Ok(_)))));
    assert!(whole[1_000].is_none(), "a gone hook reads as none");

    // This test's own Redis counts the script calls.
    let evalsha = || evalsha_calls(&env);
    let before = evalsha();
    let tiny = Some(Duration::from_micros(1));
    let split = env.store.fetch_hooks(&ids, tiny).await.unwrap();
    // Checked every 16 hooks: 16 a call, the last call takes what is left.
    assert_eq!(evalsha() - before, ids.len().div_ceil(16) as u64, "calls");
    assert_eq!(split.len(), whole.len());
    for (i, (a, b)) in whole.iter().zip(&split).enumerate() {
        let body = |h: &Option<Result<ankusa::store::StoredHook, String>>| {
            h.as_ref().map(|h| h.as_ref().map(|h| h.body.clone()).ok())
        };
        assert_eq!(body(a), body(b), "hook {i}");
    }
    assert_eq!(
        split[7].as_ref().unwrap().as_ref().unwrap().body,
        bytes::Bytes::from("{\"n\":7}")
    );
}

/// The scheduler's claim (`ClaimRequest::read_hooks`) reads its rows' hooks back in the same call,
/// each hook once, exactly as `hooks.lua` answers them (a malformed hook included); past its
/// budget it answers the first hooks only, and `hooks.lua` reads the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_page_reads_its_hooks_back_in_the_same_call() {
    let env = Env::new().await;
    env.http_source("big", "s", &["a", "b"]).await; // two rows per hook
    let ids = env.commit_n("big", "s", 300).await;
    // A hook hash overwritten with another type: its rows are claimed, its answer says so.
    let bad = ids[5];
    env.redis_cmd(&["DEL", &env.key(&format!("hook:{bad}"))]);
    env.redis_cmd(&["SET", &env.key(&format!("hook:{bad}")), "x"]);
    let whole = env.store.fetch_hooks(&ids, None).await.unwrap();
    let (token, epoch) = lease(&env).await;
    let evalsha = || evalsha_calls(&env);
    let weights = ankusa::store::ClaimWeights::default();
    let window = ankusa::store::ByteRooms {
        global: 1 << 30,
        alone: true,
        default_tenant: 1 << 30,
        tenants: Vec::new(),
    };
    let before = evalsha();
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                bytes: Some(&window),
                weights: Some(&weights),
                read_hooks: true,
                ..ClaimRequest::new(400, 1_000)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        evalsha() - before,
        1,
        "one script call for the page and its hooks"
    );
    assert_eq!(c.rows.len(), 400);
    let mut of_rows: Vec<u64> = c
        .rows
        .iter()
        .map(|r| r.row.split('.').next().unwrap().parse().unwrap())
        .collect();
    of_rows.dedup();
    let answered: Vec<u64> = c.hooks.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        answered, of_rows,
        "each hook of the page once, in the rows' order"
    );
    fn body(
        h: &Option<Result<ankusa::store::StoredHook, String>>,
    ) -> Option<Result<bytes::Bytes, String>> {
        h.as_ref()
            .map(|h| h.as_ref().map(|h| h.body.clone()).map_err(Clone::clone))
    }
    for (id, h) in &c.hooks {
        let i = ids.iter().position(|x| x == id).unwrap();
        assert_eq!(body(h), body(&whole[i]), "hook {id}");
    }
    let (_, bad_answer) = c.hooks.iter().find(|(id, _)| *id == bad).unwrap();
    assert!(
        matches!(bad_answer, Some(Err(e)) if e.contains("WRONGTYPE")),
        "{bad_answer:?}"
    );

    // Out of budget: the page's rows are claimed, only the first hooks answered (checked
    // every 16), and what is left reads the same through hooks.lua.
    let tiny = Some(Duration::from_micros(1));
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                bytes: Some(&window),
                budget: tiny,
                weights: Some(&weights),
                read_hooks: true,
                ..ClaimRequest::new(200, 1_000)
            },
        )
        .await
        .unwrap();
    assert!(!c.rows.is_empty());
    assert!(c.hooks.len() <= 16, "{} hooks answered", c.hooks.len());
    let mut of_rows: Vec<u64> = c
        .rows
        .iter()
        .map(|r| r.row.split('.').next().unwrap().parse().unwrap())
        .collect();
    of_rows.dedup();
    let left: Vec<u64> = of_rows[c.hooks.len()..].to_vec();
    let rest = env.store.fetch_hooks(&left, None).await.unwrap();
    for (id, h) in c
        .hooks
        .iter()
        .map(|(id, h)| (*id, h))
        .chain(left.iter().copied().zip(&rest))
    {
        let i = ids.iter().position(|x| *x == id).unwrap();
        assert_eq!(body(h), body(&whole[i]), "hook {id}");
    }
}

/// A row id written by hand with a padded hook id (`007.0`) names another key to the script
/// (`hook:007`, gone) than to the worker (hook 7): the claim's answer for it never stands for
/// the real hook, which the page still reads as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_padded_row_id_does_not_make_its_real_hook_look_gone() {
    let env = Env::new().await;
    env.http_source("pad", "s", &["pad"]).await;
    let hook = env.commit("pad", "s", "{\"real\":true}").await;
    let due = env.key("due:pad");
    let score: f64 = env
        .redis_cmd(&["ZSCORE", &due, &format!("{hook}.0")])
        .trim()
        .parse()
        .unwrap();
    // After the real row, so its "gone" answer comes last.
    let padded = format!("00{hook}.0");
    env.redis_cmd(&["ZADD", &due, &format!("{}", score + 0.5), &padded]);
    let (token, epoch) = lease(&env).await;
    let c = env
        .store
        .claim(
            &token,
            epoch,
            ClaimRequest {
                weights: Some(&ankusa::store::ClaimWeights::default()),
                read_hooks: true,
                ..ClaimRequest::new(10, 10)
            },
        )
        .await
        .unwrap();
    assert_eq!(c.rows.len(), 2, "{:?}", c.rows);
    let answers: Vec<_> = c.hooks.iter().filter(|(id, _)| *id == hook).collect();
    assert_eq!(answers.len(), 1, "{:?}", c.hooks);
    let body = answers[0]
        .1
        .as_ref()
        .unwrap()
        .as_ref()
        .unwrap()
        .body
        .clone();
    assert_eq!(body, bytes::Bytes::from("{\"real\":true}"));
}
