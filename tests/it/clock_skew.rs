//! A worker whose wall clock runs hours ahead of Redis' (libfaketime, preloaded; `.ci/run`
//! installs it): nothing is delivered early, `webhook-timestamp` and breaker snapshots are on
//! Redis' clock, and the skew is reported in `/readyz` and a metric.

use crate::common;
use crate::pool::{pool_env, WINDOW};

use common::procs::*;
use common::*;
use std::time::{Duration, Instant};

use ankusa::testkit::{Behavior, Reply};

/// Clock skew is tested with libfaketime (preloaded, installed by `.ci/run`): the worker's
/// wall clock runs 6 hours ahead. Due times come from Redis `TIME` only, so a retry due in
/// 2 s must still wait 2 s; a worker trusting its own clock would send it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_clock_is_hours_ahead_delivers_nothing_before_it_is_due() {
    let libfaketime = libfaketime();
    let backoff_ms = 2_000;
    let env = pool_env(|c| {
        c.retry.initial_backoff_ms = backoff_ms;
        c.retry.max_backoff_ms = backoff_ms;
        c.retry.jitter = 0.0;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set(
        "a",
        Behavior::Sequence(vec![Reply::status(500), Reply::status(500)]),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "skewed.toml", |_| {});
    let w = spawn_worker(
        &cfg,
        &dir,
        "skewed",
        &[],
        &[("LD_PRELOAD", libfaketime), ("FAKETIME", "+6h")],
    );
    wait_leader(&w).await;

    // The worker really runs 6 h ahead: its log lines carry its (fake) wall clock.
    let log = strip_ansi(&w.log_text());
    let stamp = log
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &stamp, "+%s"])
        .output()
        .expect("date");
    let logged: i64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("timestamp {stamp:?} in {log}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (logged - now - 6 * 3600).abs() < 600,
        "worker clock is {}s off, not 6 h",
        logged - now
    );

    let hooks = env.commit_n("acme", "orders", 1).await;
    assert!(
        env.receiver
            .wait_until_async(LIVENESS, |r| r.len() >= 3)
            .await
    );
    // webhook-timestamp is Redis' time, not the worker's 6 h ahead: a Standard Webhooks
    // receiver (a 5 min tolerance) accepts every attempt.
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for r in env.receiver.requests() {
        let ts: i64 = r
            .headers
            .iter()
            .find(|(k, _)| k == "webhook-timestamp")
            .and_then(|(_, v)| v.parse().ok())
            .expect("webhook-timestamp");
        assert!(
            (ts - real).abs() < 300,
            "webhook-timestamp {ts} is {} s from the real time",
            ts - real
        );
    }
    let at: Vec<Instant> = env.receiver.requests().iter().map(|r| r.at).collect();
    for pair in at.windows(2) {
        let gap = pair[1] - pair[0];
        // Due at Redis now + backoff, counted from after the failed answer was settled.
        assert!(
            gap >= Duration::from_millis(backoff_ms - 50),
            "retry sent {gap:?} after the last attempt, backoff {backoff_ms} ms"
        );
    }
    wait_idle(&env, LIVENESS).await;
    check_exact(&env, &hooks, 1, 0).await;
    // The skew is reported: readiness stays 200 with a `clock` detail, and the metric.
    let ready = readyz(&w.admin).await.expect("/readyz 200");
    let clock = ready["clock"].as_str().unwrap_or_default();
    assert!(
        clock.contains("s ahead of Redis'") && clock.starts_with("this worker's clock is 21"),
        "{ready}"
    );
    let (_, metrics) = get(&w.admin, "/metrics").await.expect("/metrics");
    let offset: f64 = metrics
        .lines()
        .find(|l| l.starts_with("ankusa_clock_offset_seconds"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no ankusa_clock_offset_seconds in\n{metrics}"));
    assert!((offset - 21_600.0).abs() < 600.0, "offset {offset}");
}

/// a leader whose wall clock runs 6 h ahead opens a breaker; the snapshot it leaves
/// for the next term is on Redis's clock (it ends within the open period of Redis `TIME`),
/// and a successor with a right clock probes when that period is over and delivers every
/// row. Before, the snapshot carried the skewed clock and the successor parked the sink's
/// rows for 6 h (found by the fault soak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_a_leader_hours_ahead_is_kept_on_redis_clock() {
    const OPEN_MS: i64 = 3_000;
    let env = pool_env(|c| {
        c.dispatch.breaker_failures = 3;
        c.dispatch.breaker_open_ms = OPEN_MS as u64;
        c.dispatch.breaker_max_open_ms = 60_000;
        c.dispatch.sink_concurrency = 1;
        c.retry.initial_backoff_ms = 10;
        c.retry.max_backoff_ms = 20;
    })
    .await;
    env.http_source("acme", "orders", &["a"]).await;
    env.receiver.set("a", Behavior::Status(503));
    let hooks = env.commit_n("acme", "orders", 20).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&env, &dir, "skewed.toml", |_| {});
    let mut skewed = spawn_worker(
        &cfg,
        &dir,
        "skewed",
        &[],
        &[("LD_PRELOAD", libfaketime()), ("FAKETIME", "+6h")],
    );
    let breakers = env.key("breakers");
    let snapshot = || {
        let v = env.redis_cmd(&["HVALS", &breakers]);
        v.lines().next().map(str::to_string).unwrap_or_default()
    };
    assert!(
        poll_until(LIVENESS, || async { !snapshot().is_empty() }).await,
        "the skewed leader never opened the breaker:\n{}",
        skewed.log_text()
    );
    let redis_now_ms = || {
        let t = env.redis_cmd(&["TIME"]);
        let mut l = t.lines().map(|l| l.trim().parse::<i64>().expect("TIME"));
        let (s, us) = (l.next().unwrap(), l.next().unwrap());
        s * 1000 + us / 1000
    };
    let (snap, now) = (snapshot(), redis_now_ms());
    let until: i64 = snap.split(':').next().unwrap().parse().expect(&snap);
    assert!(
        until - now <= OPEN_MS,
        "the breaker snapshot ends {} ms after Redis TIME (open period {OPEN_MS} ms): \
         the skewed worker's clock reached Redis ({snap})",
        until - now
    );
    skewed.kill9();
    env.receiver.set("a", Behavior::Status(200));
    let w = spawn_worker(&cfg, &dir, "right", &[], &[]);
    wait_leader(&w).await;
    // Not `wait_idle`: rows parked behind the restored breaker are not due, so idle.
    let delivered = || async { env.store.totals().await.map_or(0, |t| t.delivered) };
    assert!(
        poll_until(LIVENESS, || async {
            delivered().await == hooks.len() as u64
        })
        .await,
        "{} of {} delivered after the right-clock leader took over: {:?}\n{}",
        delivered().await,
        hooks.len(),
        env.redis_cmd(&["HGETALL", &breakers]),
        w.log_text()
    );
    check_exact(&env, &hooks, 1, WINDOW).await;
}

/// The text without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
